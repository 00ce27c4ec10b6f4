"""A message's trace for one consumer group (docs/messages.md §2-3), from the consumer-metadata records
the master writes (brokers/meta.py): the trace keys a record carries, the deliveries the records of one
position tell, and the verdict ``consumed``. Pure.

A message sits at a position (topic, queue id, queue offset); a pop consumer that does not ack it in
time gets a copy in its retry topic, at another position, and after its last attempt one in its DLQ.
Each ``pop`` record names the positions it hands out, each ``finish`` the positions done (acked, or
moved on: ``movedTo`` names the retry or DLQ topic the copy went to), each ``invisible`` one whose
invisible time changed; their ``KEYS`` property holds one trace key per position, so the store's index
finds every record of a position in one lookup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

# a record's KEYS stays well below the store's 32767 bytes of properties (a finish of many acks)
TRACE_KEYS_MAX_BYTES = 16 * 1024
TRACED_KINDS = ("pop", "finish", "invisible")


class Consumed(StrEnum):
    CONSUMED = "consumed"  # acked (the last delivery), or the group's offset passed it
    DELIVERED = "delivered"  # delivered, not acked, and not in flight: waiting for its next delivery
    IN_FLIGHT = "in_flight"  # delivered, its ack (or its invisible time's end) not yet come
    NOT_YET = "not_yet"  # never delivered to the group
    DEAD = "dead"  # in the group's DLQ
    UNKNOWN = "unknown"  # no delivery found, and retention deleted records that may have told


def trace_key(topic: str, queue_id: int, queue_offset: int) -> str:
    """A position's trace key: ``<topic>@<queueId>@<queueOffset>``."""
    return f"{topic}@{queue_id}@{queue_offset}"


def _offsets(record: Mapping) -> list[object]:
    kind = record.get("kind")
    if kind == "pop":
        return [e[0] for e in record.get("entries", ()) if isinstance(e, list | tuple) and e]
    if kind == "finish":
        return list(record.get("offsets", ()))
    if kind == "invisible":
        return [record.get("offset")]
    return []


def record_trace_keys(record: Mapping) -> list[str]:
    """The trace keys of one consumer-metadata record (its ``KEYS``): one per position it hands out or
    finishes, at most TRACE_KEYS_MAX_BYTES of them; none for other kinds."""
    if record.get("kind") not in TRACED_KINDS:
        return []
    topic, queue_id = str(record.get("topic")), record.get("queueId")
    if not isinstance(queue_id, int):
        return []
    keys: list[str] = []
    size = 0
    for offset in _offsets(record):
        if not isinstance(offset, int):
            continue
        key = trace_key(topic, queue_id, offset)
        size += len(key.encode()) + 1
        if size > TRACE_KEYS_MAX_BYTES:
            break
        keys.append(key)
    return keys


@dataclass(frozen=True)
class Position:
    """Where a message (or a copy of it) sits, and the group's committed offset on that queue."""

    topic: str
    queue_id: int
    queue_offset: int
    committed: int | None = None

    @property
    def passed(self) -> bool:
        """The group's committed offset is past it (a pull consumer's, or one a reset moved)."""
        return self.committed is not None and self.committed > self.queue_offset

    def same(self, d: Delivery) -> bool:
        return (d.topic, d.queue_id, d.queue_offset) == (self.topic, self.queue_id, self.queue_offset)


@dataclass(frozen=True)
class Noted:
    """One consumer-metadata record that names a position: its body, when it was stored, and its
    commit-log offset (the order the master made the changes in)."""

    body: Mapping
    stored_ms: int
    log_offset: int


@dataclass
class Delivery:
    attempt: int
    pop_time_ms: int
    client_id: str
    invisible_until_ms: int
    topic: str
    queue_id: int
    queue_offset: int
    ack_time_ms: int | None = None
    moved_to: str | None = None  # finished by a move to this retry or DLQ topic

    @property
    def finished(self) -> bool:
        return self.ack_time_ms is not None or self.moved_to is not None

    def wire(self) -> dict:
        return {
            "attempt": self.attempt,
            "popTimeMs": self.pop_time_ms,
            "clientId": self.client_id,
            "invisibleUntilMs": self.invisible_until_ms,
            "ackTimeMs": self.ack_time_ms,
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
        }


def _popped(p: Position, noted: Noted) -> list[Delivery]:
    body = noted.body
    out = []
    for entry in body.get("entries", ()):
        if isinstance(entry, list | tuple) and len(entry) >= 3 and entry[0] == p.queue_offset:
            pop_ms = body.get("popTimeMs")
            out.append(
                Delivery(
                    int(entry[2]),
                    pop_ms if isinstance(pop_ms, int) else noted.stored_ms,
                    str(body.get("clientId") or ""),
                    int(entry[1]),
                    p.topic,
                    p.queue_id,
                    p.queue_offset,
                )
            )
    return out


def deliveries_at(p: Position, group: str, records: Iterable[Noted]) -> list[Delivery]:
    """The deliveries of position ``p`` to ``group``, oldest first, from the records that name it: each
    pop a delivery; an invisible-time change or a finish applies to the delivery before it (a finish
    with ``movedTo`` moved it on, any other acked it)."""
    out: list[Delivery] = []
    for noted in sorted(records, key=lambda n: n.log_offset):
        body = noted.body
        if (body.get("group"), body.get("topic"), body.get("queueId")) != (group, p.topic, p.queue_id):
            continue
        kind = body.get("kind")
        if kind == "pop":
            out += _popped(p, noted)
            continue
        last = out[-1] if out and not out[-1].finished else None
        if last is None:
            continue
        if kind == "invisible" and body.get("offset") == p.queue_offset and isinstance(body.get("deadlineMs"), int):
            last.invisible_until_ms = body["deadlineMs"]
        elif kind == "finish" and p.queue_offset in body.get("offsets", ()):
            moved = body.get("movedTo")
            if moved:
                last.moved_to = str(moved)
            else:
                last.ack_time_ms = noted.stored_ms
    return out


def decide(positions: Sequence[Position], deliveries: Sequence[Delivery], dead: bool, records_gone: bool) -> Consumed:
    """The group's verdict on a message: ``positions`` its own and its retry copies' (oldest first),
    ``deliveries`` of all of them (oldest first), ``dead``: a copy is in the group's DLQ,
    ``records_gone``: retention deleted records written after it was stored."""
    if dead:
        return Consumed.DEAD
    last = deliveries[-1] if deliveries else None
    if last is not None and last.ack_time_ms is not None:
        return Consumed.CONSUMED
    newest = positions[-1] if positions else None
    if newest is not None and newest.passed and not any(d.moved_to for d in deliveries if newest.same(d)):
        return Consumed.CONSUMED
    if last is not None:
        return Consumed.DELIVERED if last.finished else Consumed.IN_FLIGHT
    return Consumed.UNKNOWN if records_gone else Consumed.NOT_YET
