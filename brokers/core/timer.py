"""Timer (delay) messages' rules (RocketMQ 5's ``delivery_timestamp``, RocketMQ's TimerMessageStore,
reference §7; the service that carries them out: brokers/timer.py): the properties a timer message
carries, its due time, the in-memory wheel and the checkpoint a new master rebuilds it from. Pure."""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass

# RocketMQ's property names (MessageConst)
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TIMER_KEYS = frozenset({TIMER_DELIVER_MS, TIMER_OUT_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS, REAL_TOPIC, REAL_QID})


class TimerRefused(ValueError):
    """A delivery time the broker does not accept (ILLEGAL_DELIVERY_TIME)."""


def delivery_due(deliver_ms: int, now: int, max_delay_ms: int) -> int | None:
    """The due time of a message asked for ``deliver_ms``: None when it is due now or was due in the
    past (it goes to its topic at once). TimerRefused for a time too far ahead."""
    if deliver_ms > now + max_delay_ms:
        raise TimerRefused(
            f"delivery time {deliver_ms} ms is {(deliver_ms - now) / 1000:.0f} s ahead, beyond the maximum "
            f"{max_delay_ms // 1000} s (timerMaxDelaySec); delivery_timestamp is in seconds and nanos"
        )
    return deliver_ms if deliver_ms > now else None


@dataclass(frozen=True)
class Checkpoint:
    low: int = 0  # every timer-queue entry below is delivered
    next: int = 0  # the entries below were read into the wheel ...
    read_ms: int = 0  # ... and those of them due at or before this are delivered

    def to_wire(self) -> dict:
        return {"low": self.low, "next": self.next, "readMs": self.read_ms}

    @classmethod
    def from_wire(cls, raw: object) -> Checkpoint:
        if not isinstance(raw, dict):
            raise ValueError(f"a timer checkpoint is an object, not {type(raw).__name__}")
        cp = cls(int(raw["low"]), int(raw["next"]), int(raw["readMs"]))
        if not 0 <= cp.low <= cp.next or cp.read_ms < 0:
            raise ValueError(f"inconsistent timer checkpoint {raw}")
        return cp

    def encode(self) -> bytes:
        return json.dumps(self.to_wire(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> Checkpoint:
        return cls.from_wire(json.loads(body))


def still_pending(cp: Checkpoint, offset: int, due_ms: int) -> bool:
    """Whether the timer-queue entry at ``offset``, due at ``due_ms``, is not delivered yet."""
    if offset < cp.low:
        return False
    return offset >= cp.next or due_ms > cp.read_ms


class Wheel:
    """Pending timers in slots of ``precision_ms`` (RocketMQ's TimerWheel, in memory): ``take_due``
    returns, by due time, every entry due at or before a time, and never one due after it."""

    def __init__(self, precision_ms: int):
        self.precision_ms = precision_ms
        self._slots: dict[int, list[tuple[int, int]]] = {}  # slot -> [(due, offset)]
        self._order: list[int] = []  # heap of non-empty slots
        self._offsets: list[int] = []  # heap of offsets, lazily cleaned of those not pending
        self._pending: set[int] = set()
        self.size = 0

    def add(self, offset: int, due_ms: int) -> None:
        slot = due_ms // self.precision_ms
        entries = self._slots.get(slot)
        if entries is None:
            entries = self._slots[slot] = []
            heapq.heappush(self._order, slot)
        entries.append((due_ms, offset))
        if offset not in self._pending:
            self._pending.add(offset)
            heapq.heappush(self._offsets, offset)
        self.size += 1

    def take_due(self, now: int) -> list[tuple[int, int]]:
        """(due, offset) of every entry due at or before ``now``, earliest first; removed."""
        taken: list[tuple[int, int]] = []
        current = now // self.precision_ms
        while self._order and self._order[0] <= current:
            slot = self._order[0]
            entries = self._slots[slot]
            if slot < current:
                taken += entries
                del self._slots[slot]
                heapq.heappop(self._order)
                continue
            due = [e for e in entries if e[0] <= now]
            if due:
                rest = [e for e in entries if e[0] > now]
                taken += due
                if rest:
                    self._slots[slot] = rest
                else:
                    del self._slots[slot]
                    heapq.heappop(self._order)
            break
        taken.sort()
        self._pending.difference_update(offset for _, offset in taken)
        self.size -= len(taken)
        return taken

    def next_due(self) -> int | None:
        """The earliest due time pending (None: nothing is)."""
        return min(due for due, _ in self._slots[self._order[0]]) if self._order else None

    def low(self, next_offset: int) -> int:
        """The lowest pending offset (``next_offset`` when nothing is pending)."""
        while self._offsets and self._offsets[0] not in self._pending:
            heapq.heappop(self._offsets)
        return self._offsets[0] if self._offsets else next_offset
