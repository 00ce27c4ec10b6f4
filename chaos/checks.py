"""What a chaos run checks, as pure functions over what the run recorded: delivery (lost and
duplicated messages), masters per epoch (controller history and the brokers' own reports), epoch
files and commit logs across replicas, and the times a fault cost."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from brokers.ha.epoch import EpochEntry

from .workload import Ack, Received

MASTER_ROLES = frozenset({"MASTER", "SYNC_MASTER", "ASYNC_MASTER"})


# --- delivery -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    acked: int
    consumed: int  # distinct ids read back
    lost: tuple[str, ...]  # acknowledged, never read back
    duplicates: int  # copies read back beyond the first
    duplicates_never_failed: int  # copies of an id whose every send attempt was acknowledged: a bug
    unacked_but_stored: int  # read back although never acknowledged (a failed attempt that was stored)
    lost_by_node: dict[str, int] = field(default_factory=dict)  # which broker acknowledged the lost ones
    lost_probes: int = 0  # of the lost: acknowledged by a deposed master the run probed on purpose


def check_delivery(acks: Mapping[str, Ack], uncertain: set[str], received: Iterable[Received]) -> Delivery:
    copies = Counter(r.message_id for r in received)
    lost = tuple(sorted(i for i in acks if i not in copies))
    dups = {i: n - 1 for i, n in copies.items() if n > 1}
    return Delivery(
        acked=len(acks),
        consumed=len(copies),
        lost=lost,
        duplicates=sum(dups.values()),
        duplicates_never_failed=sum(n for i, n in dups.items() if i not in uncertain),
        unacked_but_stored=sum(1 for i in copies if i not in acks),
        lost_by_node=dict(Counter(acks[i].node for i in lost)),
        lost_probes=sum(1 for i in lost if acks[i].stale_probe),
    )


# --- masters per epoch ----------------------------------------------------------------------------


def elections(history: Iterable[Mapping]) -> list[Mapping]:
    """The successful elections of a controller history (oldest first)."""
    return [
        t for t in history if t["kind"] == "elect" and t.get("responseCode", 0) == 0 and t.get("newMasterBrokerId") is not None
    ]


def masters_per_epoch_in_history(history: Iterable[Mapping]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = defaultdict(set)
    for t in elections(history):
        out[t["newMasterEpoch"]].add(t["newMasterBrokerId"])
    return dict(out)


def masters_per_epoch_reported(reports: Iterable[tuple[str, str, int]]) -> dict[int, set[str]]:
    """From the brokers' own water-level reports (broker address, role, masterEpoch): which brokers
    said they were master in each epoch. Two in one epoch is a split brain on the data plane."""
    out: dict[int, set[str]] = defaultdict(set)
    for addr, role, epoch in reports:
        if role in MASTER_ROLES and epoch >= 0:
            out[epoch].add(addr)
    return dict(out)


def several(per_epoch: Mapping[int, set]) -> dict[int, list]:
    return {e: sorted(m) for e, m in per_epoch.items() if len(m) > 1}


def epoch_file_conflicts(files: Mapping[str, list[EpochEntry]]) -> list[str]:
    """Replicas must agree on where each epoch they both know starts."""
    starts: dict[int, dict[str, int]] = defaultdict(dict)
    for node, entries in files.items():
        for e in entries:
            starts[e.epoch][node] = e.start_offset
    return [f"epoch {epoch} starts at {by_node}" for epoch, by_node in sorted(starts.items()) if len(set(by_node.values())) > 1]


# --- commit logs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogComparison:
    spans: dict[str, tuple[int, int]]  # node -> (first offset, end offset)
    common_start: int
    common_end: int
    identical: bool
    first_difference: dict[str, int]  # node -> first offset differing from the reference node's

    @property
    def compared_bytes(self) -> int:
        return max(0, self.common_end - self.common_start)


def compare_logs(
    spans: Mapping[str, tuple[int, int]], read: Callable[[str, int, int], bytes], chunk: int = 4 * 1024 * 1024
) -> LogComparison:
    """Compare every replica's commit log with the first one's over the range they all hold."""
    nodes = sorted(spans)
    start = max((spans[n][0] for n in nodes), default=0)
    end = min((spans[n][1] for n in nodes), default=0)
    first_diff: dict[str, int] = {}
    pos = start
    while pos < end and len(first_diff) < len(nodes) - 1:
        hi = min(end, pos + chunk)
        reference = read(nodes[0], pos, hi)
        for n in nodes[1:]:
            if n in first_diff:
                continue
            other = read(n, pos, hi)
            if other != reference:
                at = next(
                    (k for k, (a, b) in enumerate(zip(reference, other, strict=False)) if a != b), min(len(reference), len(other))
                )
                first_diff[n] = pos + at
        pos = hi
    return LogComparison(dict(spans), start, end, not first_diff, first_diff)


# --- times ----------------------------------------------------------------------------------------


def wall_time(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def first_election_after(history: Iterable[Mapping], wall: float, old_master: int | None) -> Mapping | None:
    for t in elections(history):
        if wall_time(t["createdAt"]) >= wall and t["newMasterBrokerId"] != old_master:
            return t
    return None


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile of ``values`` (the nearest rank); NaN when there are none."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]
