"""Pop consumption (RocketMQ 5 ``ReceiveMessage``/``AckMessage``; reference §7 POP numbers).

Per (group, topic, queueId) the broker keeps the next offset never popped and the messages in
flight, each with its invisible deadline and a nonce. A receipt handle names one in-flight
delivery: ack or ChangeInvisibleDuration with an old handle (a newer one was issued, or the message
was revived) is refused. The revive loop puts every message whose invisible time passed into the
group's retry topic ``%RETRY%{group}_{topic}`` with reconsumeTimes + 1, or into ``%DLQ%{group}``
once it was delivered ``popReviveMaxAttemptTimes`` (16) times. Orderly queues (FIFO topics,
brokers/fifo.py) have no retry topic: the queue's next pop hands an expired message out again in
place, from this same state.

Every change is also a record in the broker's own commit log (brokers/meta.py, as RocketMQ keeps
its CK/ACK records in the revive topic), so the state replicates to every slave with the log and a
new master, or this broker after a restart, rebuilds it. An acting master (a slave serving while no
master is alive) cannot write its log: it redelivers expired messages from their own queue
(``redeliver``) instead of through the retry topic.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"


def retry_topic(group: str, topic: str) -> str:
    return f"{RETRY_PREFIX}{group}_{topic}"  # V1 naming (enableRetryTopicV2=false)


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


@dataclass(frozen=True)
class ReceiptHandle:
    group: str
    topic: str
    queue_id: int
    offset: int
    nonce: str
    # The broker set that handed it out, on a static topic's messages (brokers/static.py): an ack
    # may reach another broker set of the logical queue, which hands it on. Empty: this one.
    broker: str = ""

    def encode(self) -> str:
        parts = [self.group, self.topic, str(self.queue_id), str(self.offset), self.nonce]
        if self.broker:
            parts.append(self.broker)
        return "\x1f".join(parts).encode().hex()

    @classmethod
    def decode(cls, raw: str) -> ReceiptHandle | None:
        try:
            group, topic, queue_id, offset, nonce, *broker = bytes.fromhex(raw).decode().split("\x1f")
            if len(broker) > 1:
                return None
            return cls(group, topic, int(queue_id), int(offset), nonce, broker[0] if broker else "")
        except (ValueError, UnicodeDecodeError):
            return None


@dataclass
class InFlight:
    deadline_ms: int
    attempt: int  # delivery attempt, starting at 1
    nonce: str


@dataclass
class QueueState:
    pop_offset: int  # next offset never popped
    acked_below: int  # every offset below this one is done (the committed consumer offset)
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)  # acked (or revived) offsets above acked_below
    redeliver: dict[int, int] = field(default_factory=dict)  # offset -> its next attempt (revived in place)

    def finish(self, offset: int) -> None:
        if offset < self.acked_below:
            return
        self.in_flight.pop(offset, None)
        self.redeliver.pop(offset, None)
        self.done.add(offset)
        while self.acked_below in self.done:
            self.done.discard(self.acked_below)
            self.acked_below += 1

    def reset(self, offset: int) -> None:
        """Start again at ``offset`` (an offset beyond the queue's end, corrected)."""
        self.pop_offset = self.acked_below = offset
        self.in_flight.clear()
        self.done.clear()
        self.redeliver.clear()

    def to_wire(self) -> dict:
        return {
            "popOffset": self.pop_offset,
            "ackedBelow": self.acked_below,
            "inFlight": [[o, f.deadline_ms, f.attempt, f.nonce] for o, f in sorted(self.in_flight.items())],
            "done": sorted(self.done),
            "redeliver": [[o, a] for o, a in sorted(self.redeliver.items())],
        }

    @classmethod
    def from_wire(cls, raw: dict) -> QueueState:
        """Raises ValueError/TypeError/KeyError on anything malformed (brokers/meta.py says which record)."""
        q = cls(wire_offset(raw["popOffset"]), wire_offset(raw["ackedBelow"]))
        for o, deadline, attempt, nonce in raw.get("inFlight", ()):
            q.in_flight[wire_offset(o)] = InFlight(wire_offset(deadline), wire_offset(attempt), wire_nonce(nonce))
        q.done = {wire_offset(o) for o in raw.get("done", ())}
        q.redeliver = {wire_offset(o): wire_offset(a) for o, a in raw.get("redeliver", ())}
        return q


def wire_offset(value: object) -> int:
    if type(value) is not int or not 0 <= value < 2**63:
        raise ValueError(f"{value!r} is not an offset (an integer in [0, 2**63))")
    return value


def wire_nonce(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        raise ValueError(f"{value!r} is not a receipt nonce")
    return value


def now_ms() -> int:
    return int(time.time() * 1000)


class PopState:
    """What a broker knows of every (group, topic, queueId) it serves pops for. The methods that
    change it are the ones the replicated records replay (brokers/meta.py), so a master and its
    slaves that applied the same records hold the same state."""

    def __init__(self, committed: dict[tuple[str, str, int], int] | None = None):
        self._committed = committed or {}
        self.queues: dict[tuple[str, str, int], QueueState] = {}

    def queue(self, group: str, topic: str, queue_id: int) -> QueueState:
        key = (group, topic, queue_id)
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = self.peek(group, topic, queue_id)
        return q

    def peek(self, group: str, topic: str, queue_id: int) -> QueueState:
        """The queue's state, without keeping a new one (a pop that finds nothing changes nothing)."""
        key = (group, topic, queue_id)
        q = self.queues.get(key)
        if q is None:
            start = self._committed.get(key, 0)
            return QueueState(pop_offset=start, acked_below=start)
        return q

    def pop(
        self, group: str, topic: str, queue_id: int, offsets: list[int], attempts: list[int], invisible_ms: int
    ) -> list[ReceiptHandle]:
        deadline = now_ms() + invisible_ms
        entries = [(offset, deadline, attempt, secrets.token_hex(6)) for offset, attempt in zip(offsets, attempts, strict=True)]
        self.apply_pop(group, topic, queue_id, entries)
        return [ReceiptHandle(group, topic, queue_id, offset, nonce) for offset, _, _, nonce in entries]

    def apply_pop(self, group: str, topic: str, queue_id: int, entries: list[tuple[int, int, int, str]]) -> None:
        """Deliveries (offset, invisible deadline, attempt, nonce): in flight until acked or expired."""
        q = self.queue(group, topic, queue_id)
        for offset, deadline, attempt, nonce in entries:
            q.redeliver.pop(offset, None)
            if offset < q.acked_below or offset in q.done:
                continue  # finished meanwhile (records of one queue may land out of order)
            q.in_flight[offset] = InFlight(deadline, attempt, nonce)
            q.pop_offset = max(q.pop_offset, offset + 1)

    def finish(self, group: str, topic: str, queue_id: int, offsets: list[int]) -> None:
        """Acked, revived, or filtered out by the subscription (counts as consumed)."""
        q = self.queue(group, topic, queue_id)
        for offset in offsets:
            q.pop_offset = max(q.pop_offset, offset + 1)
            q.finish(offset)

    def _valid(self, handle: ReceiptHandle) -> tuple[QueueState, InFlight] | None:
        q = self.queues.get((handle.group, handle.topic, handle.queue_id))
        flight = q.in_flight.get(handle.offset) if q is not None else None
        if q is None or flight is None or flight.nonce != handle.nonce:
            return None
        return q, flight

    def ack(self, handle: ReceiptHandle) -> bool:
        found = self._valid(handle)
        if found is None:
            return False
        found[0].finish(handle.offset)
        return True

    def change_invisible(self, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle | None:
        found = self._valid(handle)
        if found is None:
            return None
        self.apply_invisible(
            handle.group, handle.topic, handle.queue_id, handle.offset, now_ms() + invisible_ms, secrets.token_hex(6)
        )
        return ReceiptHandle(handle.group, handle.topic, handle.queue_id, handle.offset, found[1].nonce, handle.broker)

    def apply_invisible(self, group: str, topic: str, queue_id: int, offset: int, deadline_ms: int, nonce: str) -> None:
        flight = self.queue(group, topic, queue_id).in_flight.get(offset)
        if flight is not None:
            flight.deadline_ms, flight.nonce = deadline_ms, nonce

    def cap_deadlines(self, deadline_ms: int) -> int:
        """Every delivery in flight becomes visible again by ``deadline_ms`` at the latest (a new
        master's takeover: an answer the old master had recorded may never have reached its client);
        its receipt handle still acks it until then. Returns how many were brought forward."""
        moved = 0
        for q in self.queues.values():
            for flight in q.in_flight.values():
                if flight.deadline_ms > deadline_ms:
                    flight.deadline_ms = deadline_ms
                    moved += 1
        return moved

    def revive_in_place(self, group: str, topic: str, queue_id: int, offset: int, attempt: int) -> None:
        """An acting master's revive: the expired message is delivered again from its own queue."""
        q = self.queue(group, topic, queue_id)
        if q.in_flight.pop(offset, None) is not None:
            q.redeliver[offset] = attempt + 1

    def expired(self) -> list[tuple[str, str, int, int, int]]:
        """(group, topic, queueId, offset, attempt) of every delivery whose invisible time passed."""
        t = now_ms()
        return [
            (g, topic, qid, off, f.attempt)
            for (g, topic, qid), q in self.queues.items()
            for off, f in q.in_flight.items()
            if f.deadline_ms <= t
        ]

    def committed(self) -> dict[tuple[str, str, int], int]:
        return {k: q.acked_below for k, q in self.queues.items()}

    def to_wire(self) -> dict:
        return {f"{g}@{t}@{q}": state.to_wire() for (g, t, q), state in self.queues.items()}

    @classmethod
    def from_wire(cls, raw: dict, committed: dict[tuple[str, str, int], int]) -> PopState:
        state = cls(committed)
        for key, queue in raw.items():
            group, topic, qid = key.rsplit("@", 2)
            state.queues[(group, topic, int(qid))] = QueueState.from_wire(queue)
        return state
