"""Consuming, whatever the client protocol: pops (ReceiveMessage), acks, invisible-time changes,
offset queries and resets, and the revive loop, over the pop state (brokers/pop.py) with the rules of
brokers/core/pop.py and brokers/core/fifo.py (the orderly pop of FIFO topics). A protocol edge
(brokers/grpc/consumer.py) turns requests into these calls and their outcomes into answers.

Who serves (brokers/metalog.py): the master, which writes a record of every change to its log
before it answers, so an answered ack is on every in-sync replica; a slave acting as master while
none is alive, from the state it followed. A plain slave's edge forwards the call to whichever of the
two its group has (``serving`` is false there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable

from mqrules.logical_queues import Segment

from .config import BrokerConfig
from .core.fifo import attempts_spent, is_orderly, max_attempts, plan_orderly_pop
from .core.pop import ReceiptHandle, dlq_topic, receive_order, retry_topic
from .core.views import moved_properties
from .meta import ConsumerMeta
from .metalog import MetaLog, MetaMode
from .metrics import Traffic
from .pop import PopState, now_ms
from .static import StaticQueues
from .store.message import Message
from .store.store import MessageStore, PutMessageStatus
from .topics import PERM_READ, PERM_WRITE, TopicConfig, TopicConfigManager

log = logging.getLogger("brokers.consuming")

REVIVE_INTERVAL_S = 0.5  # reviveInterval is 1 s in RocketMQ; half keeps redelivery close to the invisible time
POLL_STEP_S = 0.05

Matches = Callable[[str | None], bool]
Popped = list[tuple[Message, ReceiptHandle, int]]  # (message, its handle, its delivery attempt)
OffsetCommitted = Callable[[str, str, int, int, str], None]  # (group, topic, queueId, offset, source)


class NotStored(Exception):
    """A consumer-metadata record was not stored: the change must not be answered as done."""

    def __init__(self, status: PutMessageStatus, detail: str):
        super().__init__(detail or status)
        self.status, self.detail = status, detail


class ConsumeService:
    """``topics_changed()``: a retry or DLQ topic was created (the broker re-registers);
    ``offset_committed(...)``: every committed offset change, as clients see it (the audit report)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        meta: ConsumerMeta,
        metalog: MetaLog,
        static: StaticQueues,
        *,
        topics_changed: Callable[[], None] | None = None,
        offset_committed: OffsetCommitted | None = None,
        traffic: Traffic | None = None,
    ):
        self.config, self.store, self.topics, self.static = config, store, topics, static
        self.traffic = traffic if traffic is not None else Traffic()
        self.meta, self.metalog = meta, metalog
        self.offsets = meta.offsets
        self.topics_changed, self.offset_committed = topics_changed, offset_committed
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = defaultdict(asyncio.Lock)

    @property
    def pop(self) -> PopState:
        return self.meta.pop  # replaced whole by a snapshot

    @property
    def serving(self) -> bool:
        return self.metalog.mode is not MetaMode.FOLLOWER

    async def record(self, kind: str, min_acks: int = 0, **fields: object) -> None:
        """A change made: the master stores its record (NotStored if it could not; on ``min_acks``
        replicas at least), an acting master moves its DataVersion."""
        if self.metalog.mode is MetaMode.WRITER:
            result = await self.metalog.write(self.meta.record(kind, **fields), min_acks)
            if result.status is not PutMessageStatus.PUT_OK:
                raise NotStored(result.status, result.detail)
        else:
            self.meta.bump()

    async def ensure_group(self, group: str) -> None:
        """Subscription groups are created on first use (autoCreateSubscriptionGroup)."""
        if group not in self.meta.groups:
            self.meta.groups.add(group)
            await self.record("group", group=group)

    def orderly(self, topic: str) -> bool:
        """A group's receives from a FIFO topic are orderly (brokers/core/fifo.py: no per-group config)."""
        config = self.topics.topics.get(topic)
        return config is not None and is_orderly(config.message_type)

    def fifo_topics(self) -> frozenset[str]:
        """The topics whose receives are orderly: a consumer subscribed to one is told ``fifo``."""
        return frozenset(name for name, config in self.topics.topics.items() if is_orderly(config.message_type))

    # --- receive ----------------------------------------------------------------------------------

    async def receive(
        self,
        group: str,
        topic: str,
        queue_id: int,
        batch: int,
        invisible_ms: int,
        matches: Matches,
        every_queue: bool,
        deadline: float,
        *,
        client_id: str = "",
    ) -> list[tuple[Message, ReceiptHandle, int, int]]:
        """A receive of a plain topic: the group's retries first (unless orderly), then the queues of
        ``receive_order``; waits for new messages until ``deadline`` (loop time). (message, handle,
        attempt, queue id) each; NotStored when a pop was not recorded. ``client_id``: the receiving
        client's, kept in the pop records (a message's trace names it)."""
        orderly = self.orderly(topic)
        await self.ensure_group(group)
        loop = asyncio.get_running_loop()
        while True:
            found = []
            if not orderly:  # an orderly pop has no retry topic: it hands messages out again in place
                popped = await self.pop_from(
                    group, retry_topic(group, topic), 0, batch, invisible_ms, matches, client_id=client_id
                )
                found = [(msg, handle, attempt, queue_id) for msg, handle, attempt in popped]
            for qid in self.receive_order(topic, queue_id, every_queue):
                if len(found) >= batch:
                    break
                pop = self.pop_orderly if orderly else self.pop_from
                popped = await pop(group, topic, qid, batch - len(found), invisible_ms, matches, client_id=client_id)
                found += [(msg, handle, attempt, qid) for msg, handle, attempt in popped]
            if found or loop.time() >= deadline or not self.serving:
                return found
            await self.until_new(group, topic)

    async def receive_segment(
        self,
        group: str,
        topic: str,
        batch: int,
        invisible_ms: int,
        matches: Matches,
        deadline: float,
        segment: Segment,
        long_poll: bool,
        *,
        client_id: str = "",
    ) -> list[tuple[Message, ReceiptHandle, int, bool]]:
        """A receive of one segment of a static topic's logical queue, held here: the group's retries
        first (unless orderly), then the segment's physical queue; waits for new messages
        (``long_poll``) only on the writable segment. (message, handle, attempt, from the segment) each."""
        orderly = self.orderly(topic)
        found: list[tuple[Message, ReceiptHandle, int, bool]] = []
        await self.ensure_group(group)
        loop = asyncio.get_running_loop()
        while True:
            if not orderly:
                popped = await self.pop_from(
                    group, retry_topic(group, topic), 0, batch, invisible_ms, matches, client_id=client_id
                )
                found = [(m, h, a, False) for m, h, a in popped]
            if len(found) < batch:
                pop = self.pop_orderly if orderly else self.pop_from
                popped = await pop(group, topic, segment.queue_id, batch - len(found), invisible_ms, matches, client_id=client_id)
                found += [(m, h, a, True) for m, h, a in popped]
            if found or not long_poll or loop.time() >= deadline or not self.serving:
                return found
            await self.until_new(group, topic)

    def receive_order(self, topic: str, queue_id: int, every_queue: bool) -> list[int]:
        """The queues a receive pops (brokers/core/pop.py ``receive_order``)."""
        config = self.topics.topics.get(topic)
        return receive_order(queue_id, config.readQueueNums if config is not None else 0, every_queue)

    async def until_new(self, group: str, topic: str) -> None:
        """A long poll's pause: until a message arrives in the topic or its group's retry queue, or
        POLL_STEP_S passed (what comes due again, an ack that unblocks a FIFO queue, is seen then)."""
        loop = asyncio.get_running_loop()
        config = self.topics.topics.get(topic)
        queues = [(retry_topic(group, topic), 0)] + [(topic, q) for q in range(config.readQueueNums if config else 0)]
        ends = [self.store.max_queue_offset(t, q) for t, q in queues]
        until = loop.time() + POLL_STEP_S
        while (left := until - loop.time()) > 0:
            await self.store.wait_published(left)
            if [self.store.max_queue_offset(t, q) for t, q in queues] != ends:
                return

    def segment_done(self, group: str, topic: str, s: Segment) -> bool:
        """``group`` has every message of sealed segment ``s`` (of this broker set) acknowledged, and
        nothing waits in its retry topic here."""
        if s.phys_end is None or self.pop.peek(group, topic, s.queue_id).acked_below < s.phys_end:
            return False
        retry = retry_topic(group, topic)
        return self.pop.peek(group, retry, 0).acked_below >= self.store.max_queue_offset(retry, 0)

    # --- pops -------------------------------------------------------------------------------------

    async def pop_from(
        self, group: str, topic: str, queue_id: int, count: int, invisible_ms: int, matches: Matches, *, client_id: str = ""
    ) -> Popped:
        async with self._locks[(group, topic, queue_id)]:
            if not self.serving:
                return []
            await self._correct_overflow(group, topic, queue_id)
            state = self.pop.peek(group, topic, queue_id)
            chosen, attempts, skipped = await self._read_again(topic, queue_id, sorted(state.redeliver.items())[:count])
            if len(chosen) < count:  # revived in place above (acting master); new messages below
                await self._read_new(topic, queue_id, state.pop_offset, count - len(chosen), matches, chosen, attempts, skipped)
            return await self._hand_out(group, topic, queue_id, chosen, attempts, skipped, invisible_ms, client_id=client_id)

    async def pop_orderly(
        self, group: str, topic: str, queue_id: int, count: int, invisible_ms: int, matches: Matches, *, client_id: str = ""
    ) -> Popped:
        """An orderly pop (brokers/core/fifo.py ``plan_orderly_pop``): nothing while a delivery of the
        queue is invisible; else spent messages to the DLQ, the rest handed out again in place, then
        new ones. The DLQ needs a log to write: an acting master hands every message out again."""
        async with self._locks[(group, topic, queue_id)]:
            if not self.serving:
                return []
            await self._correct_overflow(group, topic, queue_id)
            writer = self.metalog.mode is MetaMode.WRITER
            attempts_left = max_attempts(self.config.retryMaxTimes) if writer else None
            plan = plan_orderly_pop(self.pop.peek(group, topic, queue_id), now_ms(), count, attempts_left)
            if plan.blocked or plan.idle:
                return []
            spent, spent_attempts, skipped = await self._read_again(topic, queue_id, plan.dead)
            for m, attempt in zip(spent, spent_attempts, strict=True):
                if not await self._move_out(group, topic, queue_id, m, attempt, dead=True):
                    return []  # not given up yet: nothing after it may go out
            chosen, attempts, gone = await self._read_again(topic, queue_id, plan.again)
            skipped += gone
            if plan.new:
                start = self.pop.peek(group, topic, queue_id).pop_offset
                await self._read_new(topic, queue_id, start, plan.new, matches, chosen, attempts, skipped)
            # lockInStrictMode: the queue's lock (what is in flight) is granted by a quorum of the group
            quorum = self.config.totalReplicas // 2 + 1 if self.config.lockInStrictMode else 0
            return await self._hand_out(group, topic, queue_id, chosen, attempts, skipped, invisible_ms, quorum, client_id)

    async def _read_again(self, topic, queue_id, due) -> tuple[list[Message], list[int], list[int]]:
        """The messages at ``due`` (offset, attempt), to hand out again: (messages, attempts, offsets gone)."""
        chosen, attempts, skipped = [], [], []
        for offset, attempt in due:
            msgs = await self.store.get_messages(topic, queue_id, offset, 1)
            if msgs and msgs[0].queue_offset == offset:
                chosen.append(msgs[0])
                attempts.append(attempt)
            else:
                skipped.append(offset)  # gone from the store: nothing to deliver
        return chosen, attempts, skipped

    async def _read_new(self, topic, queue_id, start, count, matches, chosen, attempts, skipped) -> None:
        """Up to ``count`` new messages from ``start`` that the filter matches (added to ``chosen``),
        the others to ``skipped`` (consumed without delivery)."""
        msgs = await self.store.get_messages(topic, queue_id, start, count * 4)
        taken = 0
        for m in msgs:
            if taken == count:
                break
            if not matches(m.properties.get("TAGS")):
                skipped.append(m.queue_offset)
                continue
            chosen.append(m)
            attempts.append(int(m.properties.get("RECONSUME_TIME", "0")) + 1)
            taken += 1

    async def _hand_out(self, group, topic, queue_id, chosen, attempts, skipped, invisible_ms, quorum=0, client_id="") -> Popped:
        """Put ``chosen`` in flight and ``skipped`` done, record it (on ``quorum`` replicas at least,
        with the receiving client and the time: a message's trace, brokers/core/trace.py), and pair
        each message with its handle."""
        if not chosen and not skipped:
            return []
        offsets = [m.queue_offset for m in chosen]
        queue = self.pop.queue(group, topic, queue_id)
        before = queue.mark([*offsets, *skipped])
        handles = self.pop.pop(group, topic, queue_id, offsets, attempts, invisible_ms)
        self.pop.finish(group, topic, queue_id, skipped)
        entries = [[h.offset, queue.in_flight[h.offset].deadline_ms, queue.in_flight[h.offset].attempt, h.nonce] for h in handles]
        try:
            await self.record(
                "pop",
                quorum,
                group=group,
                topic=topic,
                queueId=queue_id,
                entries=entries,
                skipped=skipped,
                clientId=client_id,
                popTimeMs=now_ms(),
            )
        except NotStored:
            # Not handed out: the replicas never see this pop, so the messages must stay unpopped here
            # too (kept in flight, a later pop's record would move the replicas' pop offset past them
            # and a new master would never deliver them).
            if self.pop.queues.get((group, topic, queue_id)) is queue:
                queue.restore(before)
            raise
        if chosen:
            self.traffic.messages_handed_out(topic, group, len(chosen), sum(len(m.body) for m in chosen))
        return list(zip(chosen, handles, attempts, strict=True))

    # --- acks and invisible time ------------------------------------------------------------------

    def queue_lock(self, key: tuple[str, str, int]) -> contextlib.AbstractAsyncContextManager:
        """What an ack or a ChangeInvisibleDuration holds: an orderly queue's pop lock (RocketMQ's
        ackOrderly waits for the QueueLockManager's lock), so that a pop never decides on a state an
        ack changes under it; nothing for other queues (their pops hand out nothing an ack changes)."""
        if key in self.pop.queues and self.orderly(key[1]):
            return self._locks[key]
        return contextlib.nullcontext()

    async def ack_queue(self, key: tuple[str, str, int], handles: list[ReceiptHandle]) -> tuple[list[bool], NotStored | None]:
        """The acks of one queue: whether each handle was good, and why their record was not stored
        (None: it was; only then are they answered OK)."""
        async with self.queue_lock(key):
            acked = [self.pop.ack(h) for h in handles]
            if any(acked):
                group, topic, queue_id = key
                offsets = [h.offset for h, ok in zip(handles, acked, strict=True) if ok]
                try:
                    await self.record("finish", group=group, topic=topic, queueId=queue_id, offsets=offsets)
                except NotStored as exc:
                    return acked, exc
        return acked, None

    async def change_invisible(self, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle | None:
        """The delivery of ``handle`` becomes visible again ``invisible_ms`` from now: its new handle,
        None for an unknown or expired handle; NotStored when its record was not stored."""
        async with self.queue_lock((handle.group, handle.topic, handle.queue_id)):
            new = self.pop.change_invisible(handle, invisible_ms)
            if new is None:
                return None
            flight = self.pop.queue(new.group, new.topic, new.queue_id).in_flight[new.offset]
            await self.record(
                "invisible",
                group=new.group,
                topic=new.topic,
                queueId=new.queue_id,
                offset=new.offset,
                deadlineMs=flight.deadline_ms,
                nonce=new.nonce,
            )
        return new

    # --- offsets ----------------------------------------------------------------------------------

    async def correct_overflows(self) -> None:
        """At a takeover: every offset beyond its queue's end is corrected before the queue grows
        past it (else the messages in between would be skipped), and every offset below its queue's
        min offset moved up to it."""
        for group, topic, queue_id in list(self.pop.queues):
            async with self._locks[(group, topic, queue_id)]:
                try:
                    await self._correct_overflow(group, topic, queue_id)
                except NotStored as exc:
                    log.warning(
                        "offset correction of %s on %s/%d not recorded (%s); the next pop retries", group, topic, queue_id, exc
                    )

    async def _correct_overflow(self, group: str, topic: str, queue_id: int) -> None:
        """OFFSET_OVERFLOW: a committed offset beyond the queue's end (an unclean election made a
        shorter log the master's) starts again at the end, or new messages would be skipped. And
        OFFSET_TOO_SMALL: below the queue's min offset (retention deleted its messages), the group
        goes on from the min offset (RocketMQ's correctMinOffset), reported as ``retention_skip``
        so the audit counts the messages lost to retention."""
        state = self.pop.peek(group, topic, queue_id)
        end = self.store.max_queue_offset(topic, queue_id)
        if state.pop_offset > end:
            log.warning(
                "consumer offset of group %s on %s/%d (%d) is beyond the queue's end (%d): corrected to %d (OFFSET_OVERFLOW)",
                group,
                topic,
                queue_id,
                state.pop_offset,
                end,
                end,
            )
            await self._reset_held(group, topic, queue_id, end, "offset_corrected")
            return
        await self._skip_deleted_held(group, topic, queue_id)

    async def skip_deleted(self, group: str, topic: str, queue_id: int) -> None:
        """A pull consumer asked below the queue's min offset: its committed offset, if below too,
        moves up (``_correct_overflow``'s OFFSET_TOO_SMALL)."""
        async with self._locks[(group, topic, queue_id)]:
            await self._skip_deleted_held(group, topic, queue_id)

    async def _skip_deleted_held(self, group: str, topic: str, queue_id: int) -> None:
        low = self.store.min_queue_offset(topic, queue_id)
        committed = self.committed_offset(group, topic, queue_id)
        if committed is None or committed >= low or self.pop.peek(group, topic, queue_id).pop_offset >= low:
            return
        log.warning(
            "consumer offset of group %s on %s/%d (%d) is below the queue's min offset (%d): %d messages were deleted by "
            "retention before it consumed them; it goes on from %d",
            group,
            topic,
            queue_id,
            committed,
            low,
            low - committed,
            low,
        )
        await self._reset_held(group, topic, queue_id, low, "retention_skip")

    async def reset_queue(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        """An operator's reset (the serving master): the group consumes the queue from ``offset`` on.
        Taken under the queue's lock, so a pop in progress ends first and the next one starts there;
        what was in flight is forgotten (its receipt handles are refused as expired, nothing of it is
        revived: a message below ``offset`` is skipped, one at or above it is delivered again). NotStored
        when its record was not stored."""
        await self.ensure_group(group)  # a replica refuses a record for a group it never heard of
        async with self._locks[(group, topic, queue_id)]:
            await self._reset_held(group, topic, queue_id, offset, source)

    async def _reset_held(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        """Start the queue again at ``offset`` and record it; the caller holds the queue's lock. The
        state changes before its record is queued, with no await in between, as every other change
        here: the records reach the log in the order the changes were made (an ack of this queue may
        run meanwhile, brokers/pop.py), so every replica replays what this one did."""
        self.pop.queue(group, topic, queue_id).reset(offset)
        await self.record("reset", group=group, topic=topic, queueId=queue_id, offset=offset)
        self._committed(group, topic, queue_id, offset, source)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of the queue; None when it never committed one here."""
        state = self.pop.queues.get((group, topic, queue_id))
        return state.acked_below if state is not None else self.offsets.get(group, topic, queue_id)

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A pull consumer's commit (a remoting client's UPDATE_CONSUMER_OFFSET, or the offset its pull
        carries): the queue goes on from ``offset``, as a reset does (such a group has nothing in
        flight). The same offset again changes and records nothing. An offset below the queue's min
        offset counts as the min (retention deleted what lies below: a pull's commit written after the
        group was moved past them must not move it back). NotStored when its record was not stored."""
        offset = max(offset, self.store.min_queue_offset(topic, queue_id))
        if self.committed_offset(group, topic, queue_id) != offset:
            await self.reset_queue(group, topic, queue_id, offset, "client_commit")

    def _committed(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        """A committed offset changed; reported as clients see it (a static topic's logical queue and
        offset; not reported while its segment's start is undecided)."""
        self.offsets.commit(group, topic, queue_id, offset, bump=self.metalog.mode is MetaMode.WRITER)
        if self.offset_committed is None:
            return
        if self.static.get(topic) is not None:
            logical = self.static.logical(topic, queue_id, offset)
            if logical is None:
                return
            queue_id, offset = logical
        self.offset_committed(group, topic, queue_id, offset, source)

    def persist_offsets(self) -> None:
        """The offset table follows the pop state; a slave's changes are its master's (slave_sync)."""
        source = "slave_sync" if self.metalog.mode is MetaMode.FOLLOWER else "client_commit"
        for (group, topic, queue_id), offset in self.pop.committed().items():
            if self.offsets.get(group, topic, queue_id) != offset:
                self._committed(group, topic, queue_id, offset, source)
        self.meta.persist()

    async def search_offset(self, topic: str, queue_id: int, wanted: int) -> int:
        """RocketMQ's searchOffset: the first message stored at ``wanted`` (ms) or later, else the
        queue's max offset (QueryOffset by time; an operator's reset to a time)."""
        end = self.store.max_queue_offset(topic, queue_id)
        return await self.offset_by_time(topic, queue_id, await self.first_offset(topic, queue_id, end), end, wanted)

    async def offset_by_time(self, topic: str, queue_id: int, lo: int, hi: int, wanted: int) -> int:
        """The first offset in [lo, hi) whose message was stored at ``wanted`` (ms) or later; hi if none."""
        while lo < hi:
            mid = (lo + hi) // 2
            msgs = await self.store.get_messages(topic, queue_id, mid, 1)
            if not msgs:
                lo = hi
                break
            if msgs[0].store_timestamp < wanted:
                lo = msgs[0].queue_offset + 1
            else:
                hi = mid
        return lo

    async def first_offset(self, topic: str, queue_id: int, end: int) -> int:
        """The queue's min offset: its first message's (``end``, its max offset, if it has none)."""
        return await self.store.first_queue_offset(topic, queue_id) if end else end

    # --- revive -----------------------------------------------------------------------------------

    async def revive_forever(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL_S)
            try:
                await self.revive_once()
                self.persist_offsets()
            except Exception:
                log.exception("revive failed; will retry")

    async def revive_once(self) -> int:
        """Put every message whose invisible time passed into its retry topic (or the DLQ), then let
        it go from the queue: the put comes first, so a crash in between redelivers, never loses.
        Runs where special services run (reference §5.1): the master; an acting master, which cannot
        write, delivers the message again from its own queue instead. Orderly queues (FIFO topics)
        have no retry topic: their next pop hands the message out again in place (brokers/core/fifo.py)."""
        if self.metalog.mode is MetaMode.FOLLOWER:
            return 0
        if self.metalog.mode is MetaMode.ACTING:
            expired = self.pop.expired()
            for group, topic, queue_id, offset, attempt in expired:
                self.pop.revive_in_place(group, topic, queue_id, offset, attempt)
            if expired:
                self.meta.bump()
            return len(expired)
        revived = 0
        for group, topic, queue_id, offset, attempt in self.pop.expired():
            if self.orderly(topic):
                continue  # handed out again in place by the queue's next orderly pop (or given up there)
            async with self._locks[(group, topic, queue_id)]:
                flight = self.pop.peek(group, topic, queue_id).in_flight.get(offset)
                if flight is None or flight.deadline_ms > now_ms():
                    continue  # acked or made invisible again since
                msgs = await self.store.get_messages(topic, queue_id, offset, 1)
                if not msgs or msgs[0].queue_offset != offset:
                    continue
                dead = attempts_spent(attempt + 1, max_attempts(self.config.retryMaxTimes))
                revived += await self._move_out(group, topic, queue_id, msgs[0], attempt, dead=dead)
        return revived

    async def _move_out(self, group: str, topic: str, queue_id: int, m: Message, attempt: int, dead: bool) -> bool:
        """Put ``m``, delivered ``attempt`` times, into the group's DLQ (``dead``) or its retry topic,
        then let it go from the queue: the put comes first, so a crash in between redelivers, never
        loses. The caller holds the queue's lock. False if the put failed (it stays where it is)."""
        offset = m.queue_offset
        props = moved_properties(m.properties, topic, attempt, dead)
        target = dlq_topic(group) if dead else retry_topic(group, props["ORIGIN_TOPIC"])
        self.ensure_topic(target)
        copy = Message(
            target,
            0,
            m.body,
            props,
            m.flag,
            m.sys_flag,
            born_timestamp=m.born_timestamp,
            born_host=m.born_host,
            store_host=(self.config.brokerIP1, self.config.listenPort),  # its offset message id names this broker
            reconsume_times=attempt,
        )
        result = await self.store.put_message(copy)
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("moving %s/%d@%d into %s failed: %s", topic, queue_id, offset, target, result.status)
            return False
        self.pop.queue(group, topic, queue_id).finish(offset)
        try:
            await self.record("finish", group=group, topic=topic, queueId=queue_id, offsets=[offset], movedTo=target)
        except NotStored as exc:
            log.warning("revive of %s/%d@%d not recorded (%s); a new master revives it again", topic, queue_id, offset, exc)
        return True

    def ensure_topic(self, name: str) -> None:
        """A retry or DLQ topic exists in the topic configs (one queue, readable and writable, as
        RocketMQ creates them on first use) and so in the routes: operators can read a DLQ. (Its
        record reaches the slaves through the topic configs' change hook, brokers/broker.py.)"""
        if name not in self.topics.topics:
            self.topics.update(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))
            if self.topics_changed is not None:
                self.topics_changed()
