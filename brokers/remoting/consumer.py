"""Consuming for remoting clients: PULL_MESSAGE (11) with long polling, the consumer offsets
(QUERY_CONSUMER_OFFSET 14, UPDATE_CONSUMER_OFFSET 15, and the offset a pull carries), the queue
queries (SEARCH_OFFSET_BY_TIMESTAMP 29, GET_MAX_OFFSET 30, GET_MIN_OFFSET 31,
GET_EARLIEST_MSG_STORETIME 32), VIEW_MESSAGE_BY_ID (33: the offset message id's commit-log offset) and
CONSUMER_SEND_MSG_BACK (36: a message the consumer failed goes to ``%RETRY%<group>`` after its delay
level, or to ``%DLQ%<group>``).

A pull reads the consume queue and answers the records as stored (the commit-log format is RocketMQ's:
brokers/store/message.py), filtered by the subscription's tags (the consume queue's tags hash, as
Java's broker filters; the client filters again by the tag itself). The offsets a remoting group
commits are the consumer offsets of brokers/consuming.py (``commit_offset``): the same table the gRPC
clients' acks move, the dashboard's consumer progress, the offset reset and the Spark audit read, and
the same records that carry them to the slaves and back from an acting master at pre-online (RIP-32).

Where the pull's status comes from (Java's ``DefaultMessageStore.getMessage`` and
``PullMessageProcessor``), with ``min``/``max`` the queue's offsets:

- an empty queue (``max`` 0): PULL_NOT_FOUND at 0, or PULL_OFFSET_MOVED to 0 for any other offset;
- below ``min``: PULL_OFFSET_MOVED to ``min``; at ``max``: PULL_NOT_FOUND (held for long polling);
- beyond ``max``: PULL_OFFSET_MOVED to ``max`` (Java moves such a consumer to 0 when ``min`` is 0; this
  store keeps every message, so that would deliver the whole queue again: ``max`` is where a consumer
  ahead of a shorter log, after an unclean election, must go on, as brokers/consuming.py's
  OFFSET_OVERFLOW correction does for pops);
- messages read, none matching the subscription: PULL_RETRY_IMMEDIATELY past them; some: SUCCESS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand
from mqrules.remoting.headers import (
    CONSUMER_SEND_MSG_BACK_REQUEST,
    GET_EARLIEST_MSG_STORETIME_REQUEST,
    GET_MAX_OFFSET_REQUEST,
    GET_MIN_OFFSET_REQUEST,
    PULL_MESSAGE_REQUEST,
    PULL_MESSAGE_RESPONSE,
    QUERY_CONSUMER_OFFSET_REQUEST,
    SEARCH_OFFSET_REQUEST,
    UPDATE_CONSUMER_OFFSET_REQUEST,
    VIEW_MESSAGE_REQUEST,
    encode_header,
    parse_header,
)

from ..consuming import ConsumeService, NotStored
from ..core.admission import MessageType, Outgoing, Verdict
from ..core.delay_levels import DELAY
from ..core.pop import dlq_topic, tag_matcher
from ..core.views import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, DLQ_REASON, MAX_RECONSUME_EXCEEDED
from ..sending import SendService
from ..store.consumequeue import tags_code
from ..store.message import Message, decode
from ..store.results import PutMessageStatus
from ..store.store import MessageStore
from ..tasks import cancel_and_wait
from ..topics import PERM_READ, TopicConfigManager
from .clients import ClientRegistry
from .server import Connection

log = logging.getLogger("brokers.remoting")

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4  # PullSysFlag
MAX_PULL_COUNT = 32  # maxTransferCountOnMessageInMemory
MAX_PULL_BYTES = 256 * 1024  # maxTransferBytesOnMessageInMemory
MAX_SUSPEND_S = 30.0
MASTER_ID = 0
RETRY_PREFIX = "%RETRY%"
RETRY_TOPIC = "RETRY_TOPIC"  # MessageConst.PROPERTY_RETRY_TOPIC: the topic a retried message came from
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
FIRST_RETRY_LEVEL = 3  # a send-back with delay level 0: level 3 + times consumed (Java's broker)
PULL_COMMIT_EVERY_S = 0.2  # a queue's pull-carried commits are written at most this often (the latest one)


def tag_codes(expression: str) -> frozenset[int] | None:
    """The tags hashes a TAG expression matches; None: every message."""
    text = (expression or "*").strip()
    if text in ("", "*"):
        return None
    return frozenset(tags_code(t.strip()) for t in text.split("||") if t.strip())


class ConsumerHandler:
    """``serving()``: this broker writes or acts for the set (its commits count); ``writer()``: it is
    the set's master (it can store a send-back)."""

    def __init__(
        self,
        consuming: ConsumeService,
        sending: SendService,
        store: MessageStore,
        topics: TopicConfigManager,
        clients: ClientRegistry,
        *,
        serving: Callable[[], bool],
        writer: Callable[[], bool],
    ):
        self.consuming, self.sending, self.store, self.topics, self.clients = consuming, sending, store, topics, clients
        self.serving, self.writer = serving, writer
        self._pending: dict[tuple[str, str, int], int] = {}  # a pull's commit not written yet, per queue
        self._committing: set[tuple[str, str, int]] = set()  # queues whose commit is being written
        self._tasks: set[asyncio.Task] = set()

    def handlers(self) -> dict[int, Callable]:
        return {
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
        }

    def _queue_problem(self, request: RemotingCommand, topic: str, queue_id: int, read: bool) -> RemotingCommand | None:
        config = self.topics.topics.get(topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if read and not config.perm & PERM_READ:
            return request.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue_id < max(config.readQueueNums, config.writeQueueNums):
            return request.response(ResponseCode.SYSTEM_ERROR, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
        return None

    # --- pull -------------------------------------------------------------------------------------

    async def pull(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(PULL_MESSAGE_REQUEST, request.ext_fields)
        group, topic = str(h["consumerGroup"]), str(h["topic"])
        queue_id, offset = int(h["queueId"]), int(h["queueOffset"])  # type: ignore[arg-type]
        flags = int(h["sysFlag"])  # type: ignore[arg-type]
        if (problem := self._queue_problem(request, topic, queue_id, read=True)) is not None:
            return problem
        self.clients.pulled(connection, group, topic, queue_id)
        if flags & FLAG_SUBSCRIPTION:
            expression, kind = str(h["subscription"] or "*"), str(h["expressionType"] or "TAG")
        else:
            known = self.clients.subscription(group, topic)
            expression, kind = (known.expression, known.expression_type) if known is not None else ("*", "TAG")
        if tag_matcher(expression, kind.upper() == "SQL92") is None:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "SQL92 filtering is not served by this broker")
        codes = tag_codes(expression)
        if flags & FLAG_COMMIT_OFFSET and int(h["commitOffset"]) >= 0 and self.serving():  # type: ignore[arg-type]
            self.commit_later((group, topic, queue_id), int(h["commitOffset"]))  # type: ignore[arg-type]
        if offset < self.store.min_queue_offset(topic, queue_id) and self.serving():  # retention deleted them
            await self.consuming.skip_deleted(group, topic, queue_id)
        count = max(1, min(int(h["maxMsgNums"]), MAX_PULL_COUNT))  # type: ignore[arg-type]
        suspend_s = min(max(int(h["suspendTimeoutMillis"]), 0) / 1000, MAX_SUSPEND_S) if flags & FLAG_SUSPEND else 0.0  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + suspend_s
        while True:
            code, next_offset, body, taken = await self._read(topic, queue_id, offset, count, codes)
            if code != ResponseCode.PULL_NOT_FOUND or (left := deadline - loop.time()) <= 0:
                break
            await self._until_beyond(topic, queue_id, offset, left)
        if taken:
            self.consuming.traffic.messages_handed_out(topic, group, taken, len(body))
        header = {
            "suggestWhichBrokerId": MASTER_ID,
            "nextBeginOffset": next_offset,
            "minOffset": self.store.min_queue_offset(topic, queue_id),
            "maxOffset": self.store.max_queue_offset(topic, queue_id),
        }
        return request.response(code, None, ext_fields=encode_header(header, PULL_MESSAGE_RESPONSE), body=body)

    def commit_later(self, key: tuple[str, str, int], offset: int) -> None:
        """The commit a pull carries, written without holding the pull up (Java keeps it in memory and
        persists it every 5 s): the latest one per queue, one write per queue at most every
        PULL_COMMIT_EVERY_S (each write is a replicated metadata record: a write per pull cost the
        master more than the pull), a newer commit that arrives meanwhile replacing the one waiting;
        an offset query answers the waiting one. The client commits on its own every 5 s too
        (UPDATE_CONSUMER_OFFSET, answered once written)."""
        self._pending[key] = offset
        if key not in self._committing:
            self._committing.add(key)
            task = asyncio.get_running_loop().create_task(self._commit_pending(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _commit_pending(self, key: tuple[str, str, int]) -> None:
        try:
            while (offset := self._pending.pop(key, None)) is not None:
                try:
                    await self.consuming.commit_offset(*key, offset)
                except NotStored as exc:
                    log.info("a pull's commit of %s/%s/%d at %d not stored (%s); the client commits again", *key, offset, exc)
                await asyncio.sleep(PULL_COMMIT_EVERY_S)
        finally:
            self._committing.discard(key)

    async def close(self) -> None:
        """Cancel the commits still being written (stopping; the client commits again elsewhere)."""
        await cancel_and_wait(*self._tasks)

    async def _read(
        self, topic: str, queue_id: int, offset: int, count: int, codes: frozenset[int] | None
    ) -> tuple[int, int, bytes, int]:
        """(code, next begin offset, body, messages in it) of one look at the queue."""
        end = self.store.max_queue_offset(topic, queue_id)
        if end == 0:
            return (ResponseCode.PULL_NOT_FOUND if offset == 0 else ResponseCode.PULL_OFFSET_MOVED), 0, b"", 0
        if offset < 0:
            return ResponseCode.PULL_OFFSET_MOVED, 0, b"", 0
        if offset == end:
            return ResponseCode.PULL_NOT_FOUND, offset, b"", 0
        if offset > end:
            return ResponseCode.PULL_OFFSET_MOVED, end, b"", 0
        if offset < (low := self.store.min_queue_offset(topic, queue_id)):
            return ResponseCode.PULL_OFFSET_MOVED, low, b"", 0
        entries = await self.store.read_queue(topic, queue_id, offset, count)
        if not entries:  # holes only
            return ResponseCode.PULL_RETRY_IMMEDIATELY, min(offset + count, end), b"", 0
        taken: list[bytes] = []
        size, next_offset = 0, offset
        for queue_offset, tags, raw in entries:
            if taken and size + len(raw) > MAX_PULL_BYTES:
                break
            next_offset = queue_offset + 1
            if codes is None or tags in codes:
                taken.append(raw)
                size += len(raw)
        if not taken:
            return ResponseCode.PULL_RETRY_IMMEDIATELY, next_offset, b"", 0
        return ResponseCode.SUCCESS, next_offset, b"".join(taken), len(taken)

    async def _until_beyond(self, topic: str, queue_id: int, offset: int, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        while (left := until - loop.time()) > 0 and self.store.max_queue_offset(topic, queue_id) <= offset:
            await self.store.wait_published(left)

    # --- offsets ----------------------------------------------------------------------------------

    async def query_offset(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """The group's committed offset; a group that never committed one gets 0 while the queue's min
        offset is 0, else QUERY_NOT_FOUND, and the client starts where its ConsumeFromWhere says (Java's
        ``queryConsumerOffset``: once retention deleted the queue's first messages there is no 0)."""
        h = parse_header(QUERY_CONSUMER_OFFSET_REQUEST, request.ext_fields)
        group, topic, queue_id = str(h["consumerGroup"]), str(h["topic"]), int(h["queueId"])  # type: ignore[arg-type]
        offset = self._pending.get((group, topic, queue_id))  # a pull's commit not written yet
        if offset is None:
            offset = self.consuming.committed_offset(group, topic, queue_id)
        if offset is None:
            if self.store.min_queue_offset(topic, queue_id) > 0:
                return request.response(ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first")
            offset = 0
        return request.response(ResponseCode.SUCCESS, None, ext_fields={"offset": str(offset)})

    async def update_offset(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(UPDATE_CONSUMER_OFFSET_REQUEST, request.ext_fields)
        group, topic, queue_id = str(h["consumerGroup"]), str(h["topic"]), int(h["queueId"])  # type: ignore[arg-type]
        offset = int(h["commitOffset"])  # type: ignore[arg-type]
        if (problem := self._queue_problem(request, topic, queue_id, read=False)) is not None:
            return problem
        if offset < 0:  # a queue the client never consumed (ali-ons commits -1 for it): nothing to keep
            return request.response(ResponseCode.SUCCESS)
        if not self.serving():  # the master's (or the acting slave's) records carry the offsets
            return request.response(ResponseCode.SYSTEM_ERROR, "this broker is a slave: commit offsets to the master")
        try:
            await self.consuming.commit_offset(group, topic, queue_id, offset)
        except NotStored as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"offset not stored: {exc}")
        return request.response(ResponseCode.SUCCESS)

    async def search_offset(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(SEARCH_OFFSET_REQUEST, request.ext_fields)
        topic, queue_id = str(h["topic"]), int(h["queueId"])  # type: ignore[arg-type]
        if (problem := self._queue_problem(request, topic, queue_id, read=False)) is not None:
            return problem
        offset = await self.consuming.search_offset(topic, queue_id, int(h["timestamp"]))  # type: ignore[arg-type]
        return request.response(ResponseCode.SUCCESS, None, ext_fields={"offset": str(offset)})

    async def max_offset(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(GET_MAX_OFFSET_REQUEST, request.ext_fields)
        topic, queue_id = str(h["topic"]), int(h["queueId"])  # type: ignore[arg-type]
        if (problem := self._queue_problem(request, topic, queue_id, read=False)) is not None:
            return problem
        return request.response(
            ResponseCode.SUCCESS, None, ext_fields={"offset": str(self.store.max_queue_offset(topic, queue_id))}
        )

    async def min_offset(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(GET_MIN_OFFSET_REQUEST, request.ext_fields)
        topic, queue_id = str(h["topic"]), int(h["queueId"])  # type: ignore[arg-type]
        if (problem := self._queue_problem(request, topic, queue_id, read=False)) is not None:
            return problem
        end = self.store.max_queue_offset(topic, queue_id)
        first = await self.consuming.first_offset(topic, queue_id, end)
        return request.response(ResponseCode.SUCCESS, None, ext_fields={"offset": str(first)})

    async def earliest_time(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(GET_EARLIEST_MSG_STORETIME_REQUEST, request.ext_fields)
        topic, queue_id = str(h["topic"]), int(h["queueId"])  # type: ignore[arg-type]
        if (problem := self._queue_problem(request, topic, queue_id, read=False)) is not None:
            return problem
        msgs = await self.store.get_messages(topic, queue_id, 0, 1)
        stamp = msgs[0].store_timestamp if msgs else -1
        return request.response(ResponseCode.SUCCESS, None, ext_fields={"timestamp": str(stamp)})

    async def view_message(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(VIEW_MESSAGE_REQUEST, request.ext_fields)
        offset = int(h["offset"])  # type: ignore[arg-type]
        raw = await self.store.read_record(offset)
        if raw is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return request.response(ResponseCode.SUCCESS, body=raw)

    # --- send back ----------------------------------------------------------------------------------

    async def send_back(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """The consumer failed the message at commit-log ``offset``: it goes to the group's retry topic
        after its delay level (level 0: 3 + the times it was consumed; Java's rule), or to the group's
        DLQ once consumed ``maxReconsumeTimes`` times (16 when the client does not say), or at a
        negative level."""
        h = parse_header(CONSUMER_SEND_MSG_BACK_REQUEST, request.ext_fields)
        group, offset, level = str(h["group"]), int(h["offset"]), int(h["delayLevel"])  # type: ignore[arg-type]
        raw = await self.store.read_record(offset)
        found = decode(raw) if raw is not None else None
        if not isinstance(found, Message):
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        if not self.writer():
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, "this broker is not the master: it takes no send-back")
        times = found.reconsume_times
        limit = h["maxReconsumeTimes"] if isinstance(h["maxReconsumeTimes"], int) else self.consuming.config.retryMaxTimes
        props = dict(found.properties)
        props.setdefault(RETRY_TOPIC, found.topic)
        props.setdefault(ORIGIN_MESSAGE_ID, str(h["originMsgId"] or props.get("UNIQ_KEY", "")))
        props.pop(DELAY, None)
        if times >= limit or level < 0:
            target, kind = dlq_topic(group), MessageType.NORMAL
            props[DLQ_ORIGIN_TOPIC], props[DLQ_ORIGIN_MESSAGE_ID] = props[RETRY_TOPIC], props[ORIGIN_MESSAGE_ID]
            props[DLQ_REASON] = MAX_RECONSUME_EXCEEDED if times >= limit else "sent to the DLQ by the consumer"
        else:
            target, kind = RETRY_PREFIX + group, MessageType.DELAY
            props[DELAY] = str(level if level > 0 else FIRST_RETRY_LEVEL + times)
        self.consuming.ensure_topic(target)
        out = Outgoing(target, found.body, kind, "", None, props, found.born_timestamp, 0, found.flag, times + 1, found.sys_flag)
        admission = self.sending.admit([out], may_forward=False)
        if admission.verdict is not Verdict.STORE:
            detail = admission.status.message if admission.status is not None else admission.verdict.value
            return request.response(ResponseCode.SYSTEM_ERROR, f"send back refused: {detail}")
        result = (await self.sending.append(admission, [out]))[0]
        if result.status is not PutMessageStatus.PUT_OK:
            return request.response(ResponseCode.SYSTEM_ERROR, f"send back not stored: {result.detail or result.status}")
        return request.response(ResponseCode.SUCCESS)
