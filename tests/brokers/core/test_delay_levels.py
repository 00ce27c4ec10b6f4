"""4.x delay levels (brokers/core/delay_levels.py), table-tested: parsing ``messageDelayLevel``, a DELAY
property's level and its delay (clamped as RocketMQ clamps it), a delivery time rounded up to a level
(RocketMQ's computeDelayLevel), and the broker.conf keys."""

from __future__ import annotations

import pytest

from brokers.config import ConfigInvalid, from_mapping
from brokers.core.delay_levels import DEFAULT_DELAY_LEVELS, level_delay_ms, level_for, level_of, parse_delay_levels

pytestmark = pytest.mark.unit

S, M, H = 1000, 60_000, 3_600_000
DEFAULT = parse_delay_levels(DEFAULT_DELAY_LEVELS)


def test_the_default_levels_are_rocketmqs_eighteen():
    assert DEFAULT == (1 * S, 5 * S, 10 * S, 30 * S, *(n * M for n in range(1, 11)), 20 * M, 30 * M, 1 * H, 2 * H)


@pytest.mark.parametrize("text, want", [("1s", (S,)), (" 2m  3h 1d ", (2 * M, 3 * H, 86_400_000)), ("250s", (250 * S,))])
def test_levels_parse_in_seconds_minutes_hours_and_days(text, want):
    assert parse_delay_levels(text) == want


@pytest.mark.parametrize("text, why", [("", "at least one"), ("1s 5x", "'5x'"), ("s", "'s'"), ("0s", "'0s'"), ("1.5s", "'1.5s'")])
def test_a_bad_level_list_names_the_bad_item(text, why):
    with pytest.raises(ValueError, match=why):
        parse_delay_levels(text)


@pytest.mark.parametrize(
    "level, want",
    [
        (1, S),
        (3, 10 * S),
        (18, 2 * H),
        (19, 2 * H),  # above the last: the last
        (999, 2 * H),
        (0, None),  # no delay
        (-1, None),
    ],
)
def test_a_level_is_due_its_delay_after_it_is_stored(level, want):
    assert level_delay_ms(level, DEFAULT) == want


@pytest.mark.parametrize("text, want", [("3", 3), (" 2 ", 2), ("-1", -1), ("0", 0)])
def test_a_delay_property_is_a_whole_number(text, want):
    assert level_of(text) == want


@pytest.mark.parametrize("text", ["", "x", "1.5", "1s", "--1"])
def test_a_delay_property_that_is_not_a_whole_number_is_refused(text):
    with pytest.raises(ValueError, match="DELAY must be a whole number"):
        level_of(text)


@pytest.mark.parametrize(
    "wait_ms, level",
    [
        (0, 1),
        (999, 1),
        (1 * S, 2),  # a level must be longer than the wait: exactly 1 s is rounded up to 5 s
        (2 * S, 2),
        (5 * S + 1, 3),
        (90 * M, 18),
        (2 * H, 18),  # longer than every level: the longest
        (3 * H, 18),
    ],
)
def test_a_delivery_time_is_rounded_up_to_a_level(wait_ms, level):
    assert level_for(wait_ms, DEFAULT) == level


def test_levels_out_of_order_are_rounded_by_their_delay_not_their_number():
    levels = parse_delay_levels("1m 1s 10s")
    assert [level_for(w, levels) for w in (0, 2 * S, 20 * S, 2 * M)] == [2, 3, 1, 1]


BASE = {"brokerName": "b", "storePathRootDir": "/tmp/x", "controlPlaneUrl": "http://h", "controlPlaneToken": "t"}


def test_broker_conf_takes_levels_and_use_delay_level():
    config = from_mapping(BASE | {"messageDelayLevel": "1s 2s", "useDelayLevel": "true"})
    assert (config.messageDelayLevel, config.useDelayLevel) == ("1s 2s", True)
    assert from_mapping(BASE).messageDelayLevel == DEFAULT_DELAY_LEVELS


@pytest.mark.parametrize(
    "keys, problem",
    [
        ({"messageDelayLevel": "1s 1y"}, "messageDelayLevel: '1y' is not a delay"),
        ({"messageDelayLevel": "1s 4d"}, "messageDelayLevel: a level is longer than timerMaxDelaySec"),
        ({"messageDelayLevel": "1h", "timerMaxDelaySec": "60"}, "longer than timerMaxDelaySec"),
    ],
)
def test_broker_conf_refuses_bad_levels(keys, problem):
    with pytest.raises(ConfigInvalid) as bad:
        from_mapping(BASE | keys)
    assert any(problem in p for p in bad.value.problems), bad.value.problems
