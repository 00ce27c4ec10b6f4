"""Logical queues of a static topic (seed 003, RIP-21; reference §6). Pure.

A logical queue is a chain of **segments**, oldest first. Each segment is one physical queue of one
broker set holding a run of the queue's logical offsets:

- the **last** segment is the queue's one writable segment: new messages land there;
- after a move, the segment before it is **sealing** until its broker reports where its messages end
  (``decide``); until then the new segment's logical start is undecided;
- older segments are **read-only** until their broker has deleted their data, then **expired**: never
  read again; their physical queue may back a later segment (the seed's "reuse").

A move never copies data: the mapping changes (``plan_moves``), writes go to the new segment at once,
and consumers read the old segment to its end, then the new one. Every change raises the mapping's
epoch; the control plane refuses a change made against an older epoch (``ensure_epoch``).

RocketMQ decides a new leader's logical start by rounding the old one's end up to a block of 10,000
(leaving a gap); here the old segment's end is known exactly once its broker has sealed it, so the
chain has no gaps: a segment starts where the one before it ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from mqrules.codes import ResponseCode as C


class SegmentState(StrEnum):
    WRITABLE = "writable"
    SEALING = "sealing"
    READ_ONLY = "read_only"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Segment:
    broker_name: str
    queue_id: int  # the physical queue on broker_name
    logic_start: int | None  # the logical offset of its first message; None until decided
    phys_start: int = 0  # the physical offset of its first message
    phys_end: int | None = None  # the physical offset after its last; None while messages may land
    expired: bool = False

    @property
    def logic_end(self) -> int | None:
        if self.logic_start is None or self.phys_end is None:
            return None
        return self.logic_start + (self.phys_end - self.phys_start)

    def to_wire(self) -> dict:
        return {
            "brokerName": self.broker_name,
            "queueId": self.queue_id,
            "logicStart": self.logic_start,
            "physStart": self.phys_start,
            "physEnd": self.phys_end,
            "expired": self.expired,
        }

    @classmethod
    def from_wire(cls, raw: Mapping) -> Segment:
        return cls(
            raw["brokerName"], int(raw["queueId"]), _int_or_none(raw["logicStart"]), int(raw["physStart"]),
            _int_or_none(raw["physEnd"]), bool(raw["expired"]),
        )  # fmt: skip


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


@dataclass(frozen=True)
class LogicalQueue:
    queue_id: int  # the logical id clients see
    segments: tuple[Segment, ...]

    @property
    def writable(self) -> Segment:
        return self.segments[-1]

    @property
    def sealing(self) -> Segment | None:
        """The segment a move left behind, while its end is not decided."""
        if len(self.segments) > 1 and self.segments[-2].phys_end is None:
            return self.segments[-2]
        return None

    def state(self, index: int) -> SegmentState:
        seg = self.segments[index]
        if seg.expired:
            return SegmentState.EXPIRED
        if index == len(self.segments) - 1:
            return SegmentState.WRITABLE
        return SegmentState.SEALING if seg.phys_end is None else SegmentState.READ_ONLY


@dataclass(frozen=True)
class TopicMapping:
    topic: str
    epoch: int
    queues: tuple[LogicalQueue, ...]

    def to_wire(self) -> dict:
        return {
            "topic": self.topic,
            "epoch": self.epoch,
            "queues": [[s.to_wire() for s in q.segments] for q in self.queues],
        }

    @classmethod
    def from_wire(cls, raw: Mapping) -> TopicMapping:
        queues = tuple(LogicalQueue(i, tuple(Segment.from_wire(s) for s in segments)) for i, segments in enumerate(raw["queues"]))
        return cls(raw["topic"], int(raw["epoch"]), queues)

    def owners(self) -> dict[int, tuple[str, int]]:
        """Per logical queue, the (broker set, physical queue) that takes its writes: what a route names."""
        return {q.queue_id: (q.writable.broker_name, q.writable.queue_id) for q in self.queues}

    def brokers(self) -> set[str]:
        """Every broker set holding a segment that is not expired."""
        return {s.broker_name for q in self.queues for s in q.segments if not s.expired}

    def owned_by(self, broker: str) -> list[int]:
        """The logical queues whose writes ``broker`` takes."""
        return [q.queue_id for q in self.queues if q.writable.broker_name == broker]

    def segment_at(self, broker: str, queue_id: int) -> tuple[int, Segment] | None:
        """The logical queue and the segment that ``broker``'s physical queue ``queue_id`` backs now
        (its newest segment not expired), or None."""
        for q in self.queues:
            for s in reversed(q.segments):
                if not s.expired and s.broker_name == broker and s.queue_id == queue_id:
                    return q.queue_id, s
        return None


def physical_queue_counts(m: TopicMapping) -> dict[str, int]:
    """How many physical queues each broker set needs for ``m`` (its topic config's queue numbers):
    one more than the highest it ever backed a segment with, so that the count never shrinks."""
    out: dict[str, int] = {}
    for q in m.queues:
        for s in q.segments:
            out[s.broker_name] = max(out.get(s.broker_name, 0), s.queue_id + 1)
    return out


class MappingRefused(ValueError):
    """A change that cannot be made: its RocketMQ (or our) code and why. Nothing was changed."""

    def __init__(self, code: C, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail


# --- the invariants ------------------------------------------------------------------------------


def problems(m: TopicMapping) -> list[str]:
    """What is wrong with ``m`` (empty: nothing). The rules every change keeps: every logical queue
    has exactly one writable segment; the segments of one queue never overlap in logical offsets
    (each starts where the one before it ends); only the oldest segments expire, and an expired
    segment is never read; a physical queue backs at most one segment that is not expired."""
    out = []
    if m.epoch < 1:
        out.append(f"epoch {m.epoch} is not >= 1")
    if not m.queues:
        out.append("a static topic has at least one logical queue")
    backing: dict[tuple[str, int], int] = {}
    for i, q in enumerate(m.queues):
        name = f"logical queue {i}"
        if q.queue_id != i:
            out.append(f"{name} has id {q.queue_id}")
        if not q.segments:
            out.append(f"{name} has no segment")
            continue
        if q.writable.phys_end is not None or q.writable.expired:
            out.append(f"{name} has no writable segment (its last one is closed)")
        sealing = q.sealing
        if sealing is not None and q.writable.logic_start is not None:
            out.append(f"{name}: its last two segments are open and both decided: a second writable segment")
        for n, seg in enumerate(q.segments):
            where = f"{name} segment {n} ({seg.broker_name}:{seg.queue_id})"
            if seg.queue_id < 0 or seg.phys_start < 0 or (seg.logic_start is not None and seg.logic_start < 0):
                out.append(f"{where} has a negative queue id or offset")
            if seg.phys_end is not None and seg.phys_end < seg.phys_start:
                out.append(f"{where} ends before it starts")
            last = n == len(q.segments) - 1
            if seg.phys_end is None and not last and seg is not sealing:
                out.append(f"{where} is open but not the last segment: a second writable segment")
            if seg.logic_start is None and not (last and sealing is not None):
                out.append(f"{where} has an undecided logical start but no sealing segment before it")
            if seg.expired and n > 0 and not q.segments[n - 1].expired:
                out.append(f"{where} expired before an older segment")
            if seg.expired and (last or seg is sealing):
                out.append(f"{where} expired while it may still take messages")
            if not seg.expired:
                key = (seg.broker_name, seg.queue_id)
                if key in backing:
                    out.append(f"{where}: physical queue {key[0]}:{key[1]} already backs logical queue {backing[key]}")
                backing[key] = i
        for n in range(1, len(q.segments)):
            before, seg = q.segments[n - 1], q.segments[n]
            if seg.logic_start is not None and before.logic_end is not None and seg.logic_start != before.logic_end:
                out.append(
                    f"{name} segment {n} starts at logical offset {seg.logic_start}, "
                    f"not where segment {n - 1} ends ({before.logic_end}): overlap or gap"
                )
    return out


def ensure_epoch(current: TopicMapping, expected_epoch: int) -> None:
    """A change planned against ``expected_epoch`` is refused once the mapping has moved on: two
    migrations of one topic take turns, and the second sees the first."""
    if expected_epoch != current.epoch:
        raise MappingRefused(
            C.LOGIC_QUEUE_MAPPING_FENCED_EPOCH,
            f"the mapping of {current.topic} is at epoch {current.epoch}, not {expected_epoch}: "
            "it changed since this change was planned; look again and retry",
        )


# --- changes -------------------------------------------------------------------------------------


def initial(topic: str, queue_count: int, brokers: Sequence[str]) -> TopicMapping:
    """A new static topic: logical queue i on broker set ``brokers[i % n]``, physical queues numbered
    from 0 on each broker set, epoch 1."""
    if queue_count < 1:
        raise MappingRefused(C.INVALID_PARAMETER, "a static topic has at least one logical queue")
    if not brokers or len(set(brokers)) != len(brokers):
        raise MappingRefused(C.INVALID_PARAMETER, "name one or more broker sets, each once")
    per_broker: dict[str, int] = {}
    queues = []
    for i in range(queue_count):
        broker = brokers[i % len(brokers)]
        qid = per_broker.get(broker, 0)
        per_broker[broker] = qid + 1
        queues.append(LogicalQueue(i, (Segment(broker, qid, 0),)))
    return TopicMapping(topic, 1, tuple(queues))


def grow(m: TopicMapping, queue_count: int, brokers: Sequence[str]) -> TopicMapping:
    """More logical queues (updateStaticTopic with a larger queueNum): queues ``len(m.queues)`` to
    ``queue_count - 1``, each on the broker set of ``brokers`` writing the fewest queues then (ties by
    name), on a new physical queue there (or one whose segments all expired, continuing at its end).
    The count never goes down: logical queue ids are the queue ids clients hold."""
    if queue_count < len(m.queues):
        raise MappingRefused(
            C.INVALID_PARAMETER,
            f"{m.topic} has {len(m.queues)} logical queues: a static topic's queue count never goes down "
            "(clients hold its logical queue ids); move queues off a broker set instead",
        )
    if queue_count == len(m.queues):
        raise MappingRefused(C.INVALID_PARAMETER, f"{m.topic} has {queue_count} logical queues already")
    if not brokers or len(set(brokers)) != len(brokers):
        raise MappingRefused(C.INVALID_PARAMETER, "name one or more broker sets, each once")
    load = {b: len(m.owned_by(b)) for b in brokers}
    taken: set[tuple[str, int]] = set()
    queues = list(m.queues)
    for lid in range(len(m.queues), queue_count):
        broker = min(brokers, key=lambda b: (load[b], b))
        qid, phys_start = _next_physical(m, broker, taken)
        taken.add((broker, qid))
        load[broker] += 1
        queues.append(LogicalQueue(lid, (Segment(broker, qid, 0, phys_start),)))
    return TopicMapping(m.topic, m.epoch + 1, tuple(queues))


def adopt(topic: str, queue_counts: Mapping[str, int]) -> TopicMapping:
    """A plain topic turned static: its queues on each broker set (name -> queue count) become the
    logical queues, broker sets in name order, queue ids in order; each segment starts at logical
    offset 0 = physical offset 0, so every stored message keeps its offset. Epoch 1."""
    if not queue_counts or any(n < 1 for n in queue_counts.values()):
        raise MappingRefused(C.INVALID_PARAMETER, f"{topic} has no queue on any broker set to adopt")
    queues = [
        LogicalQueue(i, (Segment(broker, qid, 0),))
        for i, (broker, qid) in enumerate((b, q) for b in sorted(queue_counts) for q in range(queue_counts[b]))
    ]
    return TopicMapping(topic, 1, tuple(queues))


def _check_ids(m: TopicMapping, ids: Iterable[int]) -> None:
    bad = sorted(i for i in ids if not 0 <= i < len(m.queues))
    if bad:
        raise MappingRefused(C.INVALID_PARAMETER, f"{m.topic} has logical queues 0-{len(m.queues) - 1}; no {bad}")


def _next_physical(m: TopicMapping, broker: str, taken: set[tuple[str, int]]) -> tuple[int, int]:
    """The physical queue (and its first offset) a new segment on ``broker`` gets: the lowest one
    whose segments have all expired (it continues at their end), else a new one after every id the
    topic ever used there."""
    ends: dict[int, int] = {}
    live: set[int] = set()
    for q in m.queues:
        for s in q.segments:
            if s.broker_name != broker:
                continue
            if s.expired:
                ends[s.queue_id] = max(ends.get(s.queue_id, 0), s.phys_end or 0)
            else:
                live.add(s.queue_id)
    used = live | {qid for b, qid in taken if b == broker}
    reusable = sorted(qid for qid in ends if qid not in used)
    if reusable:
        return reusable[0], ends[reusable[0]]
    return max(used | set(ends), default=-1) + 1, 0


def plan_moves(m: TopicMapping, moves: Mapping[int, str]) -> TopicMapping:
    """The mapping once each logical queue of ``moves`` takes its writes on its new broker set: its
    writable segment starts sealing, and a new segment on the target (logical start undecided until
    ``decide``) is appended. One epoch later. Refused: a queue id out of range, a queue already on
    that broker set, a queue whose last move is not decided yet."""
    if not moves:
        raise MappingRefused(C.INVALID_PARAMETER, "no logical queue to move")
    _check_ids(m, moves)
    queues = list(m.queues)
    taken: set[tuple[str, int]] = set()
    for lid in sorted(moves):
        q, target = queues[lid], moves[lid]
        if q.sealing is not None:
            raise MappingRefused(
                C.LOGIC_QUEUE_MIGRATING, f"logical queue {lid} of {m.topic} is still moving: its old segment is not sealed yet"
            )
        if q.writable.broker_name == target:
            raise MappingRefused(C.INVALID_PARAMETER, f"logical queue {lid} of {m.topic} is already on {target}")
        qid, phys_start = _next_physical(m, target, taken)
        taken.add((target, qid))
        kept = tuple(s for s in q.segments if not (s.expired and s.broker_name == target and s.queue_id == qid))
        queues[lid] = replace(q, segments=(*kept, Segment(target, qid, None, phys_start)))
    return TopicMapping(m.topic, m.epoch + 1, tuple(queues))


def decide(m: TopicMapping, lid: int, sealed_end: int) -> TopicMapping:
    """Logical queue ``lid``'s old segment is sealed by its broker at physical offset ``sealed_end``:
    it becomes read-only, and the new segment starts at the logical offset where it ends."""
    _check_ids(m, (lid,))
    q = m.queues[lid]
    old = q.sealing
    if old is None:
        raise MappingRefused(C.INVALID_PARAMETER, f"logical queue {lid} of {m.topic} is not moving")
    if sealed_end < old.phys_start:
        raise MappingRefused(C.INVALID_PARAMETER, f"sealed end {sealed_end} is before the segment's start {old.phys_start}")
    sealed = replace(old, phys_end=sealed_end)
    new = replace(q.writable, logic_start=sealed.logic_end)
    queues = list(m.queues)
    queues[lid] = replace(q, segments=(*q.segments[:-2], sealed, new))
    return TopicMapping(m.topic, m.epoch + 1, tuple(queues))


def expire(m: TopicMapping, broker: str, min_offsets: Mapping[int, int]) -> TopicMapping:
    """``broker`` reports the oldest physical offset it still holds per queue: read-only segments
    whose data is all gone (or that hold none) expire. The same mapping when nothing changes."""
    changed = False
    queues = []
    for q in m.queues:
        segments = list(q.segments)
        for n, s in enumerate(segments):
            if s.expired:
                continue
            if q.state(n) is not SegmentState.READ_ONLY or s.broker_name != broker or s.queue_id not in min_offsets:
                break  # only the oldest expire: stop at the first that stays
            assert s.phys_end is not None
            if s.phys_end > max(min_offsets[s.queue_id], s.phys_start):
                break
            segments[n] = replace(s, expired=True)
            changed = True
        queues.append(replace(q, segments=tuple(segments)))
    return TopicMapping(m.topic, m.epoch + 1, tuple(queues)) if changed else m


def drain(m: TopicMapping, broker: str, targets: Sequence[str]) -> dict[int, str]:
    """The moves that take every logical queue writing on ``broker`` to ``targets``: each to the
    target writing the fewest queues then (ties by name)."""
    if broker in targets:
        raise MappingRefused(C.INVALID_PARAMETER, f"{broker} cannot be drained into itself")
    return _spread(m, [q.queue_id for q in m.queues if q.writable.broker_name == broker], targets)


def scale_out(m: TopicMapping, new_broker: str) -> dict[int, str]:
    """The moves that give ``new_broker`` its share (queues // broker sets, at least one) of the
    logical queues, taken one at a time from the broker set writing the most (ties: the highest
    queue id)."""
    load = _load(m)
    if new_broker in load:
        raise MappingRefused(C.INVALID_PARAMETER, f"{new_broker} already takes writes of {m.topic}")
    share = max(1, len(m.queues) // (len(load) + 1))
    by_broker: dict[str, list[int]] = {b: [] for b in load}
    for q in m.queues:
        by_broker[q.writable.broker_name].append(q.queue_id)
    moves: dict[int, str] = {}
    for _ in range(share):
        busiest = max(by_broker, key=lambda b: (len(by_broker[b]), b))
        if len(by_broker[busiest]) <= 1:
            break
        moves[by_broker[busiest].pop()] = new_broker
    return moves


def _load(m: TopicMapping) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in m.queues:
        out[q.writable.broker_name] = out.get(q.writable.broker_name, 0) + 1
    return out


def _spread(m: TopicMapping, lids: Sequence[int], targets: Sequence[str]) -> dict[int, str]:
    if not targets or len(set(targets)) != len(targets):
        raise MappingRefused(C.INVALID_PARAMETER, "name one or more target broker sets, each once")
    load = {t: _load(m).get(t, 0) for t in targets}
    moves = {}
    for lid in lids:
        target = min(load, key=lambda t: (load[t], t))
        moves[lid] = target
        load[target] += 1
    return moves


# --- offsets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadPosition:
    segment: Segment
    phys_offset: int
    logic_offset: int  # the offset asked, or the first one still held when it was older


def read_position(q: LogicalQueue, logic_offset: int) -> ReadPosition | None:
    """Where a consumer at ``logic_offset`` reads: the segment holding it and the physical offset
    there. An offset older than every segment still held moves up to the first one held (an expired
    segment is never read); one at a sealed segment's end reads the next. None while the queue's
    only readable segment has no logical start yet."""
    live = [s for s in q.segments if not s.expired and s.logic_start is not None]
    if not live:
        return None
    logic_offset = max(logic_offset, live[0].logic_start or 0)
    for s in live:
        assert s.logic_start is not None
        end = s.logic_end
        if end is None or logic_offset < end:
            return ReadPosition(s, s.phys_start + (logic_offset - s.logic_start), logic_offset)
    last = live[-1]  # past the end of every decided segment: the newest one's end
    assert last.logic_start is not None and last.phys_end is not None and last.logic_end is not None
    return ReadPosition(last, last.phys_end, last.logic_end)


def logical_offset(q: LogicalQueue, broker: str, queue_id: int, phys_offset: int) -> int | None:
    """The logical offset of physical offset ``phys_offset`` of ``broker``'s queue ``queue_id`` in
    this logical queue; None when no segment there with a decided start holds it."""
    for s in q.segments:
        if s.expired or s.broker_name != broker or s.queue_id != queue_id or s.logic_start is None:
            continue
        if s.phys_start <= phys_offset and (s.phys_end is None or phys_offset <= s.phys_end):
            return s.logic_start + (phys_offset - s.phys_start)
    return None


def min_logical_offset(q: LogicalQueue) -> int:
    """The oldest logical offset a consumer can still read."""
    for s in q.segments:
        if not s.expired and s.logic_start is not None:
            return s.logic_start
    return 0


# --- what a change does, for the operator's preview ----------------------------------------------


@dataclass(frozen=True)
class MovePreview:
    queue_id: int
    from_broker: str
    from_queue: int
    to_broker: str
    to_queue: int
    reused: bool  # the target's physical queue backed a segment before (all of them expired)


def preview(before: TopicMapping, after: TopicMapping) -> list[MovePreview]:
    """Which logical queues take their writes elsewhere in ``after``, from where to where."""
    out = []
    existed = {(s.broker_name, s.queue_id) for q in before.queues for s in q.segments}
    for b, a in zip(before.queues, after.queues, strict=True):
        if (b.writable.broker_name, b.writable.queue_id) == (a.writable.broker_name, a.writable.queue_id):
            continue
        out.append(
            MovePreview(
                b.queue_id, b.writable.broker_name, b.writable.queue_id, a.writable.broker_name, a.writable.queue_id,
                reused=(a.writable.broker_name, a.writable.queue_id) in existed,
            )
        )  # fmt: skip
    return out
