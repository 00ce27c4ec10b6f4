"""Static topics on a broker (seed 003, RIP-21; docs/static-topics.md; the mappings themselves and
their sealing: brokers/static.py): where a message of a logical queue is written, and what offset a
client sees of a physical one. The segment rules are mqrules/logical_queues.py's. Pure."""

from __future__ import annotations

from collections.abc import Iterator

from mqrules.logical_queues import LogicalQueue, Segment, TopicMapping


def write_target(m: TopicMapping, broker: str, lid: int | None, turns: Iterator[int]) -> tuple[int, Segment] | None:
    """Where a message goes: logical queue ``lid`` (a FIFO message's, by its group) or, for any
    other, the logical queues broker set ``broker`` takes writes of in turn (the next of ``turns``);
    None when the queue's writes go to another broker set."""
    if lid is None:
        owned = m.owned_by(broker)
        if not owned:
            return None
        lid = owned[next(turns) % len(owned)]
    segment = m.queues[lid].writable
    return (lid, segment) if segment.broker_name == broker else None


def logical_position(m: TopicMapping | None, broker: str, queue_id: int, offset: int) -> tuple[int, int] | None:
    """(logical queue, logical offset) of broker set ``broker``'s physical ``queue_id`` at ``offset``:
    ``logic_start + (offset - phys_start)`` of the segment it is in; None when none, or its start is
    not decided yet."""
    found = m.segment_at(broker, queue_id) if m is not None else None
    start = found[1].logic_start if found is not None else None
    if found is None or start is None:
        return None
    lid, s = found
    return lid, start + (offset - s.phys_start)


def live(q: LogicalQueue) -> list[Segment]:
    """A logical queue's segments that still hold messages, oldest first."""
    return [s for s in q.segments if not s.expired]
