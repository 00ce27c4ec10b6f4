"""Pop consumption (RocketMQ 5 ``ReceiveMessage``/``AckMessage``; reference §7 POP numbers).

Per (group, topic, queueId) the broker keeps the next offset never popped and the messages in
flight, each with its invisible deadline and a nonce. A receipt handle names one in-flight
delivery: ack or ChangeInvisibleDuration with an old handle (a newer one was issued, or the message
was revived) is refused. The revive loop puts every message whose invisible time passed into the
group's retry topic ``%RETRY%{group}_{topic}`` with reconsumeTimes + 1, or into ``%DLQ%{group}``
once it was delivered ``popReviveMaxAttemptTimes`` (16) times. Orderly queues (FIFO topics,
brokers/core/fifo.py) have no retry topic: the queue's next pop hands an expired message out again in
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

from .core.pop import InFlight, QueueState, ReceiptHandle, dlq_topic, retry_topic, wire_nonce, wire_offset

# The values and rules live in brokers/core/pop.py; named here too for the record replay (brokers/meta.py).
__all__ = [
    "PopState",
    "InFlight",
    "QueueState",
    "ReceiptHandle",
    "dlq_topic",
    "now_ms",
    "retry_topic",
    "wire_nonce",
    "wire_offset",
]


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
