"""The blindness guard (issue 19): a broker is declared dead only for silence the control plane could
have heard. Pure values in and out; the Redis record and the scans that feed it are in
``controlplane.hearing``.

The rule, in three sentences (docs/failover.md, "When the control plane is blind"):

1. **The horizon.** At any instant, the control plane has heard at least half of the brokers it knows
   up to its *horizon*: the ⌈k/2⌉-th most recent of the k brokers' last heartbeats. Time after the
   horizon plus a grace (a few heartbeat intervals) is *blind*: less than half of the brokers are
   reaching it, which a broker's own death never causes alone (a replica set of two losing its
   master still has half). Its own outage, a Redis outage or a partition from most brokers does.
2. **Unobserved time.** Time in which no scan looked (beat and workers down, Redis unreachable) for
   longer than ``max_gap`` is blind too, from the last look plus the gap: what the brokers did then
   is overwritten by later beats and cannot be judged afterwards.
3. **Expiry.** A broker is silent past its timeout when the time since its last heartbeat, *less the
   blind time in it*, exceeds the timeout. A broker missing from the table (Redis lost it) is not
   judged at all until the record has heard for one default timeout since it began (``warm``).

So no broker is declared dead for a period in which the control plane could not hear, and no election
follows from it; brokers keep serving with their cached roles meanwhile (seed 004: the controller is a
weak dependency). The price: when more than half of the brokers truly die at once, the control plane
takes it for its own blindness and waits for them; an operator's election still works.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_GRACE_MILLIS = 1_500  # > one brokerHeartbeatInterval (1 s) plus a scan tick
DEFAULT_MAX_GAP_MILLIS = 5_000  # scans tick every 0.5 s: ten missed ticks
KEEP_MILLIS = 24 * 3600 * 1000  # spans older than any sane heartbeat timeout are dropped
MAX_SPANS = 512


@dataclass(frozen=True, order=True)
class Span:
    """A blind stretch of time (start, end], in the control plane's clock (Redis's, ms)."""

    start: int
    end: int


def horizon(last_beats: Iterable[int]) -> int | None:
    """The latest instant up to which at least half of the known brokers have been heard: the
    ⌈k/2⌉-th most recent of k last heartbeats. None when no broker is known."""
    beats = sorted(last_beats, reverse=True)
    if not beats:
        return None
    return beats[(len(beats) + 1) // 2 - 1]


def pending(
    beat_at_horizon: int | None,
    last_look: int | None,
    now: int,
    *,
    grace: int = DEFAULT_GRACE_MILLIS,
    max_gap: int = DEFAULT_MAX_GAP_MILLIS,
) -> list[Span]:
    """The blind spans up to ``now`` that the record does not hold yet: after the horizon plus the
    grace (rule 1), and after the last look plus the gap (rule 2)."""
    spans = []
    if beat_at_horizon is not None and now > beat_at_horizon + grace:
        spans.append(Span(beat_at_horizon + grace, now))
    if last_look is not None and now > last_look + max_gap:
        spans.append(Span(last_look + max_gap, now))
    return spans


def merged(spans: Iterable[Span], now: int, *, keep: int = KEEP_MILLIS, limit: int = MAX_SPANS) -> tuple[Span, ...]:
    """Spans merged where they touch, those that ended more than ``keep`` before ``now`` dropped, and
    at most ``limit`` kept (the newest)."""
    out: list[Span] = []
    for s in sorted(s for s in spans if s.end > s.start and s.end >= now - keep):
        if out and s.start <= out[-1].end:
            out[-1] = Span(out[-1].start, max(out[-1].end, s.end))
        else:
            out.append(s)
    return tuple(out[-limit:])


def heard_millis(start: int, end: int, blind: Sequence[Span]) -> int:
    """How much of (start, end] the control plane could hear."""
    if end <= start:
        return 0
    lost = sum(max(0, min(end, s.end) - max(start, s.start)) for s in blind)
    return end - start - lost


def silent_past(last_beat: int, timeout: int, now: int, blind: Sequence[Span]) -> bool:
    """Rule 3: heard silence since the last heartbeat exceeds the timeout (RocketMQ's
    ``last + timeout < now``, with blind time not counted)."""
    return heard_millis(last_beat, now, blind) > timeout


def warm(record_since: int | None, now: int, blind: Sequence[Span], timeout: int) -> bool:
    """Whether the record has heard for ``timeout`` since it began, so that a broker missing from it
    may be taken for dead (after a Redis restart, every broker is missing until it beats again)."""
    return record_since is not None and heard_millis(record_since, now, blind) >= timeout


def blind_now(blind: Sequence[Span], now: int) -> bool:
    """Whether ``now`` falls in a blind span (what the dashboard and the logs say)."""
    return any(s.start < now <= s.end for s in blind)
