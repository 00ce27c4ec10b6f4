"""What a chaos run checks, as pure functions over what the run recorded: delivery (lost and
duplicated messages), masters per epoch (controller history and the brokers' own reports), epoch
files and commit logs across replicas, the cuts of a commit log the brokers logged, the sends that
failed while a replica could have taken them, and the times a fault cost."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from brokers.ha.epoch import EpochEntry
from brokers.store.cuts import MARKER

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


# --- cuts of a commit log, as the brokers log them ------------------------------------------------

GUARD_MARKER = MARKER  # acknowledged data at risk (brokers/store/cuts.py); any fails a run
# One line per cut (brokers/store/cuts.py describe), in the broker's log format "%(asctime)s
# %(levelname)s %(name)s %(message)s"; a line whose message only quotes one (a refused link naming
# the refused cut) is no cut of its own.
_CUT_HEAD = (
    rf"(?P<asctime>\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}}) [A-Z]+ \S+ (?:{re.escape(GUARD_MARKER)} )?log cut(?: refused)?: "
)
_CUT_ANNOUNCED = re.compile(_CUT_HEAD)
_CUT = re.compile(
    _CUT_HEAD + r"cause=(?P<cause>[A-Z][A-Z0-9_]*) "
    r"at=(?P<at>-?\d+) end=(?P<end>-?\d+) bytes=(?P<bytes>-?\d+) confirm=(?P<confirm>-?\d+) "
    r'allowed=(?P<allowed>yes|no) detail="(?P<detail>[^"]*)"'
)


@dataclass(frozen=True)
class LogCut:
    """One truncation of a broker's commit log (or one it refused), as its log line tells it."""

    node: str
    t: float  # the line's time, as time.time()
    cause: str  # FORK, TORN_TAIL, PARTIAL_RECORD, UNWRITTEN, RESTART_FROM_MASTER, ...
    at: int  # where the log was (or would have been) cut
    end: int  # where it ended before
    bytes: int
    confirm: int  # the confirm offset then
    allowed: bool  # False: refused, the cut would have removed acknowledged data
    detail: str


@dataclass(frozen=True)
class BrokerLogScan:
    cuts: tuple[LogCut, ...]
    guard_errors: int  # lines carrying GUARD_MARKER anywhere
    unreadable: tuple[str, ...]  # lines announcing a cut in a shape _CUT does not read: a cut not counted


def scan_broker_log(node: str, lines: Iterable[str]) -> BrokerLogScan:
    """The cuts one broker logged, its guard lines, and any cut line that does not parse (a format
    drift must not hide cuts). The times are the lines' local wall time, as the brokers wrote them."""
    cuts: list[LogCut] = []
    guard_errors = 0
    unreadable: list[str] = []
    for raw in lines:
        line = raw.rstrip()
        guard_errors += GUARD_MARKER in line
        if not _CUT_ANNOUNCED.match(line):
            continue
        m = _CUT.fullmatch(line)
        if m is None:
            unreadable.append(f"{node}: {line}")
            continue
        cuts.append(
            LogCut(
                node,
                datetime.strptime(m["asctime"], "%Y-%m-%d %H:%M:%S,%f").timestamp(),
                m["cause"],
                int(m["at"]),
                int(m["end"]),
                int(m["bytes"]),
                int(m["confirm"]),
                m["allowed"] == "yes",
                m["detail"],
            )
        )
    return BrokerLogScan(tuple(cuts), guard_errors, tuple(unreadable))


# --- sends that failed while a replica could have taken them ----------------------------------------


@dataclass(frozen=True)
class ReplicaOut:
    """A replica that could take no write over [start, end] (wall clock): killed, frozen, or its store
    full."""

    node: str
    start: float
    end: float


def writable_members(
    t: float,
    sync_state_sets: Sequence[tuple[float, frozenset[str]]],
    replicas_out: Iterable[ReplicaOut],
    unelectable: Iterable[tuple[float, float]] = (),
) -> frozenset[str]:
    """The members of the SyncStateSet in force at ``t`` (the last one seen at or before it;
    ``sync_state_sets`` oldest first) that were not out at ``t``: the replicas that could have taken a
    write then, had the group routed it to them. None within an ``unelectable`` span: the master out
    and the controller down with it, so that no replica could be made master (a slave taking writes
    without the controller would be a second master)."""
    if any(start <= t <= end for start, end in unelectable):
        return frozenset()
    members: frozenset[str] = frozenset()
    for since, sync_state_set in sync_state_sets:
        if since > t:
            break
        members = sync_state_set
    return members - {o.node for o in replicas_out if o.start <= t <= o.end}


def failed_while_writable(
    fails: Iterable[Mapping],
    sync_state_sets: Sequence[tuple[float, frozenset[str]]],
    replicas_out: Sequence[ReplicaOut],
    unelectable: Sequence[tuple[float, float]] = (),
) -> list[dict]:
    """The producer's "fail" events (a send given up after the client's own retries) at whose time
    (``t``) some member of the SyncStateSet was up and could take writes, each with those members as
    ``writable``."""
    return [
        dict(f) | {"writable": sorted(w)}
        for f in fails
        if (w := writable_members(f["t"], sync_state_sets, replicas_out, unelectable))
    ]


# --- times ----------------------------------------------------------------------------------------


def wall_time(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def first_election_after(history: Iterable[Mapping], wall: float, old_master: int | None) -> Mapping | None:
    for t in elections(history):
        if wall_time(t["createdAt"]) >= wall and t["newMasterBrokerId"] != old_master:
            return t
    return None
