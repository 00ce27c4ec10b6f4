"""Timer (delay) messages: RocketMQ 5's ``delivery_timestamp`` (message type DELAY), kept in the
commit log so that they replicate over the HA link like any message (issue 17; RocketMQ's
TimerMessageStore, reference §7).

- **Accepted** (``delivery_due``, ``into_wheel``): a message due later is stored in the system topic
  ``rmq_sys_wheel_timer`` queue 0 with its real topic and queue (``REAL_TOPIC`` / ``REAL_QID``) and
  its due time (``TIMER_OUT_MS``), as RocketMQ's put hook rewrites it; one due now goes to its topic
  at once, however long ago it was due (as RocketMQ: its broker holds a timer back only while its
  time is ahead; a producer whose clock runs behind, or a retry across a failover of a timer already
  due, is answered like any send). Only a delivery time beyond ``timerMaxDelaySec`` is refused
  (ILLEGAL_DELIVERY_TIME), nothing stored.
- **Delivered** by the serving master (``TimerService``): every ``timerPrecisionMs`` it reads the
  timer queue's new entries into an in-memory wheel (slots of ``timerPrecisionMs``), takes what is
  due (never before its time), and writes the messages back to their topics (``out_of_wheel``:
  ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS`` added) **in one write with a checkpoint record**
  (queue 1 of the timer topic).
- **The checkpoint** ``(low, next, read_ms)``: every entry below ``low`` is delivered; of the entries
  below ``next`` (the ones read into the wheel) those due at or before ``read_ms`` are delivered;
  everything else is pending. A new master (or a restarted one) rebuilds its wheel from its own copy
  of the log: the last checkpoint record, then the timer queue from ``low`` (``still_pending``).
  Because the deliveries and their checkpoint are one write, and a replica's log is a prefix of its
  master's, a takeover neither loses a timer nor delivers one twice unless a write was cut between
  the two (then the messages of that one write come again, with their ids).

RocketMQ keeps the wheel and a timer log in files of their own, rebuilt from the replicated timer
queue; here the wheel is memory only and the checkpoint is in the log itself, so a slave has nothing
of its own to keep in step (RocketMQ's slaves copy the master's checkpoint every 3 s).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from .core.timer import REAL_QID, REAL_TOPIC, TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS, TIMER_OUT_MS, Checkpoint, Wheel, still_pending
from .store.message import Message
from .store.store import MessageStore, PutMessageStatus

log = logging.getLogger("brokers.timer")

TIMER_TOPIC = "rmq_sys_wheel_timer"
WHEEL_QUEUE, CHECKPOINT_QUEUE = 0, 1
READ_BATCH = 1024
# Timers due within this long are kept in memory as read (their delivery reads nothing back), up to
# KEPT_MAX of them; later ones are read from the log when due.
KEEP_WINDOW_MS = 600_000
KEPT_MAX = 200_000
RETRY_LOG_S = 5.0
MIN_SLEEP_S = 0.002  # a turn that finds more already due still lets the loop breathe


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- the messages the timer queue keeps (built from the rules of brokers/core/timer.py) ----------------


def into_wheel(msg: Message, due_ms: int) -> Message:
    """The message as the timer queue keeps it until ``due_ms``."""
    props = dict(msg.properties)
    props[REAL_TOPIC], props[REAL_QID], props[TIMER_OUT_MS] = msg.topic, str(msg.queue_id), str(due_ms)
    return Message(
        TIMER_TOPIC,
        WHEEL_QUEUE,
        msg.body,
        props,
        flag=msg.flag,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        reconsume_times=msg.reconsume_times,
    )


def due_of(stored: Message) -> int | None:
    """A timer-queue entry's due time; None for one that is not a timer message (nothing to do)."""
    props = stored.properties
    try:
        return int(props[TIMER_OUT_MS]) if REAL_TOPIC in props and REAL_QID in props else None
    except (KeyError, ValueError):
        return None


def out_of_wheel(stored: Message, enqueued_ms: int, now: int) -> Message:
    """The message written back to its topic when due (``TIMER_OUT_MS`` and ``TIMER_DELIVER_MS`` stay:
    it is not a timer message again, and its consumer sees its delivery time)."""
    props = dict(stored.properties)
    topic, qid = props.pop(REAL_TOPIC), int(props.pop(REAL_QID))
    props[TIMER_ENQUEUE_MS], props[TIMER_DEQUEUE_MS] = str(enqueued_ms), str(now)
    return Message(
        topic,
        qid,
        stored.body,
        props,
        flag=stored.flag,
        sys_flag=stored.sys_flag,
        born_timestamp=stored.born_timestamp,
        reconsume_times=stored.reconsume_times,
    )


# --- the service (the serving master) --------------------------------------------------------------


Escape = Callable[[list[Message]], Awaitable[list[str | None]]]


class TimerService:
    """Runs while this broker is the serving master (``activate`` / ``deactivate``), or acts for a
    dead one (``activate(escape)``: due messages go to another master of the cluster, brokers/grpc/escape.py,
    and the checkpoint stays here until the returning master takes it back, ``adopt``)."""

    def __init__(self, store: MessageStore, precision_ms: int, max_delay_ms: int):
        self.store = store
        self.precision_ms = precision_ms
        self.max_delay_ms = max_delay_ms
        self.wheel = Wheel(precision_ms)
        self.checkpoint = Checkpoint()
        self._enqueued_at: dict[int, int] = {}  # offset -> when it was read into the wheel (TIMER_ENQUEUE_MS)
        self._kept: dict[int, Message] = {}  # offset -> the entry, for timers due soon
        self._task: asyncio.Task | None = None
        self._escape: Escape | None = None
        self.adopted: Checkpoint | None = None  # an acting master's, taken back at pre-online
        self.escaped_any = False
        self._failing_since: float | None = None

    @property
    def active(self) -> bool:
        return self._task is not None and not self._task.done()

    def activate(self, escape: Escape | None = None) -> None:
        self._escape = escape
        if escape is None:
            self.escaped_any = False  # the master's own log holds what it delivers
        if not self.active:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="timer-wheel")

    async def deactivate(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self.wheel = Wheel(self.precision_ms)
        self._enqueued_at.clear()
        self._kept.clear()

    async def _run(self) -> None:
        await self.store.settled()
        await self._load()
        step = self.precision_ms / 1000
        while True:
            try:
                await self._enqueue()
                await self._deliver_due()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the wheel stop
                log.exception("timer wheel turn failed; retrying")
                await asyncio.sleep(1)
            # until the next turn of the wheel, or the earliest due timer if that comes first
            wait = step - (time.time() % step)
            earliest = self.wheel.next_due()
            if earliest is not None:
                wait = min(wait, (earliest - now_ms()) / 1000)
            await asyncio.sleep(max(MIN_SLEEP_S, wait))

    async def _load(self) -> None:
        """The last checkpoint of this broker's log, then every pending entry from its ``low``."""
        end = self.store.max_queue_offset(TIMER_TOPIC, CHECKPOINT_QUEUE)
        cp = Checkpoint()
        if end > 0:
            last = await self.store.get_messages(TIMER_TOPIC, CHECKPOINT_QUEUE, end - 1, 1)
            try:
                cp = Checkpoint.decode(last[0].body) if last else cp
            except (ValueError, KeyError, TypeError) as exc:
                log.error("timer checkpoint %d is unreadable (%s): rebuilding from the start of the timer queue", end - 1, exc)
        if self.adopted is not None and self.adopted.read_ms > cp.read_ms:
            log.info("timer wheel: taking the acting master's checkpoint (read %d) over this log's", self.adopted.read_ms)
            cp = self.adopted
        self.adopted = None
        self.checkpoint = Checkpoint(cp.low, cp.low, cp.read_ms)  # the wheel reads again from low
        self.wheel = Wheel(self.precision_ms)
        self._enqueued_at.clear()
        self._kept.clear()
        pending = await self._enqueue(recovering=cp)
        log.info("timer wheel: %d pending (checkpoint: low %d, next %d, read %d)", pending, cp.low, cp.next, cp.read_ms)

    async def _enqueue(self, recovering: Checkpoint | None = None) -> int:
        """Read the timer queue's new entries into the wheel; how many were added."""
        added = 0
        now = now_ms()
        while True:
            start = self.checkpoint.next
            end = self.store.max_queue_offset(TIMER_TOPIC, WHEEL_QUEUE)
            if start >= end:
                return added
            batch = await self.store.get_messages(TIMER_TOPIC, WHEEL_QUEUE, start, READ_BATCH)
            if not batch:  # holes only (a replica that started above them)
                self.checkpoint = Checkpoint(self.checkpoint.low, min(end, start + READ_BATCH), self.checkpoint.read_ms)
                continue
            for m in batch:
                due = due_of(m)
                if due is not None and (recovering is None or still_pending(recovering, m.queue_offset, due)):
                    self.wheel.add(m.queue_offset, due)
                    self._enqueued_at[m.queue_offset] = now
                    if due - now < KEEP_WINDOW_MS and len(self._kept) < KEPT_MAX:
                        self._kept[m.queue_offset] = m
                    added += 1
            self.checkpoint = Checkpoint(self.checkpoint.low, batch[-1].queue_offset + 1, self.checkpoint.read_ms)

    async def _deliver_due(self) -> None:
        now = now_ms()
        due = self.wheel.take_due(now)
        if not due:
            return
        offsets = sorted(offset for _, offset in due)
        kept = self._kept
        by_offset = {o: kept.pop(o) for o in offsets if o in kept}
        if len(by_offset) < len(offsets):
            by_offset.update((m.queue_offset, m) for m in await self._read([o for o in offsets if o not in by_offset]))
        going = [(d, o) for d, o in due if o in by_offset and due_of(by_offset[o]) is not None]
        out = [out_of_wheel(by_offset[o], self._enqueued_at.get(o, now), now) for _, o in going]
        cp = Checkpoint(self.wheel.low(self.checkpoint.next), self.checkpoint.next, now)
        if self._escape is not None:  # acting for a dead master: to another master, the checkpoint kept here
            failures = await self._escape(out)
            failed = [entry for entry, why in zip(going, failures, strict=True) if why is not None]
            problem = next((why for why in failures if why is not None), None)
            self.escaped_any = self.escaped_any or len(failed) < len(going)
        else:
            results = await self.store.put_messages([*out, Message(TIMER_TOPIC, CHECKPOINT_QUEUE, cp.encode(), {})])
            bad = next((r for r in results if r.status is not PutMessageStatus.PUT_OK), None)
            failed = going if bad is not None else []
            problem = f"{bad.status} {bad.detail}" if bad is not None else None
        for o in offsets:
            self._enqueued_at.pop(o, None)
        if not failed:
            self.checkpoint = cp
            self._failing_since = None
            return
        # Not written (not the master any more, no in-sync replica, no master to escape to): due again
        # at the next turn; the checkpoint stays where it was.
        for due_ms, offset in failed:
            self.wheel.add(offset, due_ms)
            self._enqueued_at[offset] = now
        mono = time.monotonic()
        if self._failing_since is None or mono - self._failing_since > RETRY_LOG_S:
            self._failing_since = mono
            log.warning("%d due timer messages not delivered (%s); retrying", len(failed), problem)

    async def _read(self, offsets: Iterable[int]) -> list[Message]:
        """The timer-queue entries at ``offsets`` (sorted), read in runs of consecutive offsets."""
        out: list[Message] = []
        run: list[int] = []
        for o in [*offsets, -2]:
            if run and o != run[-1] + 1:
                got = await self.store.get_messages(TIMER_TOPIC, WHEEL_QUEUE, run[0], len(run))
                out += [m for m in got if m.queue_offset <= run[-1]]  # (a read below the min starts at it)
                run = []
            run.append(o)
        return out
