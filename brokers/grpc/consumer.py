"""The consumer half of ``MessagingService``: ReceiveMessage (pop), AckMessage,
ChangeInvisibleDuration, QueryOffset, and the revive loop (brokers/pop.py has the rules).

Who serves (brokers/metalog.py): the master, which writes a record of every change to its log
before it answers, so an answered ack is on every in-sync replica; a slave acting as master while
none is alive, from the state it followed. A plain slave forwards the call to whichever of the two
its group has (forward.py)."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from isal.isal_zlib import crc32
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..meta import ConsumerMeta
from ..metalog import MetaLog, MetaMode
from ..pop import PopState, ReceiptHandle, dlq_topic, retry_topic
from ..store.message import Message
from ..store.store import MessageStore, PutMessageStatus
from ..topics import PERM_READ, PERM_WRITE, TopicConfig
from .clients import client_language
from .codes import send_code
from .forward import Forwarder, NoServingBroker, ServeHere

log = logging.getLogger("brokers.grpc")

SYSTEM_KEYS = frozenset({"UNIQ_KEY", "TAGS", "KEYS", "BORN_HOST", "RECONSUME_TIME", "ORIGIN_TOPIC", "ORIGIN_QUEUE_ID"})
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


class ConsumerSide:
    """Mixed into MessagingService; needs ``self.store``, ``self.config``."""

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

    async def _record(self, kind: str, **fields: object) -> None:
        """A change made: the master stores its record (NotStored if it could not), an acting
        master moves its DataVersion."""
        if self.metalog.mode is MetaMode.WRITER:
            result = await self.metalog.write(self.meta.record(kind, **fields))
            if result.status is not PutMessageStatus.PUT_OK:
                raise NotStored(result.status, result.detail)
        else:
            self.meta.bump()

    async def _ensure_group(self, group: str) -> None:
        """Subscription groups are created on first use (autoCreateSubscriptionGroup)."""
        if group not in self.meta.groups:
            self.meta.groups.add(group)
            await self._record("group", group=group)

    async def _forward(self, method: str, request, context, empty):
        """A slave hands a consumer call to its group's serving broker (forward.py); nobody there
        in time: INTERNAL_SERVER_ERROR, which the clients retry (``empty``: the response type).
        None when this broker was elected meanwhile: the caller serves it."""
        try:
            return await self.forwarder.unary(method, request, context, lambda: not self.serving)
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
        try:
            await self._ensure_group(group)
            while True:
                popped = await self._pop_from(group, retry_topic(group, topic), 0, batch, invisible_ms, matches)
                found = [(msg, handle, attempt, queue_id) for msg, handle, attempt in popped]
                for qid in self._receive_order(topic, queue_id, bool(client_language(context))):
                    if len(found) >= batch:
                        break
                    popped = await self._pop_from(group, topic, qid, batch - len(found), invisible_ms, matches)
                    found += [(msg, handle, attempt, qid) for msg, handle, attempt in popped]
                if found or asyncio.get_running_loop().time() >= deadline or not self.serving:
                    break
                await asyncio.sleep(POLL_STEP_S)
        except NotStored as exc:
            yield spb.ReceiveMessageResponse(
                status=_status(send_code(exc.status), f"pop not recorded: {exc.detail or exc.status}")
            )
            return
        if not found:
            yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield spb.ReceiveMessageResponse(status=_status(pb.Code.OK))
        for msg, handle, attempt, qid in found:
            yield spb.ReceiveMessageResponse(message=self._client_message(msg, handle, attempt, invisible_ms, qid))

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

    async def _pop_from(self, group, topic, queue_id, count, invisible_ms, matches):
        async with self._locks[(group, topic, queue_id)]:
            if not self.serving:
                return []
            await self._correct_overflow(group, topic, queue_id)
            state = self.pop.peek(group, topic, queue_id)
            chosen, attempts, skipped = [], [], []
            for offset, attempt in sorted(state.redeliver.items())[:count]:  # revived in place (acting master)
                msgs = await self.store.get_messages(topic, queue_id, offset, 1)
                if msgs and msgs[0].queue_offset == offset:
                    chosen.append(msgs[0])
                    attempts.append(attempt)
                else:
                    skipped.append(offset)  # gone from the store: nothing to deliver
            if len(chosen) < count:
                msgs = await self.store.get_messages(topic, queue_id, state.pop_offset, (count - len(chosen)) * 4)
                for m in msgs:
                    if len(chosen) == count:
                        break
                    if not matches(m.properties.get("TAGS")):
                        skipped.append(m.queue_offset)
                        continue
                    chosen.append(m)
                    attempts.append(int(m.properties.get("RECONSUME_TIME", "0")) + 1)
            if not chosen and not skipped:
                return []
            handles = self.pop.pop(group, topic, queue_id, [m.queue_offset for m in chosen], attempts, invisible_ms)
            self.pop.finish(group, topic, queue_id, skipped)
            flights = self.pop.queue(group, topic, queue_id).in_flight
            entries = [[h.offset, flights[h.offset].deadline_ms, flights[h.offset].attempt, h.nonce] for h in handles]
            await self._record("pop", group=group, topic=topic, queueId=queue_id, entries=entries, skipped=skipped)
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
        state = self.pop.queue(group, topic, queue_id)
        log.warning(
            "consumer offset of group %s on %s/%d (%d) is beyond the queue's end (%d): corrected to %d (OFFSET_OVERFLOW)",
            group,
            topic,
            queue_id,
            state.pop_offset,
            end,
            end,
        )
        state.reset(end)
        await self._record("reset", group=group, topic=topic, queueId=queue_id, offset=end)
        self._committed(group, topic, queue_id, end, "offset_corrected")

    def _client_message(self, m: Message, handle: ReceiptHandle, attempt: int, invisible_ms: int, queue_id: int) -> pb.Message:
        props = m.properties
        born, stored = Timestamp(), Timestamp()
        born.FromMilliseconds(m.born_timestamp)
        stored.FromMilliseconds(m.store_timestamp)
        sp = pb.SystemProperties(
            keys=[k for k in props.get("KEYS", "").split(" ") if k],
            message_id=props.get("UNIQ_KEY", ""),
            body_digest=pb.Digest(type=pb.DigestType.CRC32, checksum=f"{crc32(m.body) & 0xFFFFFFFF:08X}"),
            body_encoding=pb.Encoding.IDENTITY,
            message_type=pb.MessageType.NORMAL,
            born_timestamp=born,
            born_host=props.get("BORN_HOST", ""),
            store_timestamp=stored,
            store_host=self.config.broker_addr,
            receipt_handle=handle.encode(),
            queue_id=queue_id,
            queue_offset=m.queue_offset,
            invisible_duration=Duration(seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 10**6),
            delivery_attempt=attempt,
        )
        if "TAGS" in props:
            sp.tag = props["TAGS"]
        return pb.Message(
            topic=pb.Resource(name=props.get("ORIGIN_TOPIC", m.topic)),
            user_properties={k: v for k, v in props.items() if k not in SYSTEM_KEYS},
            system_properties=sp,
            body=m.body,
        )

    # --- ack / invisible time ---------------------------------------------------------------------

    async def AckMessage(self, request: spb.AckMessageRequest, context) -> spb.AckMessageResponse:
        """Acks are answered OK only once their record is stored (on every in-sync replica)."""
        if not self.serving and (answer := await self._forward("AckMessage", request, context, spb.AckMessageResponse)):
            return answer
        codes: list[pb.Status] = []
        by_queue: dict[tuple[str, str, int], list[int]] = defaultdict(list)
        waiting: list[tuple[int, tuple[str, str, int]]] = []
        for i, e in enumerate(request.entries):
            handle = ReceiptHandle.decode(e.receipt_handle)
            ok = handle is not None and handle.group == request.group.name and self.pop.ack(handle)
            codes.append(_status(pb.Code.OK) if ok else _status(pb.Code.INVALID_RECEIPT_HANDLE))
            if ok:
                key = (handle.group, handle.topic, handle.queue_id)
                by_queue[key].append(handle.offset)
                waiting.append((i, key))
        stored = dict(zip(by_queue, await asyncio.gather(*(self._finish_record(k, v) for k, v in by_queue.items())), strict=True))
        for i, key in waiting:
            if stored[key] is not None:
                codes[i] = stored[key]
        entries = [
            spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=code)
            for e, code in zip(request.entries, codes, strict=True)
        ]
        bad = next((c for c in codes if c.code != pb.Code.OK), None)
        if bad is not None and bad.code == pb.Code.INVALID_RECEIPT_HANDLE:
            bad = _status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle")
        return spb.AckMessageResponse(status=bad or _status(pb.Code.OK), entries=entries)

    async def _finish_record(self, key: tuple[str, str, int], offsets: list[int]) -> pb.Status | None:
        """None once stored; else the status every ack of that queue gets."""
        group, topic, queue_id = key
        try:
            await self._record("finish", group=group, topic=topic, queueId=queue_id, offsets=offsets)
        except NotStored as exc:
            return _status(send_code(exc.status), f"ack not recorded: {exc.detail or exc.status}")
        return None

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest, context):
        if not self.serving and (
            answer := await self._forward("ChangeInvisibleDuration", request, context, spb.ChangeInvisibleDurationResponse)
        ):
            if not answer.receipt_handle:  # the clients keep the handle of any answer, even an error's
                answer.receipt_handle = request.receipt_handle
            return answer
        handle = ReceiptHandle.decode(request.receipt_handle)
        new = self.pop.change_invisible(handle, _ms(request.invisible_duration)) if handle else None
        if new is None:
            return spb.ChangeInvisibleDurationResponse(
                status=_status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle"),
                receipt_handle=request.receipt_handle,
            )
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

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context) -> spb.QueryOffsetResponse:
        """Min / max offset and search by time (reference §5.5: reads an acting master serves too)."""
        if not self.serving and (answer := await self._forward("QueryOffset", request, context, spb.QueryOffsetResponse)):
            return answer
        topic, queue_id = request.message_queue.topic.name, request.message_queue.id
        if topic not in self.topics.topics:
            return spb.QueryOffsetResponse(status=_status(pb.Code.TOPIC_NOT_FOUND))
        end = self.store.max_queue_offset(topic, queue_id)
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.END:
            return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=end)
        first = await self._first_offset(topic, queue_id, end)
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=first)
        wanted = request.timestamp.seconds * 1000 + request.timestamp.nanos // 10**6
        lo, hi = first, end  # the first offset whose store time is >= wanted (end if none)
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
        return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=lo)

    async def _first_offset(self, topic: str, queue_id: int, end: int) -> int:
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
        write, delivers the message again from its own queue instead."""
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
            async with self._locks[(group, topic, queue_id)]:
                msgs = await self.store.get_messages(topic, queue_id, offset, 1)
                if not msgs or msgs[0].queue_offset != offset:
                    continue
                m = msgs[0]
                origin = m.properties.get("ORIGIN_TOPIC", topic)
                props = {**m.properties, "RECONSUME_TIME": str(attempt), "ORIGIN_TOPIC": origin}
                target = dlq_topic(group) if attempt >= self.config.retryMaxTimes else retry_topic(group, origin)
                self._ensure_topic(target)
                result = await self.store.put_message(Message(target, 0, m.body, props, born_timestamp=m.born_timestamp))
                if result.status is not PutMessageStatus.PUT_OK:
                    log.warning("revive of %s/%d@%d failed: %s", topic, queue_id, offset, result.status)
                    continue
                self.pop.queue(group, topic, queue_id).finish(offset)
                try:
                    await self._record("finish", group=group, topic=topic, queueId=queue_id, offsets=[offset])
                except NotStored as exc:
                    log.warning(
                        "revive of %s/%d@%d not recorded (%s); a new master revives it again", topic, queue_id, offset, exc
                    )
                revived += 1
        return revived

    def _ensure_topic(self, name: str) -> None:
        """A retry or DLQ topic exists in the topic configs (one queue, readable and writable, as
        RocketMQ creates them on first use) and so in the routes: operators can read a DLQ. (Its
        record reaches the slaves through the topic configs' change hook, brokers/broker.py.)"""
        if name not in self.topics.topics:
            self.topics.update(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))
            if self.on_topics_changed is not None:
                self.on_topics_changed()

    def _committed(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        self.offsets.commit(group, topic, queue_id, offset, bump=self.metalog.mode is MetaMode.WRITER)
        if self.on_offset_committed is not None:
            self.on_offset_committed(group, topic, queue_id, offset, source)

    def _persist_offsets(self) -> None:
        """The offset table follows the pop state; a slave's changes are its master's (slave_sync)."""
        source = "slave_sync" if self.metalog.mode is MetaMode.FOLLOWER else "client_commit"
        for (group, topic, queue_id), offset in self.pop.committed().items():
            if self.offsets.get(group, topic, queue_id) != offset:
                self._committed(group, topic, queue_id, offset, source)
        self.meta.persist()
