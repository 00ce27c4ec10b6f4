"""How the verbs print: mqadmin's tables and ``key  value`` listings, times, durations, yes or no."""

from __future__ import annotations

import json
import time


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers, *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def local_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def seconds(ms: int | None) -> str:
    return "" if ms is None else f"{ms / 1000:.1f} s"


def yes_no(flag: object) -> str:
    return "" if flag is None else ("yes" if flag else "no")


def pairs(d: dict, indent: str = "") -> str:
    """One ``key  value`` line per field (mqadmin's listing); nested objects as compact JSON."""
    width = max((len(str(k)) for k in d), default=0)
    return "\n".join(
        f"{indent}{str(k).ljust(width)}  {json.dumps(v) if isinstance(v, dict | list) else ('' if v is None else v)}".rstrip()
        for k, v in d.items()
    )


def report_state(row: dict) -> str:
    """A broker's report behind a row: ``stale`` once too old, else ``live``."""
    return "stale" if row.get("stale") else "live"
