"""brokers/core/retention.py: the disk's pressure and full flag, and which file goes when."""

from __future__ import annotations

import pytest

from brokers.core.retention import (
    DeleteReason,
    LogFile,
    Pressure,
    RetentionPolicy,
    disk_state,
    next_deletion,
    parse_delete_when,
    ratio_problems,
    seconds_until_full,
)

pytestmark = pytest.mark.unit

H = 3_600_000
POLICY = RetentionPolicy(
    reserved_ms=72 * H,
    delete_hours=frozenset({4}),
    max_used_ratio=75,
    clean_forcibly_ratio=85,
    warning_ratio=90,
    clean_forcibly=True,
)
NOW = 1_000 * H
OLD = LogFile(0, 100, NOW - 73 * H)  # expired
NEW = LogFile(0, 100, NOW - 1 * H)  # not expired
LAST = LogFile(100, 150, NOW)


@pytest.mark.parametrize(
    "used, was_full, pressure, full",
    [
        (50.0, False, Pressure.OK, False),
        (75.0, False, Pressure.OK, False),  # at a ratio is not past it
        (75.1, False, Pressure.CLEAN, False),
        (85.1, False, Pressure.FORCE, False),
        (90.1, False, Pressure.FULL, True),
        (88.0, True, Pressure.FORCE, True),  # full until back at the forced-clean ratio
        (85.0, True, Pressure.CLEAN, False),
        (50.0, True, Pressure.OK, False),
    ],
)
def test_disk_state(used, was_full, pressure, full):
    state = disk_state(used, was_full, POLICY)
    assert (state.pressure, state.full) == (pressure, full)


@pytest.mark.parametrize(
    "oldest, hour, pressure, protect, policy, expected",
    [
        (OLD, 4, Pressure.OK, 200, POLICY, DeleteReason.EXPIRED),  # expired, at the deleteWhen hour
        (OLD, 5, Pressure.OK, 200, POLICY, None),  # expired, another hour, disk fine: waits for 04
        (OLD, 5, Pressure.CLEAN, 200, POLICY, DeleteReason.EXPIRED),  # past diskMaxUsedSpaceRatio: at once
        (NEW, 4, Pressure.CLEAN, 200, POLICY, None),  # not expired: only forced cleaning takes it
        (NEW, 5, Pressure.FORCE, 200, POLICY, DeleteReason.FORCED),
        (NEW, 5, Pressure.FULL, 200, POLICY, DeleteReason.FORCED),
        (NEW, 5, Pressure.FULL, 200, RetentionPolicy(**{**POLICY.__dict__, "clean_forcibly": False}), None),
        (OLD, 4, Pressure.FULL, 99, POLICY, None),  # holds bytes not confirmed yet: never
    ],
)
def test_next_deletion(oldest, hour, pressure, protect, policy, expected):
    got = next_deletion([oldest, LAST], now_ms=NOW, hour=hour, pressure=pressure, protect_offset=protect, policy=policy)
    assert (got.reason if got else None) == expected
    if got:
        assert got.file == oldest


def test_the_file_being_written_is_never_deleted():
    assert next_deletion([OLD], now_ms=NOW, hour=4, pressure=Pressure.FULL, protect_offset=10**9, policy=POLICY) is None


@pytest.mark.parametrize("text, hours", [("04", {4}), ("4", {4}), ("01;13", {1, 13}), (" 00 ; 23 ", {0, 23})])
def test_delete_when_parses(text, hours):
    assert parse_delete_when(text) == hours


@pytest.mark.parametrize("text", ["", "24", "4am", "04;", "-1", "04,05"])
def test_delete_when_refuses(text):
    with pytest.raises(ValueError, match="not an hour"):
        parse_delete_when(text)


@pytest.mark.parametrize(
    "ratios, keys",
    [
        ((75, 85, 90), []),
        ((9, 85, 90), ["diskMaxUsedSpaceRatio"]),
        ((75, 85, 96), ["diskSpaceWarningLevelRatio"]),
        ((86, 85, 90), ["diskSpaceCleanForciblyRatio"]),  # out of order
        ((75, 91, 90), ["diskSpaceCleanForciblyRatio"]),
    ],
)
def test_ratio_problems(ratios, keys):
    assert [p.split(":")[0] for p in ratio_problems(*ratios)] == keys


def test_seconds_until_full():
    assert seconds_until_full(1000, 500, 0.0, 90) is None
    assert seconds_until_full(1000, 500, 100.0, 90) == pytest.approx(4.0)
    assert seconds_until_full(1000, 950, 100.0, 90) == 0.0
