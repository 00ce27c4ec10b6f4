"""Pop consumption (RocketMQ 5 ``ReceiveMessage``/``AckMessage``; reference §7 POP numbers).

Per (group, topic, queueId) the broker keeps the next offset never popped and the messages in
flight, each with its invisible deadline and a nonce. A receipt handle names one in-flight
delivery: ack or ChangeInvisibleDuration with an old handle (a newer one was issued, or the message
was revived) is refused. The revive loop puts every message whose invisible time passed into the
group's retry topic ``%RETRY%{group}_{topic}`` with reconsumeTimes + 1, or into ``%DLQ%{group}``
once it was delivered ``popReviveMaxAttemptTimes`` (16) times.

In-flight state is kept in memory: after a broker restart, un-acknowledged messages are delivered
again from the last contiguous acknowledged offset (at-least-once, never lost).
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

    def encode(self) -> str:
        return "\x1f".join((self.group, self.topic, str(self.queue_id), str(self.offset), self.nonce)).encode().hex()

    @classmethod
    def decode(cls, raw: str) -> ReceiptHandle | None:
        try:
            group, topic, queue_id, offset, nonce = bytes.fromhex(raw).decode().split("\x1f")
            return cls(group, topic, int(queue_id), int(offset), nonce)
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

    def finish(self, offset: int) -> None:
        self.in_flight.pop(offset, None)
        self.done.add(offset)
        while self.acked_below in self.done:
            self.done.discard(self.acked_below)
            self.acked_below += 1


def now_ms() -> int:
    return int(time.time() * 1000)


class PopState:
    def __init__(self, committed: dict[tuple[str, str, int], int] | None = None):
        self._committed = committed or {}
        self.queues: dict[tuple[str, str, int], QueueState] = {}

    def queue(self, group: str, topic: str, queue_id: int) -> QueueState:
        key = (group, topic, queue_id)
        q = self.queues.get(key)
        if q is None:
            start = self._committed.get(key, 0)
            q = self.queues[key] = QueueState(pop_offset=start, acked_below=start)
        return q

    def pop(
        self, group: str, topic: str, queue_id: int, offsets: list[int], attempts: list[int], invisible_ms: int
    ) -> list[ReceiptHandle]:
        q = self.queue(group, topic, queue_id)
        deadline = now_ms() + invisible_ms
        handles = []
        for offset, attempt in zip(offsets, attempts, strict=True):
            nonce = secrets.token_hex(6)
            q.in_flight[offset] = InFlight(deadline, attempt, nonce)
            q.pop_offset = max(q.pop_offset, offset + 1)
            handles.append(ReceiptHandle(group, topic, queue_id, offset, nonce))
        return handles

    def skip(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A message the subscription filters out counts as consumed."""
        q = self.queue(group, topic, queue_id)
        q.pop_offset = max(q.pop_offset, offset + 1)
        q.finish(offset)

    def _valid(self, handle: ReceiptHandle) -> tuple[QueueState, InFlight] | None:
        q = self.queues.get((handle.group, handle.topic, handle.queue_id))
        flight = q.in_flight.get(handle.offset) if q else None
        if flight is None or flight.nonce != handle.nonce:
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
        flight = found[1]
        flight.deadline_ms = now_ms() + invisible_ms
        flight.nonce = secrets.token_hex(6)
        return ReceiptHandle(handle.group, handle.topic, handle.queue_id, handle.offset, flight.nonce)

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
