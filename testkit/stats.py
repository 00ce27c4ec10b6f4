"""The percentile and the median of a benchmark's or a soak's samples: one definition for every figure
that bench/ and chaos/ print, so that a p99 means the same in each report.

``percentile`` is the nearest rank on the sorted samples, the rank rounded with Python's ``round``
(half to even): the p-th percentile of n samples is the one at index ``round(p / 100 * (n - 1))``. It
never interpolates: every figure is a sample that was measured. ``median`` is the statistics module's
(the mean of the middle two of an even count), which is not ``percentile(values, 50)`` for an even
count: the figures named ``*_median`` use it, except the soak's ``rto_median_s``, a 50th percentile.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable


def percentile(values: Iterable[float], p: float) -> float:
    """The ``p``-th percentile of ``values`` (0 <= p <= 100, the nearest rank); NaN when there are none."""
    s = sorted(values)
    if not s:
        return math.nan
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the mean of the middle two of an even count); NaN when there are none."""
    s = list(values)
    return statistics.median(s) if s else math.nan


def rounded_percentile(values: Collection[float], p: float, digits: int = 3) -> float | None:
    """``percentile`` rounded to ``digits`` places, as a report prints it; None when there are no values."""
    return round(percentile(values, p), digits) if values else None


def rounded_median(values: Collection[float], digits: int = 3) -> float | None:
    """``median`` rounded to ``digits`` places, as a report prints it; None when there are no values."""
    return round(median(values), digits) if values else None
