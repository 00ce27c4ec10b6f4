"""The blindness guard's rule (controlplane/blindness.py): tables of the cases issues 19 and 34 name, and
properties. Times are ms on the control plane's clock; unless a case says otherwise, brokers beat every
1 s and time out after 10 s."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.blindness import (
    Span,
    blind_now,
    expectation,
    heard_millis,
    horizon,
    merged,
    pending,
    silent_past,
    warm,
)

pytestmark = pytest.mark.unit

G, GAP, WEB_G, STALE = 500, 5_000, 1_000, 60_000


@pytest.mark.parametrize(
    "now, previous, timeout, expected",
    [
        pytest.param(10_000, None, 3_000, 11_000, id="first beat: a third of its timeout (at least 1 s)"),
        pytest.param(10_000, None, 120_000, 50_000, id="first registration, 120 s: due within 40 s"),
        pytest.param(10_000, None, 4_000, 11_333, id="first beat, 4 s: due within 1.33 s"),
        pytest.param(10_000, None, 500, 10_500, id="first beat, 500 ms: never later than its timeout"),
        pytest.param(10_000, 9_000, 3_000, 11_000, id="a 1 s beater: due a second later"),
        pytest.param(60_000, 30_000, 90_000, 90_000, id="a 30 s beater with a 90 s timeout: due 30 s later"),
        pytest.param(60_000, 30_000, 10_000, 70_000, id="never later than its own timeout"),
        pytest.param(10_000, 9_995, 3_000, 11_000, id="a burst (register, then a beat): the minimum interval"),
        pytest.param(10_000, 9_000, 100, 10_100, id="a 100 ms timeout: due within it"),
    ],
)
def test_each_heartbeat_says_when_the_next_is_due(now, previous, timeout, expected):
    assert expectation(now, previous, timeout) == expected


@pytest.mark.parametrize(
    "expectations, now, expected",
    [
        pytest.param([], None, None, id="nobody-known"),
        pytest.param([7], None, 7, id="one-broker: its own"),
        pytest.param([100, 90], None, 100, id="two: the later (one of two is half)"),
        pytest.param([100, 90, 80], None, 90, id="three: the second latest (two of three)"),
        pytest.param([100, 90, 80, 70], None, 90, id="four: two of four is half"),
        pytest.param([10, 100, 80, 90, 70], None, 80, id="five: three of five, in any order"),
        pytest.param([100_000, 99_000, 98_000, 20_000, 10_000], 100_000, 99_000, id="stale ones count for nothing"),
        pytest.param([10_000, 20_000], 100_000, None, id="everyone stale: nobody due"),
    ],
)
def test_the_horizon_is_the_instant_by_which_more_than_half_the_brokers_due_were_expected(expectations, now, expected):
    assert horizon(expectations, now, stale=STALE) == expected


@pytest.mark.parametrize(
    "at_horizon, last_look, web, now, expected",
    [
        pytest.param(10_500, 9_500, 9_900, 10_000, [], id="healthy: half are not due yet"),
        pytest.param(0, 9_500, 9_900, 10_000, [Span(G, 10_000)], id="half overdue since 0: blind after the grace"),
        pytest.param(10_500, 0, 9_900, 10_000, [Span(GAP, 10_000)], id="nobody looked for 10 s: blind after the gap"),
        pytest.param(10_500, 9_500, 5_000, 10_000, [Span(5_000 + WEB_G, 10_000)], id="no web stamp for 5 s: blind"),
        pytest.param(10_500, 9_500, None, 10_000, [], id="never stamped (no web tier yet): rule 3 says nothing"),
        pytest.param(None, None, None, 10_000, [], id="first look, nobody known"),
        pytest.param(None, 4_999, 9_900, 10_000, [Span(9_999, 10_000)], id="nobody known, a look missed"),
    ],
)
def test_pending_blind_spans(at_horizon, last_look, web, now, expected):
    assert pending(at_horizon, last_look, now, web=web, grace=G, max_gap=GAP, web_grace=WEB_G) == expected


def test_merging_joins_touching_spans_and_drops_old_and_empty_ones():
    assert merged([Span(5, 9), Span(0, 5), Span(20, 30), Span(25, 26), Span(40, 40)], 100, keep=1_000) == (
        Span(0, 9),
        Span(20, 30),
    )
    assert merged([Span(0, 10), Span(50, 60)], 100, keep=45) == (Span(50, 60),)
    assert merged([Span(i * 10, i * 10 + 1) for i in range(10)], 100, limit=3) == (Span(70, 71), Span(80, 81), Span(90, 91))


# The cases the issue names. The web tier (or Redis, or the channel layer) is away from 20 s to 35 s;
# every broker's last beat before it is at 19.5 s..20 s. The scans' looks record the blind span.
OUTAGE = (Span(21_500, 35_000),)


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
def test_at_least_half_the_brokers_are_due_at_or_after_the_horizon(expectations):
    h = horizon(expectations)
    assert 2 * sum(e >= h for e in expectations) >= len(expectations)
    assert 2 * sum(e > h for e in expectations) < len(expectations)  # and it is the latest such instant


# Whole clusters through time, as the hearing record runs them (controlplane.hearing): brokers beat on
# their own intervals, each beat sets its expectation, the web tier stamps every 250 ms, and a scan
# looks every 500 ms (recording the pending spans) and judges.


@dataclass(frozen=True)
class Broker:
    name: str
    interval: int
    timeout: int
    phase: int = 0  # first beat at this offset
    stops: int | None = None  # last beat before this instant (killed, partitioned or decommissioned)
    last_timeout: int | None = None  # the timeout its last beat declared


def mixed(**fast_master) -> list[Broker]:
    """20 sets of 3 declaring 90 s and beating every 30 s, and one set beating every second (3 s)."""
    slow = [Broker(f"slow-{i}", 30_000, 90_000, phase=(i * 487) % 30_000) for i in range(60)]
    fast = [
        Broker("fast-master", 1_000, 3_000, **fast_master),
        Broker("fast-1", 1_000, 3_000, 300),
        Broker("fast-2", 1_000, 3_000, 600),
    ]
    return [*slow, *fast]


def dead_at(brokers, until, *, web_down=(), heard_down=(), now_from=0):
    """Runs the cluster to ``until``; returns {broker: the first look that judged it silent past its
    timeout}. ``web_down``: (start, end) when the web tier is down (no stamp, no heartbeat heard);
    ``heard_down``: when no heartbeat reaches the control plane though its web tier serves (a partition)."""
    last, due, timeout = {}, {}, {}
    recorded, look, web = [], None, None
    out = {}
    events = sorted(
        [
            (t, 0, i, "beat")
            for i, b in enumerate(brokers)
            for t in range(b.phase, until, b.interval)
            if b.stops is None or t < b.stops
        ]
        + [(t, 1, 0, "web") for t in range(0, until, 250)]
        + [(t, 2, 0, "look") for t in range(500, until, 500)]
    )
    for t, _, i, what in events:
        b = brokers[i]
        cut = any(a <= t < z for a, z in (*web_down, *heard_down))
        if what == "web" and not any(a <= t < z for a, z in web_down):
            web = t
        elif what == "beat" and not cut:
            tmo = b.last_timeout if b.last_timeout and b.stops and t + b.interval >= b.stops else b.timeout
            due[b.name] = expectation(t, last.get(b.name), tmo)
            last[b.name], timeout[b.name] = t, tmo
        elif what == "look" and t >= now_from:
            blind = merged([*recorded, *pending(horizon(due.values(), t), look, t, web=web)], t)
            recorded, look = list(blind), t
            for name in last:
                if name not in out and silent_past(last[name], timeout[name], t, blind):
                    out[name] = t
    return out


def test_mixed_timeouts_a_dead_fast_master_expires_after_its_own_timeout():
    """Issue 34: with 60 brokers beating every 30 s (90 s timeout) beside one set beating every second,
    the fast master's last beat declares 100 ms and it dies: more than half the brokers have not beaten
    within 1.5 s, yet none of them is due, so the control plane is not blind and the master expires."""
    out = dead_at(mixed(stops=20_001, last_timeout=100), 40_000)
    assert out == {"fast-master": 20_500}


def test_mixed_timeouts_nobody_alive_expires():
    assert dead_at(mixed(), 200_000) == {}


def test_mixed_timeouts_a_25_s_web_outage_deposes_nobody():
    assert dead_at(mixed(), 100_000, web_down=[(20_000, 45_000)]) == {}


def test_mixed_timeouts_the_master_killed_with_the_web_tier_expires_a_timeout_of_hearing_after():
    out = dead_at(mixed(stops=20_001), 100_000, web_down=[(20_000, 45_000)])
    # Its last beat reached the control plane at 19 s; heard until 20.75 s (the last stamp, 19.75 s,
    # plus the web grace). After the outage most 30 s beaters are overdue (they fell due in it) until
    # they beat again: the control plane waits until more than half are heard (by 59.x s), then
    # hears the rest of the master's 3 s.
    assert out == {"fast-master": 61_000}


def test_a_partition_from_most_brokers_deposes_nobody_while_they_are_due():
    uniform = [Broker(f"b{i}", 1_000, 3_000, phase=i * 97) for i in range(9)]
    assert dead_at(uniform, 50_000, heard_down=[(20_000, 45_000)]) == {}


def test_half_the_brokers_stale_or_decommissioned_blind_no_one():
    """30 registrations stopped beating long ago and linger in the table: they are no evidence of
    blindness; a master that dies later expires after its timeout."""
    gone = [Broker(f"gone-{i}", 1_000, 3_000, phase=i * 31, stops=5_000) for i in range(30)]
    live = [Broker(f"live-{i}", 1_000, 3_000, phase=i * 97) for i in range(20)]
    out = dead_at([*gone, *live, Broker("master", 1_000, 3_000, stops=100_001)], 120_000, now_from=70_000)
    assert out.pop("master") == 103_500  # last beat at 100 s: more than 3 s of silence at the 103.5 s look
    assert set(out) == {b.name for b in gone}  # judged at the first look (nothing else is)


def test_more_than_half_dying_at_once_waits_at_most_the_stale_bound():
    """The price of the guard: more than half the brokers dying together looks like a partition; the
    control plane waits while they are recently due, then judges them."""
    dying = [Broker(f"d{i}", 1_000, 3_000, phase=i * 97, stops=10_000) for i in range(6)]
    live = [Broker(f"l{i}", 1_000, 3_000, phase=i * 89) for i in range(4)]
    out = dead_at([*dying, *live], 100_000)
    assert set(out) == {b.name for b in dying}
    assert all(10_000 + STALE < t <= 10_000 + STALE + 3_000 + 1_500 for t in out.values()), out
