"""testkit.stats, the percentile and median every benchmark and soak figure uses: the nearest rank
(index round(p / 100 * (n - 1)), half to even), never an interpolated value; the statistics module's
median (the mean of the middle two); NaN, or None for a printed figure, when nothing was measured."""

from __future__ import annotations

import math

import pytest

from testkit.stats import median, percentile, rounded_median, rounded_percentile

pytestmark = pytest.mark.unit

TEN = [float(v) for v in range(1, 11)]


@pytest.mark.parametrize(
    ("values", "p", "want"),
    [
        pytest.param(TEN, 50, 5.0, id="p50 of 1..10: index round(4.5) = 4 (half to even), no interpolation"),
        pytest.param(TEN, 90, 9.0, id="p90 of 1..10: index round(8.1) = 8"),
        pytest.param(TEN, 99, 10.0, id="p99 of 1..10: index round(8.91) = 9, the largest"),
        pytest.param(TEN, 0, 1.0, id="p0 is the smallest"),
        pytest.param(TEN, 100, 10.0, id="p100 is the largest"),
        pytest.param([2.0, 1.0], 50, 1.0, id="p50 of two: index round(0.5) = 0 (half to even)"),
        pytest.param([3.0, 1.0, 2.0], 50, 2.0, id="unsorted input is sorted first"),
        pytest.param([7.5], 99, 7.5, id="one sample is every percentile"),
        pytest.param(list(range(1, 1001)), 99, 990, id="p99 of 1..1000: index round(989.01) = 989"),
    ],
)
def test_percentile_is_the_nearest_rank(values, p, want):
    assert percentile(values, p) == want


@pytest.mark.parametrize(
    ("values", "want"),
    [
        pytest.param([3.0, 1.0, 2.0], 2.0, id="odd count: the middle one"),
        pytest.param([4.0, 1.0, 2.0, 3.0], 2.5, id="even count: the mean of the middle two (not percentile 50)"),
        pytest.param([5.0], 5.0, id="one sample"),
    ],
)
def test_median_is_the_statistics_modules(values, want):
    assert median(values) == want


def test_nothing_measured_is_nan_or_no_figure():
    assert math.isnan(percentile([], 99)) and math.isnan(median([]))
    assert rounded_percentile([], 99) is None and rounded_median([]) is None


@pytest.mark.parametrize(
    ("values", "digits", "want_p99", "want_median"),
    [
        pytest.param([0.12345, 0.23456], 3, 0.235, 0.179, id="3 places by default"),
        pytest.param([12.345, 23.456], 1, 23.5, 17.9, id="1 place for milliseconds"),
    ],
)
def test_printed_figures_are_rounded(values, digits, want_p99, want_median):
    assert rounded_percentile(values, 99, digits) == want_p99
    assert rounded_median(values, digits) == want_median
