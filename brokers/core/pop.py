"""Pop consumption's values and rules (RocketMQ 5 ``ReceiveMessage``/``AckMessage``; reference §7 POP
numbers; the state machine that changes them: brokers/pop.py ``PopState``): retry and DLQ topic names,
receipt handles, one queue's state, which queues a receive pops, which tags a filter takes. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


@dataclass(frozen=True)
class QueueMark:
    """What a change is about to touch of one queue, as it was: its two offsets and, for each offset
    the change names, its delivery in flight, its redelivery attempt and whether it was done."""

    pop_offset: int
    acked_below: int
    offsets: dict[int, tuple[InFlight | None, int | None, bool]]


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

    def mark(self, offsets: Iterable[int]) -> QueueMark:
        """The state a change of ``offsets`` (a pop: the ones handed out and the ones skipped) would
        alter, for ``restore``."""
        return QueueMark(
            self.pop_offset,
            self.acked_below,
            {o: (self.in_flight.get(o), self.redeliver.get(o), o < self.acked_below or o in self.done) for o in offsets},
        )

    def restore(self, mark: QueueMark) -> None:
        """Undo a change of the offsets ``mark`` names (a pop whose record was not stored: its
        messages were not handed out, and the replicas, which never see the record, agree). Changes
        of other offsets made since (acks of older deliveries) stay."""
        undone = {o for o, (_, _, was_done) in mark.offsets.items() if not was_done}
        for o, (flight, attempt, _) in mark.offsets.items():
            if flight is None:
                self.in_flight.pop(o, None)
            else:
                self.in_flight[o] = flight
            if attempt is None:
                self.redeliver.pop(o, None)
            else:
                self.redeliver[o] = attempt
        low = min((o for o in undone if o < self.acked_below), default=self.acked_below)
        if low < self.acked_below:  # finished offsets moved it: every other offset it passed is done
            self.done |= set(range(low, self.acked_below)) - undone
            self.acked_below = low
        self.done -= undone
        self.pop_offset = min(self.pop_offset, max(mark.pop_offset, self.acked_below))

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


def tag_matcher(expression: str, sql: bool) -> Callable[[str | None], bool] | None:
    """A TAG filter (``*`` or ``a || b``) as a test of a message's TAGS; None for a SQL filter, which
    is not supported (ILLEGAL_FILTER_EXPRESSION)."""
    text = (expression or "*").strip()
    if sql:
        return None
    if text in ("", "*"):
        return lambda tags: True
    wanted = {t.strip() for t in text.split("||") if t.strip()}
    return lambda tags: tags in wanted


def receive_order(queue_id: int, readable: int, every_queue: bool) -> list[int]:
    """The queues a receive pops. RocketMQ's proxy pops every queue of the broker (queue id -1)
    whatever the request names; for an official client (``every_queue``: it names its language)
    that is the queue named first, then, while the batch is not full, the topic's other ``readable``
    queues after it, so a client that asks each queue in turn (Python) still finds its own first and
    one that only asks queue 0 (the Node.js SimpleConsumer) reads the whole topic. A request that
    names no language (a tool reading one queue, as bench/ and chaos/ do) pops the queue named."""
    if not every_queue or not 0 <= queue_id < readable:
        return [queue_id]
    return [(queue_id + i) % readable for i in range(readable)]
