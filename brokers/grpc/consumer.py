"""The consumer half of ``MessagingService``: ReceiveMessage (pop), AckMessage,
ChangeInvisibleDuration, and the revive loop (brokers/pop.py has the rules)."""

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

from ..pop import PopState, ReceiptHandle, dlq_topic, retry_topic
from ..store.message import Message
from ..store.offsets import ConsumerOffsets
from ..store.store import MessageStore, PutMessageStatus
from ..topics import PERM_READ, PERM_WRITE, TopicConfig

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


class ConsumerSide:
    """Mixed into MessagingService; needs ``self.store``, ``self.config``."""

    store: MessageStore

    on_topics_changed: Callable[[], None] | None = None  # the broker re-registers with the nameserver
    # Sees every committed offset change (group, topic, queueId, offset): the audit report.
    on_offset_committed: Callable[[str, str, int, int], None] | None = None

    def init_consumer(self, offsets: ConsumerOffsets) -> None:
        self.offsets = offsets
        committed = {}
        for key, value in offsets.offsets.items():
            group, topic, qid = key.rsplit("@", 2)
            committed[(group, topic, int(qid))] = value
        self.pop = PopState(committed)
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = defaultdict(asyncio.Lock)

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
        batch = max(1, min(request.batch_size or 32, 1024))
        invisible_ms = _ms(request.invisible_duration) or 30_000
        # Answer before the client's own deadline (request timeout + await duration): keep a margin.
        deadline = asyncio.get_running_loop().time() + max(0.0, _ms(request.long_polling_timeout) / 1000 - 0.5)
        while True:
            found = await self._pop_from(group, retry_topic(group, topic), 0, batch, invisible_ms, matches)
            if len(found) < batch:
                found += await self._pop_from(group, topic, queue_id, batch - len(found), invisible_ms, matches)
            if found or asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(POLL_STEP_S)
        if not found:
            yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield spb.ReceiveMessageResponse(status=_status(pb.Code.OK))
        for msg, handle, attempt in found:
            yield spb.ReceiveMessageResponse(message=self._client_message(msg, handle, attempt, invisible_ms, queue_id))

    async def _pop_from(self, group, topic, queue_id, count, invisible_ms, matches):
        async with self._locks[(group, topic, queue_id)]:
            state = self.pop.queue(group, topic, queue_id)
            msgs = await self.store.get_messages(topic, queue_id, state.pop_offset, count * 4)
            chosen = []
            for m in msgs:
                if len(chosen) == count:
                    break
                if not matches(m.properties.get("TAGS")):
                    self.pop.skip(group, topic, queue_id, m.queue_offset)
                    continue
                chosen.append(m)
            attempts = [int(m.properties.get("RECONSUME_TIME", "0")) + 1 for m in chosen]
            handles = self.pop.pop(group, topic, queue_id, [m.queue_offset for m in chosen], attempts, invisible_ms)
            return list(zip(chosen, handles, attempts, strict=True))

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
        entries, all_ok = [], True
        for e in request.entries:
            handle = ReceiptHandle.decode(e.receipt_handle)
            ok = handle is not None and handle.group == request.group.name and self.pop.ack(handle)
            all_ok &= ok
            code = pb.Code.OK if ok else pb.Code.INVALID_RECEIPT_HANDLE
            entries.append(
                spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=_status(code))
            )
        top = _status(pb.Code.OK) if all_ok else _status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle")
        return spb.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest, context):
        handle = ReceiptHandle.decode(request.receipt_handle)
        new = self.pop.change_invisible(handle, _ms(request.invisible_duration)) if handle else None
        if new is None:
            return spb.ChangeInvisibleDurationResponse(
                status=_status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle"),
                receipt_handle=request.receipt_handle,
            )
        return spb.ChangeInvisibleDurationResponse(status=_status(pb.Code.OK), receipt_handle=new.encode())

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
        it go from the queue: the put comes first, so a crash in between redelivers, never loses."""
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
                revived += 1
        return revived

    def _ensure_topic(self, name: str) -> None:
        """A retry or DLQ topic exists in the topic configs (one queue, readable and writable, as
        RocketMQ creates them on first use) and so in the routes: operators can read a DLQ."""
        if name not in self.topics.topics:
            self.topics.update(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))
            if self.on_topics_changed is not None:
                self.on_topics_changed()

    def _persist_offsets(self) -> None:
        for (group, topic, queue_id), offset in self.pop.committed().items():
            if self.offsets.get(group, topic, queue_id) != offset:
                self.offsets.commit(group, topic, queue_id, offset)
                if self.on_offset_committed is not None:
                    self.on_offset_committed(group, topic, queue_id, offset)
        self.offsets.persist()
