"""The figures the special-message phases print, from what they recorded (pure): timers' lateness
and what became of them, where the lateness goes, what became of committed and rolled-back
transactions, rates, and the goals."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from testkit.stats import rounded_percentile

TIMER_LATE_GOAL_MS = 200.0
TIMER_RATE_GOAL = 10_000.0
TXN_RATE_GOAL = 5_000.0


@dataclass(frozen=True)
class Receipt:
    message_id: str
    at_ms: float  # time.time() in ms when the ReceiveMessage answer arrived
    position: tuple[int, int]  # (queue id, queue offset) it was delivered from
    attempt: int


def first_receipts(receipts: Iterable[Receipt]) -> dict[str, Receipt]:
    """message id -> its first receipt."""
    first: dict[str, Receipt] = {}
    for r in receipts:
        if r.message_id not in first or r.at_ms < first[r.message_id].at_ms:
            first[r.message_id] = r
    return first


def twice(receipts: Iterable[Receipt]) -> dict[str, int]:
    """``delivered_twice``: ids received more than once, whatever the cause; ``stored_twice``: of those,
    ids received from two places of the topic on a first attempt (written twice; the rest are pop
    redeliveries)."""
    counts: Counter = Counter()
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in receipts:
        counts[r.message_id] += 1
        if r.attempt == 1:
            places[r.message_id].add(r.position)
    return {
        "delivered_twice": sum(1 for n in counts.values() if n > 1),
        "stored_twice": sum(1 for p in places.values() if len(p) > 1),
    }


def timer_figures(
    due_ms: Mapping[str, int], receipts: Iterable[Receipt], stamps: Mapping[str, set[int | None]], grace_ms: float
) -> dict:
    """What became of the timers ``due_ms`` names (accepted ones only): lateness of each first
    receipt, early / lost / twice counts."""
    mine = [r for r in receipts if r.message_id in due_ms]
    first = first_receipts(mine)
    late = [r.at_ms - due_ms[m] for m, r in first.items()]
    return {
        "received": len(first),
        "late_ms_p50": rounded_percentile(late, 50, 1),
        "late_ms_p99": rounded_percentile(late, 99, 1),
        "late_ms_max": round(max(late), 1) if late else None,
        "early": sum(1 for x in late if x < 0),
        "lost": sum(1 for m, due in due_ms.items() if m not in first or first[m].at_ms > due + grace_ms),
        "never_received": sum(1 for m in due_ms if m not in first),
        **twice(mine),
        "first_on_retry": sum(1 for r in first.values() if r.attempt > 1),
        "stamp_mismatch": sum(1 for m, s in stamps.items() if m in due_ms and s != {due_ms[m]}),
    }


def stage_figures(stored: Mapping[str, tuple[int, int, int]], first: Mapping[str, Receipt]) -> dict:
    """Where the lateness goes, per timer received: ``wheel_lag`` (due -> the wheel took it,
    TIMER_DEQUEUE_MS), ``write`` (-> stored in its topic, the store timestamp) and ``consume`` (->
    first receipt: replication to every in-sync replica, the long poll's next look, the pop)."""
    stages: dict[str, list[float]] = {"wheel_lag": [], "write": [], "consume": []}
    for m, (due, taken, stored_at) in stored.items():
        if m in first:
            stages["wheel_lag"].append(taken - due)
            stages["write"].append(stored_at - taken)
            stages["consume"].append(first[m].at_ms - stored_at)
    out: dict = {}
    for name, values in stages.items():
        for p in (50, 99):
            out[f"{name}_ms_p{p}"] = rounded_percentile(values, p, 1)
        out[f"{name}_ms_max"] = round(max(values), 1) if values else None
    return out


def timer_summary(f: dict) -> str:
    """``timer_figures`` in a line."""
    return (
        f"late p50 {f['late_ms_p50']} ms, p99 {f['late_ms_p99']} ms, max {f['late_ms_max']} ms; early {f['early']}, "
        f"lost {f['lost']}, twice {f['delivered_twice']} (stored twice {f['stored_twice']})"
    )


def txn_figures(
    committed: Mapping[str, float],
    rolled_back: Collection[str],
    receipts: Iterable[Receipt],
    grace_s: float,
    consuming_from: float = 0.0,
) -> dict:
    """What became of the transactions ended (``committed``: message id -> its COMMIT answered OK,
    time.time() in s): a commit whose message did not come within ``grace_s`` of its answer (or of
    ``consuming_from``, when the consumers started later) is lost; a rolled-back one must never come;
    one received from two places of its topic on a first attempt was written twice (the rest of
    ``delivered_twice`` are pop redeliveries). ``receipt_ms``: first receipt minus the later of the
    two."""
    receipts = list(receipts)
    mine = [r for r in receipts if r.message_id in committed]
    first = first_receipts(mine)
    waited = {m: first[m].at_ms / 1000 - max(at, consuming_from) for m, at in committed.items() if m in first}
    rolled_back = set(rolled_back)
    return {
        "received": len(first),
        "lost_commits": sum(1 for m in committed if waited.get(m, math.inf) > grace_s),
        "never_received": sum(1 for m in committed if m not in first),
        **twice(mine),
        "rolled_back_delivered": len({r.message_id for r in receipts if r.message_id in rolled_back}),
        **spread("receipt_ms", [w * 1000 for w in waited.values()]),
    }


def txn_summary(f: dict) -> str:
    """``txn_figures`` in a line."""
    return (
        f"lost {f['lost_commits']}, twice {f['delivered_twice']} (stored twice {f['stored_twice']}), "
        f"rolled back and received {f['rolled_back_delivered']}"
    )


def spread(name: str, values: list[float], digits: int = 1) -> dict[str, float | None]:
    """``name``_p50, _p99 and _max of ``values`` (None when there are none)."""
    return {
        f"{name}_p50": rounded_percentile(values, 50, digits),
        f"{name}_p99": rounded_percentile(values, 99, digits),
        f"{name}_max": round(max(values), digits) if values else None,
    }


def rate(answered: Collection[float], since: float | None) -> float:
    """len(answered) / seconds from ``since`` to the last of ``answered`` (time.time())."""
    if not answered or since is None or max(answered) <= since:
        return 0.0
    return len(answered) / (max(answered) - since)


def goals(figures: dict) -> dict[str, bool]:
    """Only for figures that were measured."""
    out: dict[str, bool] = {}
    if figures.get("timer_p99_late_ms") is not None:
        out["timer_p99_late_ok"] = figures["timer_p99_late_ms"] <= TIMER_LATE_GOAL_MS
    if "timer_per_s" in figures:
        out["timer_per_s_ok"] = figures["timer_per_s"] >= TIMER_RATE_GOAL
    if "txn_commits_per_s" in figures:
        out["txn_commits_per_s_ok"] = figures["txn_commits_per_s"] >= TXN_RATE_GOAL
    zero = (
        "timer_lost",
        "timer_early",
        "timer_failover_lost",
        "txn_lost_commits",
        "txn_rolled_back_delivered",
        "txn_check_lost",
        "txn_failover_lost_commits",
        "fifo_order_violations",
        "fifo_lost",
    )
    for key in zero:
        if key in figures:
            out[f"{key}_zero"] = figures[key] == 0
    return out
