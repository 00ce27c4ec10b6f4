"""The consumer half of ``MessagingService``: ReceiveMessage (pop), AckMessage,
ChangeInvisibleDuration, QueryOffset, and the revive loop (brokers/pop.py has the rules; the orderly
pop of FIFO topics, brokers/fifo.py).

Who serves (brokers/metalog.py): the master, which writes a record of every change to its log
before it answers, so an answered ack is on every in-sync replica; a slave acting as master while
none is alive, from the state it followed. A plain slave forwards the call to whichever of the two
its group has (forward.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..delay_levels import DELAY
from ..fifo import SHARDING_KEY, is_orderly, max_attempts, plan_orderly_pop
from ..meta import ConsumerMeta
from ..metalog import MetaLog, MetaMode
from ..pop import PopState, ReceiptHandle, dlq_topic, now_ms, retry_topic
from ..store.message import Message
from ..store.store import MessageStore, PutMessageStatus
from ..timer import TIMER_KEYS
from ..topics import PERM_READ, PERM_WRITE, TopicConfig
from .clients import client_language
from .codes import send_code
from .forward import Forwarder, NoServingBroker, ServeHere
from .logical import LogicalSide, by_broker
from .messages import client_message

log = logging.getLogger("brokers.grpc")

SYSTEM_KEYS = frozenset(
    {
        "UNIQ_KEY",
        "TAGS",
        "KEYS",
        "BORN_HOST",
        "RECONSUME_TIME",
        "ORIGIN_TOPIC",
        "ORIGIN_QUEUE_ID",
        SHARDING_KEY,
        DELAY,
        *TIMER_KEYS,
    }
)
REVIVE_INTERVAL_S = 0.5  # reviveInterval is 1 s in RocketMQ; half keeps redelivery close to the invisible time
POLL_STEP_S = 0.05


def _status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


def _ms(duration: Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 10**6


def tag_matcher(expr: pb.FilterExpression):
    """TAG expressions: ``*`` or ``a || b``; SQL filtering is not supported (BAD_REQUEST)."""
    text = (expr.expression or "*").strip()
    if expr.type == pb.FilterType.SQL:
        return None
    if text in ("", "*"):
        return lambda tags: True
    wanted = {t.strip() for t in text.split("||") if t.strip()}
    return lambda tags: tags in wanted


class NotStored(Exception):
    """A consumer-metadata record was not stored: the change must not be answered as done."""

    def __init__(self, status: PutMessageStatus, detail: str):
        super().__init__(detail or status)
        self.status, self.detail = status, detail


class ConsumerSide(LogicalSide):
    """Mixed into MessagingService; needs ``self.store``, ``self.config``; static topics' logical
    queues through LogicalSide (``init_logical``)."""

    store: MessageStore
    forwarder: Forwarder

    on_topics_changed: Callable[[], None] | None = None  # the broker re-registers with the nameserver
    # Sees every committed offset change (group, topic, queueId, offset, source): the audit report.
    on_offset_committed: Callable[[str, str, int, int, str], None] | None = None

    def init_consumer(self, meta: ConsumerMeta, metalog: MetaLog) -> None:
        self.meta, self.metalog = meta, metalog
        self.offsets = meta.offsets
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = defaultdict(asyncio.Lock)

    @property
    def pop(self) -> PopState:
        return self.meta.pop  # replaced whole by a snapshot

    @property
    def serving(self) -> bool:
        return self.metalog.mode is not MetaMode.FOLLOWER

    async def _record(self, kind: str, min_acks: int = 0, **fields: object) -> None:
        """A change made: the master stores its record (NotStored if it could not; on ``min_acks``
        replicas at least), an acting master moves its DataVersion."""
        if self.metalog.mode is MetaMode.WRITER:
            result = await self.metalog.write(self.meta.record(kind, **fields), min_acks)
            if result.status is not PutMessageStatus.PUT_OK:
                raise NotStored(result.status, result.detail)
        else:
            self.meta.bump()

    async def _ensure_group(self, group: str) -> None:
        """Subscription groups are created on first use (autoCreateSubscriptionGroup)."""
        if group not in self.meta.groups:
            self.meta.groups.add(group)
            await self._record("group", group=group)

    async def _forward(self, method: str, request, context, empty, forwarding: Callable[[], bool] | None = None):
        """A slave hands a call to its group's serving broker (forward.py); nobody there in time:
        INTERNAL_SERVER_ERROR, which the clients retry (``empty``: the response type). None when
        this broker serves it after all (elected meanwhile: ``forwarding()`` turned false; by
        default, while it does not serve consumers)."""
        try:
            return await self.forwarder.unary(method, request, context, forwarding or (lambda: not self.serving))
        except NoServingBroker as exc:
            return empty(status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
        except ServeHere:
            return None

    # --- receive ----------------------------------------------------------------------------------

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context):
        group, topic, queue_id = request.group.name, request.message_queue.topic.name, request.message_queue.id
        matches = tag_matcher(request.filter_expression)
        if matches is None:
            yield spb.ReceiveMessageResponse(status=_status(pb.Code.ILLEGAL_FILTER_EXPRESSION, "SQL filters are not supported"))
            return
        if topic not in self.topics.topics:
            yield spb.ReceiveMessageResponse(status=_status(pb.Code.TOPIC_NOT_FOUND))
            return
        if not self.serving:
            try:
                async for response in self.forwarder.stream("ReceiveMessage", request, context, lambda: not self.serving):
                    yield response
                return
            except NoServingBroker as exc:
                yield spb.ReceiveMessageResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
                return
            except ServeHere:
                pass  # elected meanwhile: served here
        batch = max(1, min(request.batch_size or 32, 1024))
        invisible_ms = _ms(request.invisible_duration) or 30_000
        # Answer before the client's own deadline (request timeout + await duration): keep a margin.
        deadline = asyncio.get_running_loop().time() + max(0.0, _ms(request.long_polling_timeout) / 1000 - 0.5)
        static = self.static.get(topic)
        if static is not None:  # a static topic's logical queue (logical.py)
            pop_segment = partial(self._pop_segment, group, topic, batch, invisible_ms, matches)
            every_queue = bool(client_language(context))
            async for answer in self.receive_static(request, context, static, every_queue, pop_segment, deadline):
                yield answer
            return
        orderly = self.orderly(topic)
        try:
            await self._ensure_group(group)
            while True:
                found = []
                if not orderly:  # an orderly pop has no retry topic: it hands messages out again in place
                    popped = await self._pop_from(group, retry_topic(group, topic), 0, batch, invisible_ms, matches)
                    found = [(msg, handle, attempt, queue_id) for msg, handle, attempt in popped]
                for qid in self._receive_order(topic, queue_id, bool(client_language(context))):
                    if len(found) >= batch:
                        break
                    pop = self._pop_orderly if orderly else self._pop_from
                    popped = await pop(group, topic, qid, batch - len(found), invisible_ms, matches)
                    found += [(msg, handle, attempt, qid) for msg, handle, attempt in popped]
                if found or asyncio.get_running_loop().time() >= deadline or not self.serving:
                    break
                await self._until_new(group, topic)
            outcome: list[pb.Message] | NotStored = [
                self._client_message(msg, handle, attempt, invisible_ms, qid) for msg, handle, attempt, qid in found
            ]
        except NotStored as exc:
            outcome = exc
        for answer in self._answers(outcome):
            yield answer

    @staticmethod
    def _answers(outcome: list[pb.Message] | NotStored):
        """A receive's answers: the error of a pop not recorded; MESSAGE_NOT_FOUND; or OK, then each message."""
        if isinstance(outcome, NotStored):
            detail = f"pop not recorded: {outcome.detail or outcome.status}"
            yield spb.ReceiveMessageResponse(status=_status(send_code(outcome.status), detail))
        elif not outcome:
            yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=_status(pb.Code.OK))
            for out in outcome:
                yield spb.ReceiveMessageResponse(message=out)

    async def _pop_segment(self, group, topic, batch, invisible_ms, matches, deadline, lid, segment, long_poll):
        """The answers to a receive of one segment of a static topic's logical queue ``lid``, held
        here: the group's retries first (unless orderly), then the segment's physical queue; waits for
        new messages (``long_poll``) only on the writable segment. Clients see the logical queue and
        offsets; handles name this broker set."""
        orderly = self.orderly(topic)
        found: list = []
        try:
            await self._ensure_group(group)
            while True:
                if not orderly:
                    found = [
                        (m, h, a, False)
                        for m, h, a in await self._pop_from(group, retry_topic(group, topic), 0, batch, invisible_ms, matches)
                    ]
                if len(found) < batch:
                    pop = self._pop_orderly if orderly else self._pop_from
                    popped = await pop(group, topic, segment.queue_id, batch - len(found), invisible_ms, matches)
                    found += [(m, h, a, True) for m, h, a in popped]
                if found or not long_poll or asyncio.get_running_loop().time() >= deadline or not self.serving:
                    break
                await self._until_new(group, topic)
        except NotStored as exc:
            for answer in self._answers(exc):
                yield answer
            return
        here, outcome = self.static.broker, []
        for msg, handle, attempt, in_segment in found:
            out = self._client_message(msg, replace(handle, broker=here), attempt, invisible_ms, lid)
            if in_segment and segment.logic_start is not None:
                out.system_properties.queue_offset = segment.logic_start + (msg.queue_offset - segment.phys_start)
            outcome.append(out)
        for answer in self._answers(outcome):
            yield answer

    async def _until_new(self, group: str, topic: str) -> None:
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

    def _receive_order(self, topic: str, queue_id: int, every_queue: bool) -> list[int]:
        """The queues a receive pops from. RocketMQ's proxy pops every queue of the broker (queue id
        -1) whatever the request names; for an official client (``every_queue``: it names its
        language) that is the queue named first, then, while the batch is not full, the topic's other
        readable queues after it, so a client that asks each queue in turn (Python) still finds its
        own first and one that only asks queue 0 (the Node.js SimpleConsumer) reads the whole topic.
        A request that names no language (a tool reading one queue, as bench/ and chaos/ do) pops
        the queue named."""
        config = self.topics.topics.get(topic)
        readable = config.readQueueNums if config is not None else 0
        if not every_queue or not 0 <= queue_id < readable:
            return [queue_id]
        return [(queue_id + i) % readable for i in range(readable)]

    def orderly(self, topic: str) -> bool:
        """A group's receives from a FIFO topic are orderly (brokers/fifo.py: no per-group config)."""
        config = self.topics.topics.get(topic)
        return config is not None and is_orderly(config.message_type)

    def fifo_topics(self) -> frozenset[str]:
        """The topics whose receives are orderly: a consumer subscribed to one is told ``fifo`` (settings.py)."""
        return frozenset(name for name, config in self.topics.topics.items() if is_orderly(config.message_type))

    def _queue_lock(self, key: tuple[str, str, int]) -> contextlib.AbstractAsyncContextManager:
        """What an ack or a ChangeInvisibleDuration holds: an orderly queue's pop lock (RocketMQ's
        ackOrderly waits for the QueueLockManager's lock), so that a pop never decides on a state an
        ack changes under it; nothing for other queues (their pops hand out nothing an ack changes)."""
        if key in self.pop.queues and self.orderly(key[1]):
            return self._locks[key]
        return contextlib.nullcontext()

    async def _pop_from(self, group, topic, queue_id, count, invisible_ms, matches):
        async with self._locks[(group, topic, queue_id)]:
            if not self.serving:
                return []
            await self._correct_overflow(group, topic, queue_id)
            state = self.pop.peek(group, topic, queue_id)
            chosen, attempts, skipped = await self._read_again(topic, queue_id, sorted(state.redeliver.items())[:count])
            if len(chosen) < count:  # revived in place above (acting master); new messages below
                await self._read_new(topic, queue_id, state.pop_offset, count - len(chosen), matches, chosen, attempts, skipped)
            return await self._hand_out(group, topic, queue_id, chosen, attempts, skipped, invisible_ms)

    async def _pop_orderly(self, group, topic, queue_id, count, invisible_ms, matches):
        """An orderly pop (brokers/fifo.py ``plan_orderly_pop``): nothing while a delivery of the
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
            return await self._hand_out(group, topic, queue_id, chosen, attempts, skipped, invisible_ms, quorum)

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

    async def _hand_out(self, group, topic, queue_id, chosen, attempts, skipped, invisible_ms, quorum=0):
        """Put ``chosen`` in flight and ``skipped`` done, record it (on ``quorum`` replicas at least),
        and pair each message with its handle."""
        if not chosen and not skipped:
            return []
        handles = self.pop.pop(group, topic, queue_id, [m.queue_offset for m in chosen], attempts, invisible_ms)
        self.pop.finish(group, topic, queue_id, skipped)
        flights = self.pop.queue(group, topic, queue_id).in_flight
        entries = [[h.offset, flights[h.offset].deadline_ms, flights[h.offset].attempt, h.nonce] for h in handles]
        await self._record("pop", quorum, group=group, topic=topic, queueId=queue_id, entries=entries, skipped=skipped)
        return list(zip(chosen, handles, attempts, strict=True))

    async def correct_overflows(self) -> None:
        """At a takeover: every offset beyond its queue's end is corrected before the queue grows
        past it (else the messages in between would be skipped)."""
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
        shorter log the master's) starts again at the end, or new messages would be skipped."""
        state = self.pop.peek(group, topic, queue_id)
        end = self.store.max_queue_offset(topic, queue_id)
        if state.pop_offset <= end:
            return
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

    async def reset_queue(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        """An operator's reset (the serving master): the group consumes the queue from ``offset`` on.
        Taken under the queue's lock, so a pop in progress ends first and the next one starts there;
        what was in flight is forgotten (its receipt handles are refused as expired, nothing of it is
        revived: a message below ``offset`` is skipped, one at or above it is delivered again). NotStored
        when its record was not stored."""
        await self._ensure_group(group)  # a replica refuses a record for a group it never heard of
        async with self._locks[(group, topic, queue_id)]:
            await self._reset_held(group, topic, queue_id, offset, source)

    async def _reset_held(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        """Start the queue again at ``offset`` and record it; the caller holds the queue's lock. The
        state changes before its record is queued, with no await in between, as every other change
        here: the records reach the log in the order the changes were made (an ack of this queue may
        run meanwhile, brokers/pop.py), so every replica replays what this one did."""
        self.pop.queue(group, topic, queue_id).reset(offset)
        await self._record("reset", group=group, topic=topic, queueId=queue_id, offset=offset)
        self._committed(group, topic, queue_id, offset, source)

    def _client_message(self, m: Message, handle: ReceiptHandle, attempt: int, invisible_ms: int, queue_id: int) -> pb.Message:
        out = client_message(m, m.properties.get("ORIGIN_TOPIC", m.topic), queue_id, SYSTEM_KEYS)
        sp = out.system_properties
        sp.store_host = self.config.broker_addr
        sp.receipt_handle = handle.encode()
        sp.invisible_duration.CopyFrom(Duration(seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 10**6))
        sp.delivery_attempt = attempt
        return out

    # --- ack / invisible time ---------------------------------------------------------------------

    async def AckMessage(self, request: spb.AckMessageRequest, context) -> spb.AckMessageResponse:
        """Acks are answered OK only once their record is stored (on every in-sync replica)."""
        if not self.serving and (answer := await self._forward("AckMessage", request, context, spb.AckMessageResponse)):
            return answer
        invalid = _status(pb.Code.INVALID_RECEIPT_HANDLE)
        codes: list[pb.Status] = [invalid] * len(request.entries)
        by_queue: dict[tuple[str, str, int], list[tuple[int, ReceiptHandle]]] = defaultdict(list)
        elsewhere: dict[int, str] = {}  # static topics: entries another broker set handed out (logical.py)
        for i, e in enumerate(request.entries):
            handle = ReceiptHandle.decode(e.receipt_handle)
            if (broker := self.foreign(handle)) is not None:
                elsewhere[i] = broker
            elif handle is not None and handle.group == request.group.name:
                by_queue[(handle.group, handle.topic, handle.queue_id)].append((i, handle))
        answers = await asyncio.gather(*(self._ack_queue(key, [h for _, h in acks]) for key, acks in by_queue.items()))
        for acks, statuses in zip(by_queue.values(), answers, strict=True):
            for (i, _), status in zip(acks, statuses, strict=True):
                codes[i] = status
        if elsewhere:
            for i, status in (await self.ack_elsewhere(request, context, by_broker(elsewhere))).items():
                codes[i] = status
        entries = [
            spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=code)
            for e, code in zip(request.entries, codes, strict=True)
        ]
        bad = next((c for c in codes if c.code != pb.Code.OK), None)
        if bad is not None and bad.code == pb.Code.INVALID_RECEIPT_HANDLE:
            bad = _status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle")
        return spb.AckMessageResponse(status=bad or _status(pb.Code.OK), entries=entries)

    async def _ack_queue(self, key: tuple[str, str, int], handles: list[ReceiptHandle]) -> list[pb.Status]:
        """The acks of one queue, each OK once their record is stored (else the status they all get)."""
        async with self._queue_lock(key):
            acked = [self.pop.ack(h) for h in handles]
            stored = _status(pb.Code.OK)
            if any(acked):
                group, topic, queue_id = key
                offsets = [h.offset for h, ok in zip(handles, acked, strict=True) if ok]
                try:
                    await self._record("finish", group=group, topic=topic, queueId=queue_id, offsets=offsets)
                except NotStored as exc:
                    stored = _status(send_code(exc.status), f"ack not recorded: {exc.detail or exc.status}")
        return [stored if ok else _status(pb.Code.INVALID_RECEIPT_HANDLE) for ok in acked]

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest, context):
        if not self.serving and (
            answer := await self._forward("ChangeInvisibleDuration", request, context, spb.ChangeInvisibleDurationResponse)
        ):
            if not answer.receipt_handle:  # the clients keep the handle of any answer, even an error's
                answer.receipt_handle = request.receipt_handle
            return answer
        handle = ReceiptHandle.decode(request.receipt_handle)
        if handle is None:
            return self._invalid_handle(request)
        if (broker := self.foreign(handle)) is not None:
            return await self.invisible_elsewhere(broker, request, context)
        async with self._queue_lock((handle.group, handle.topic, handle.queue_id)):
            new = self.pop.change_invisible(handle, _ms(request.invisible_duration))
            if new is None:
                return self._invalid_handle(request)
            flight = self.pop.queue(new.group, new.topic, new.queue_id).in_flight[new.offset]
            try:
                await self._record(
                    "invisible",
                    group=new.group,
                    topic=new.topic,
                    queueId=new.queue_id,
                    offset=new.offset,
                    deadlineMs=flight.deadline_ms,
                    nonce=new.nonce,
                )
            except NotStored as exc:
                return spb.ChangeInvisibleDurationResponse(
                    status=_status(send_code(exc.status), f"not recorded: {exc.detail or exc.status}"),
                    receipt_handle=request.receipt_handle,
                )
        return spb.ChangeInvisibleDurationResponse(status=_status(pb.Code.OK), receipt_handle=new.encode())

    @staticmethod
    def _invalid_handle(request: spb.ChangeInvisibleDurationRequest) -> spb.ChangeInvisibleDurationResponse:
        return spb.ChangeInvisibleDurationResponse(
            status=_status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle"),
            receipt_handle=request.receipt_handle,
        )

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context) -> spb.QueryOffsetResponse:
        """Min / max offset and search by time (reference §5.5: reads an acting master serves too)."""
        if not self.serving and (answer := await self._forward("QueryOffset", request, context, spb.QueryOffsetResponse)):
            return answer
        topic, queue_id = request.message_queue.topic.name, request.message_queue.id
        if topic not in self.topics.topics:
            return spb.QueryOffsetResponse(status=_status(pb.Code.TOPIC_NOT_FOUND))
        static = self.static.get(topic)
        if static is not None:
            return await self.query_offset_logical(request, context, static)
        end = self.store.max_queue_offset(topic, queue_id)
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.END:
            return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=end)
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=await self.first_offset(topic, queue_id, end))
        wanted = request.timestamp.seconds * 1000 + request.timestamp.nanos // 10**6
        return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=await self.search_offset(topic, queue_id, wanted))

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
        msgs = await self.store.get_messages(topic, queue_id, 0, 1)  # holes (size 0) are skipped
        return msgs[0].queue_offset if msgs else end

    # --- revive and offsets -----------------------------------------------------------------------

    async def revive_forever(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL_S)
            try:
                await self.revive_once()
                self._persist_offsets()
            except Exception:
                log.exception("revive failed; will retry")

    async def revive_once(self) -> int:
        """Put every message whose invisible time passed into its retry topic (or the DLQ), then let
        it go from the queue: the put comes first, so a crash in between redelivers, never loses.
        Runs where special services run (reference §5.1): the master; an acting master, which cannot
        write, delivers the message again from its own queue instead. Orderly queues (FIFO topics)
        have no retry topic: their next pop hands the message out again in place (brokers/fifo.py)."""
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
                dead = attempt >= self.config.retryMaxTimes
                revived += await self._move_out(group, topic, queue_id, msgs[0], attempt, dead=dead)
        return revived

    async def _move_out(self, group: str, topic: str, queue_id: int, m: Message, attempt: int, dead: bool) -> bool:
        """Put ``m``, delivered ``attempt`` times, into the group's DLQ (``dead``) or its retry topic,
        then let it go from the queue: the put comes first, so a crash in between redelivers, never
        loses. The caller holds the queue's lock. False if the put failed (it stays where it is)."""
        offset = m.queue_offset
        origin = m.properties.get("ORIGIN_TOPIC", topic)
        props = {**m.properties, "RECONSUME_TIME": str(attempt), "ORIGIN_TOPIC": origin}
        target = dlq_topic(group) if dead else retry_topic(group, origin)
        self._ensure_topic(target)
        result = await self.store.put_message(Message(target, 0, m.body, props, born_timestamp=m.born_timestamp))
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("moving %s/%d@%d into %s failed: %s", topic, queue_id, offset, target, result.status)
            return False
        self.pop.queue(group, topic, queue_id).finish(offset)
        try:
            await self._record("finish", group=group, topic=topic, queueId=queue_id, offsets=[offset])
        except NotStored as exc:
            log.warning("revive of %s/%d@%d not recorded (%s); a new master revives it again", topic, queue_id, offset, exc)
        return True

    def _ensure_topic(self, name: str) -> None:
        """A retry or DLQ topic exists in the topic configs (one queue, readable and writable, as
        RocketMQ creates them on first use) and so in the routes: operators can read a DLQ. (Its
        record reaches the slaves through the topic configs' change hook, brokers/broker.py.)"""
        if name not in self.topics.topics:
            self.topics.update(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))
            if self.on_topics_changed is not None:
                self.on_topics_changed()

    def _committed(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        """A committed offset changed; reported as clients see it (a static topic's logical queue and
        offset; not reported while its segment's start is undecided)."""
        self.offsets.commit(group, topic, queue_id, offset, bump=self.metalog.mode is MetaMode.WRITER)
        if self.on_offset_committed is None:
            return
        if self.static.get(topic) is not None:
            logical = self.static.logical(topic, queue_id, offset)
            if logical is None:
                return
            queue_id, offset = logical
        self.on_offset_committed(group, topic, queue_id, offset, source)

    def _persist_offsets(self) -> None:
        """The offset table follows the pop state; a slave's changes are its master's (slave_sync)."""
        source = "slave_sync" if self.metalog.mode is MetaMode.FOLLOWER else "client_commit"
        for (group, topic, queue_id), offset in self.pop.committed().items():
            if self.offsets.get(group, topic, queue_id) != offset:
                self._committed(group, topic, queue_id, offset, source)
        self.meta.persist()
