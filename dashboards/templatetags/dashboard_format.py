"""Formatting for the dashboard's templates; static/js/live.js formats live values the same way."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from django import template

register = template.Library()


@register.filter
def ms_time(value) -> str:
    """Epoch milliseconds (Redis's clock, as heartbeats are stamped) -> "YYYY-MM-DD HH:MM:SS" UTC."""
    if value is None or value == "":
        return "—"
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


@register.filter
def when(value) -> str:
    """A datetime (or an ISO string) -> "YYYY-MM-DD HH:MM:SS" UTC."""
    if value is None or value == "":
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@register.filter
def grouped(value) -> str:
    """12345678 -> "12 345 678" (byte offsets are long); None -> "—"."""
    if value is None or value == "":
        return "—"
    return f"{int(value):,}".replace(",", "\u202f")


@register.filter
def id_set(value) -> str:
    """[1, 2] -> "{1, 2}"."""
    if value is None:
        return "—"
    return "{" + ", ".join(str(i) for i in sorted(value)) + "}"


@register.filter
def perm(value) -> str:
    """A topic perm (reference §3.2, PermName) as r/w letters: 6 -> "rw", 4 -> "r-"."""
    value = int(value)
    return ("r" if value & 4 else "-") + ("w" if value & 2 else "-") + ("i" if value & 1 else "")


@register.filter
def bytes_size(value) -> str:
    """1536 -> "1.5 KiB" ("—" for none)."""
    if value is None or value == "":
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "—"


@register.filter
def duration_s(value) -> str:
    """Seconds as "3 d 4 h", "2 h 5 min", "4 min 10 s" or "12 s" ("—" for none)."""
    if value is None or value == "":
        return "—"
    s = int(float(value))
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d} d {h} h"
    if h:
        return f"{h} h {m} min"
    if m:
        return f"{m} min {s % 60} s"
    return f"{s} s"


@register.filter
def ms_to_s(value):
    """Milliseconds as seconds (None stays None)."""
    return None if value is None or value == "" else int(value) / 1000


@register.filter
def yes_no(value) -> str:
    return "yes" if value else "no"


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
