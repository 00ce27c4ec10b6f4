"""Finding messages on this broker for the control plane (docs/messages.md §3, issue 40): the requests
``query_message`` (by key or unique key, through the store's index: brokers/store/index.py),
``print_messages`` (a topic's messages stored in a time range), ``view_message`` (one record by its
commit-log offset, with its body), ``message_trace`` (brokers/trace.py) and ``dlq_list`` /
``dlq_resend`` (brokers/dlq.py), each answering the message view below.

Every request is the control plane's (controlplane/broker_rpc.py): malformed payloads are refused with
INVALID_PARAMETER and one message per field; a record that is not there with TOPIC_NOT_EXIST (17).
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from mqrules.codes import ResponseCode
from mqrules.remoting.message_id import encode_offset_message_id

from .control.nameserver import RequestRefused
from .core.views import UNIQ_KEY, delivery_time_of, keys_of, message_type_of, transaction_state_of
from .meta import MAX_NAME
from .store.index import IndexDisabled
from .store.message import Message, body_crc, decode
from .store.store import MessageStore
from .topics import TopicConfigManager, queue_ids

MAX_QUERY_NUM = 1000  # the control plane's cap (docs/messages.md §5)
DEFAULT_QUERY_NUM = 32  # RocketMQ's defaultQueryMaxNum
MAX_KEY_LENGTH = 255
MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_BODY_BYTES = 4096
MAX_MS = 2**63 - 1
PRINT_BATCH = 32


@dataclass(frozen=True)
class BrokerIdentity:
    """Who answers: the view's brokerName, brokerId (the one this broker registers with) and brokerAddr."""

    name: str
    broker_id: Callable[[], int]
    addr: str
    host: str
    port: int


def message_view(m: Message, broker: BrokerIdentity) -> dict:
    """The view of one stored message (RocketMQ's MessageExt, camelCase)."""
    props = dict(m.properties)
    host, port = m.store_host
    if port == 0:  # a record this broker wrote without a store host: its own
        host, port = broker.host, broker.port
    try:
        msg_id = encode_offset_message_id(host, port, m.physical_offset)
    except ValueError:  # a store host that is no IP address
        msg_id = ""
    born_host = f"{m.born_host[0]}:{m.born_host[1]}" if m.born_host[1] else props.get("BORN_HOST", "")
    return {
        "msgId": msg_id,
        "uniqKey": props.get(UNIQ_KEY),
        "topic": m.topic,
        "tags": props.get("TAGS"),
        "keys": keys_of(props),
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.physical_offset,
        "storeHost": f"{host}:{port}",
        "bornHost": born_host,
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "reconsumeTimes": m.reconsume_times,
        "bodySize": len(m.body),
        "bodyCrc": body_crc(m.body),
        "properties": props,
        "messageType": message_type_of(props),
        "deliveryTimestamp": delivery_time_of(props),
        "transactionState": transaction_state_of(m.topic, props),
        "brokerName": broker.name,
        "brokerId": broker.broker_id(),
        "brokerAddr": broker.addr,
    }


async def read_message(store: MessageStore, offset: int) -> Message | None:
    """The message whose record starts at commit-log ``offset`` (None: no record there)."""
    raw = await store.read_record(offset)
    found = decode(raw) if raw is not None else None
    return found if isinstance(found, Message) else None


# --- checks ---------------------------------------------------------------------------------------


def invalid(fields: dict[str, list[str]]) -> RequestRefused:
    detail = "; ".join(f"{key}: {' '.join(messages)}" for key, messages in fields.items())
    return RequestRefused.of(ResponseCode.INVALID_PARAMETER, detail, fields)


def check_name(payload: dict, key: str, fields: dict[str, list[str]]) -> str:
    v = payload.get(key)
    if not isinstance(v, str) or not 0 < len(v) <= MAX_NAME or "\x00" in v:
        fields[key] = [f"must be a name of 1-{MAX_NAME} characters"]
        return ""
    return v


def check_int(payload: dict, key: str, low: int, high: int, default: int | None, fields: dict[str, list[str]]) -> int:
    v = payload.get(key, default)
    if type(v) is not int or not low <= v <= high:
        fields[key] = [f"must be an integer in [{low}, {high}]"]
        return low
    return v


def check_range(payload: dict, fields: dict[str, list[str]], max_num: int = DEFAULT_QUERY_NUM) -> tuple[int, int, int]:
    """(beginMs, endMs, maxNum) of a query."""
    begin = check_int(payload, "beginMs", 0, MAX_MS, 0, fields)
    end = check_int(payload, "endMs", 0, MAX_MS, MAX_MS, fields)
    if "beginMs" not in fields and "endMs" not in fields and begin > end:
        fields["endMs"] = ["must not be before beginMs"]
    return begin, end, check_int(payload, "maxNum", 1, MAX_QUERY_NUM, max_num, fields)


class IndexedStore(Protocol):
    async def query_index_messages(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[Message]: ...


class OffsetSearch(Protocol):
    async def search_offset(self, topic: str, queue_id: int, wanted: int) -> int: ...


Handler = Callable[[dict], Awaitable[dict]]


class MessageQueries:
    """``query_message``, ``print_messages`` and ``view_message``. ``offsets()``: the consuming
    service's search by time (None until the client endpoints serve)."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        broker: BrokerIdentity,
        offsets: Callable[[], OffsetSearch | None],
    ):
        self.store, self.topics, self.broker, self.offsets = store, topics, broker, offsets

    def handlers(self) -> dict[str, Handler]:
        return {"query_message": self.query_message, "print_messages": self.print_messages, "view_message": self.view_message}

    def view(self, m: Message) -> dict:
        return message_view(m, self.broker)

    async def find(self, topic: str, key: str, begin: int, end: int, max_num: int, unique: bool) -> tuple[list[Message], bool]:
        """The messages of ``topic`` whose unique key (``unique``) or one of whose keys is ``key``, stored
        in [begin, end], newest first, at most ``max_num``; and whether more were there."""
        index: IndexedStore = self.store  # type: ignore[assignment]
        hits = await index.query_index_messages(topic, key, begin, end, max_num + 1)
        # the index answers either kind of key; a unique-key lookup keeps the records whose UNIQ_KEY it is
        found = [m for m in hits if ((m.properties.get(UNIQ_KEY) == key) if unique else (key in keys_of(m.properties)))]
        return found[:max_num], len(found) > max_num

    async def query_message(self, payload: dict) -> dict:
        """``{"by": "key"|"uniqueKey", "topic", "key", "beginMs", "endMs", "maxNum"}``."""
        fields: dict[str, list[str]] = {}
        by = payload.get("by", "key")
        if by not in ("key", "uniqueKey"):
            fields["by"] = ["must be key or uniqueKey"]
        topic = check_name(payload, "topic", fields)
        key = payload.get("key")
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_LENGTH or " " in key:
            fields["key"] = [f"must be 1-{MAX_KEY_LENGTH} characters without a space"]
        begin, end, max_num = check_range(payload, fields)
        if fields:
            raise invalid(fields)
        found, truncated = await self.find(topic, key, begin, end, max_num, unique=by == "uniqueKey")
        return {"messages": [self.view(m) for m in found], "truncated": truncated}

    async def print_messages(self, payload: dict) -> dict:
        """``{"topic", "beginMs", "endMs", "maxNum"}``: per queue from the first message stored at or
        after beginMs (searchOffset), up to endMs."""
        fields: dict[str, list[str]] = {}
        topic = check_name(payload, "topic", fields)
        begin, end, max_num = check_range(payload, fields)
        if fields:
            raise invalid(fields)
        tc, search = self.topics.topics.get(topic), self.offsets()
        if tc is None or search is None:
            return {"messages": [], "truncated": False}
        out: list[Message] = []
        truncated = False
        for queue_id in queue_ids(tc):
            start = await search.search_offset(topic, queue_id, begin)
            truncated |= await self._print_queue(topic, queue_id, start, end, max_num, out)
        out.sort(key=lambda m: (m.store_timestamp, m.physical_offset))
        return {"messages": [self.view(m) for m in out[:max_num]], "truncated": truncated or len(out) > max_num}

    async def _print_queue(self, topic: str, queue_id: int, start: int, end: int, max_num: int, out: list[Message]) -> bool:
        """Add the queue's messages from ``start`` stored at or before ``end`` (at most ``max_num``);
        whether it had more."""
        taken, offset = 0, start
        while offset < self.store.max_queue_offset(topic, queue_id):
            batch = await self.store.get_messages(topic, queue_id, offset, PRINT_BATCH)
            if not batch:
                offset += PRINT_BATCH  # holes only
                continue
            for m in batch:
                if m.store_timestamp > end:
                    return False
                if taken == max_num:
                    return True
                out.append(m)
                taken += 1
            offset = batch[-1].queue_offset + 1
        return False

    async def view_message(self, payload: dict) -> dict:
        """``{"commitLogOffset", "bodyBytes"}``: the view with ``body`` (base64 of at most bodyBytes)."""
        fields: dict[str, list[str]] = {}
        offset = check_int(payload, "commitLogOffset", 0, MAX_MS, None, fields)
        limit = check_int(payload, "bodyBytes", 0, MAX_BODY_BYTES, DEFAULT_BODY_BYTES, fields)
        if fields:
            raise invalid(fields)
        m = await read_message(self.store, offset)
        if m is None:
            raise RequestRefused.of(
                ResponseCode.TOPIC_NOT_EXIST, f"no message at commit-log offset {offset} on {self.broker.name}"
            )
        view = self.view(m)
        view["body"] = base64.b64encode(m.body[:limit]).decode()
        view["bodyTruncated"] = len(m.body) > limit
        return view


MESSAGE_REQUESTS = ("query_message", "print_messages", "view_message", "message_trace", "dlq_list", "dlq_resend")


def indexed(handlers: dict[str, Handler]) -> dict[str, Handler]:
    """The handlers, a broker without the index (messageIndexEnable=false) refusing what needs it."""

    def refusing(handler: Handler) -> Handler:
        async def call(payload: dict) -> dict:
            try:
                return await handler(payload)
            except IndexDisabled as exc:
                raise RequestRefused.of(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc)) from None

        return call

    return {kind: refusing(handler) for kind, handler in handlers.items()}
