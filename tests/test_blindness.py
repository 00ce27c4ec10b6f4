"""The blindness guard's rule (controlplane/blindness.py): tables of the cases issue 19 names, and
properties. Times are ms on the control plane's clock; brokers beat every 1 s, time out after 10 s."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.blindness import Span, blind_now, heard_millis, horizon, merged, pending, silent_past, warm

pytestmark = pytest.mark.unit

G, GAP = 1_500, 5_000


@pytest.mark.parametrize(
    "beats, expected",
    [
        pytest.param([], None, id="nobody-known"),
        pytest.param([7], 7, id="one-broker: its own beat"),
        pytest.param([100, 90], 100, id="two: the newer (one of two is half)"),
        pytest.param([100, 90, 80], 90, id="three: the second newest (two of three)"),
        pytest.param([100, 90, 80, 70], 90, id="four: two of four is half"),
        pytest.param([10, 100, 80, 90, 70], 80, id="five: three of five, in any order"),
    ],
)
def test_the_horizon_is_the_instant_by_which_half_the_brokers_were_heard(beats, expected):
    assert horizon(beats) == expected


@pytest.mark.parametrize(
    "beat_at_horizon, last_look, now, expected",
    [
        pytest.param(9_500, 9_500, 10_000, [], id="healthy: heard half within the grace"),
        pytest.param(0, 9_500, 10_000, [Span(G, 10_000)], id="half silent since 0: blind after the grace"),
        pytest.param(9_500, 0, 10_000, [Span(GAP, 10_000)], id="nobody looked for 10 s: blind after the gap"),
        pytest.param(None, None, 10_000, [], id="first look, nobody known"),
        pytest.param(None, 4_999, 10_000, [Span(9_999, 10_000)], id="nobody known, a look missed"),
    ],
)
def test_pending_blind_spans(beat_at_horizon, last_look, now, expected):
    assert pending(beat_at_horizon, last_look, now, grace=G, max_gap=GAP) == expected


def test_merging_joins_touching_spans_and_drops_old_and_empty_ones():
    assert merged([Span(5, 9), Span(0, 5), Span(20, 30), Span(25, 26), Span(40, 40)], 100, keep=1_000) == (
        Span(0, 9),
        Span(20, 30),
    )
    assert merged([Span(0, 10), Span(50, 60)], 100, keep=45) == (Span(50, 60),)
    assert merged([Span(i * 10, i * 10 + 1) for i in range(10)], 100, limit=3) == (Span(70, 71), Span(80, 81), Span(90, 91))


# The cases the issue names. The web tier (or Redis, or the channel layer) is away from 20 s to 35 s;
# every broker's last beat before it is at 19.5 s..20 s. The scans' looks record the blind span.
OUTAGE = (Span(20_000 + G, 35_000),)


@pytest.mark.parametrize(
    "last_beat, now, blind, dead",
    [
        pytest.param(19_500, 31_000, (), True, id="no outage: 11.5 s of silence is past 10 s"),
        pytest.param(19_500, 31_000, OUTAGE, False, id="web tier down 15 s: only 2 s were heard"),
        pytest.param(19_500, 35_500, OUTAGE, False, id="back: a live broker beats again within 1 s"),
        pytest.param(19_500, 43_100, OUTAGE, True, id="the master killed with the web process: dead 10 s of hearing later"),
        pytest.param(19_500, 43_000, OUTAGE, False, id="... and not a moment before"),
        pytest.param(36_000, 46_001, OUTAGE, True, id="silence after the outage counts in full"),
    ],
)
def test_a_broker_is_dead_only_for_silence_the_control_plane_could_hear(last_beat, now, blind, dead):
    assert silent_past(last_beat, 10_000, now, blind) is dead


def test_a_broker_missing_after_a_redis_restart_is_not_judged_until_the_record_is_a_timeout_old():
    # Redis restarted at 50 s: the record began at the first look after it.
    assert not warm(None, 50_000, (), 10_000)
    assert not warm(50_000, 59_999, (), 10_000)
    assert warm(50_000, 60_000, (), 10_000)
    assert not warm(50_000, 61_000, (Span(52_000, 55_000),), 10_000)  # blind time is not warm time


def test_blind_now_is_inside_a_span():
    assert blind_now((Span(10, 20),), 20) and blind_now((Span(10, 20),), 11)
    assert not blind_now((Span(10, 20),), 10) and not blind_now((Span(10, 20),), 21) and not blind_now((), 5)


spans = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 2_000)).map(lambda t: Span(t[0], t[0] + t[1])), max_size=8)


@given(spans, st.integers(0, 10_000), st.integers(0, 10_000))
def test_heard_time_never_exceeds_real_time_and_blindness_never_hastens_a_death(blind, start, length):
    end = start + length
    norm = merged(blind, end, keep=10**9)
    heard = heard_millis(start, end, norm)
    assert 0 <= heard <= length
    # Whoever is dead with blind spans was dead without them (the guard only ever waits).
    for timeout in (0, 500, 3_000):
        if silent_past(start, timeout, end, norm):
            assert silent_past(start, timeout, end, ())


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=50))
def test_at_least_half_the_brokers_were_heard_at_or_after_the_horizon(beats):
    h = horizon(beats)
    assert 2 * sum(b >= h for b in beats) >= len(beats)
    assert 2 * sum(b > h for b in beats) < len(beats)  # and it is the latest such instant
