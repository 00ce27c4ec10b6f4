"""testkit.pacing, the open-loop pace of every load generator: beats a period apart on a fixed
schedule; a caller that fell behind makes up the beats it missed, at most ``catch_up_s`` worth (all of
them: the benchmarks' paced calls; none: a sampler; one second: the chaos producer)."""

from __future__ import annotations

import math

import pytest

from testkit.pacing import Pace

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("catch_up_s", "now", "want_next_at", "want_wait_s"),
    [
        pytest.param(math.inf, 10.05, 10.2, 0.15, id="on time: the next beat one period on"),
        pytest.param(math.inf, 15.0, 10.2, 0.0, id="behind, every beat made up: due at once, the schedule kept"),
        pytest.param(0.0, 10.05, 10.2, 0.15, id="on time, nothing made up: the same"),
        pytest.param(0.0, 15.0, 15.0, 0.0, id="behind, nothing made up: the schedule starts again from now"),
        pytest.param(1.0, 10.5, 10.2, 0.0, id="behind by less than the catch-up: the schedule kept"),
        pytest.param(1.0, 15.0, 14.0, 0.0, id="behind by more: one second of beats made up, no more"),
    ],
)
def test_advance_keeps_the_schedule_up_to_the_catch_up(catch_up_s, now, want_next_at, want_wait_s):
    pace = Pace(period=0.1, next_at=10.1, catch_up_s=catch_up_s)
    pace.advance(now)
    assert pace.next_at == pytest.approx(want_next_at)
    assert pace.wait_s(now) == pytest.approx(want_wait_s)


def test_beats_come_at_the_offered_rate_whatever_the_answers_take():
    pace, beats, now = Pace(period=0.25, next_at=0.0), [], 0.0
    while pace.next_at < 2.0:
        now += pace.wait_s(now)
        beats.append(now)
        now += 0.3 if len(beats) == 2 else 0.01  # one slow answer
        pace.advance(now)
    assert beats == pytest.approx([0.0, 0.25, 0.55, 0.75, 1.0, 1.25, 1.5, 1.75])
