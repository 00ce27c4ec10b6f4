"""Gauge families in Prometheus' text format 0.0.4, exactly as prometheus_client's ``generate_latest``
writes them (tests/brokers/test_metrics.py and tests/operations/test_metrics.py hold the two equal).

Both exporters use prometheus_client for their families, but write the few families with thousands of
series through this: the broker's consumer backlogs (a series per group and topic) and the control
plane's replica groups (a few per group). The library formats every sample's labels and value anew at
each scrape, which alone takes longer than a scrape of 50,000 series may (docs/metrics.md); here a
series' label text is formatted once and reused."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache


def escape(value: str) -> str:
    """A label value: backslash, newline and double quote escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@lru_cache(maxsize=1 << 16)
def label_text(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """``a="1",b="2"``: the labels sorted by name, as the library writes them (kept: series repeat)."""
    return ",".join(f'{k}="{escape(v)}"' for k, v in sorted(zip(names, values, strict=True)))


def number(value: float) -> str:
    """A sample's value as the library writes it (Go's float formatting: ``1.0``, ``1.5e+06``)."""
    d = float(value)
    if math.isinf(d):
        return "+Inf" if d > 0 else "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def gauge_text(name: str, documentation: str, rows: Iterable[tuple[str, float]]) -> str:
    """A gauge family: its HELP and TYPE lines, then a line per ``(label text, value)`` row."""
    doc = documentation.replace("\\", "\\\\").replace("\n", "\\n")
    head = f"# HELP {name} {doc}\n# TYPE {name} gauge\n"
    return head + "".join(f"{name}{{{labels}}} {number(v)}\n" if labels else f"{name} {number(v)}\n" for labels, v in rows)
