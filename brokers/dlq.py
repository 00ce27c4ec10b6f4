"""A consumer group's dead letters (docs/messages.md §3): ``dlq_list`` reads ``%DLQ%<group>`` with each
message's original topic, original id, reason and attempts (brokers/core/views.py), and ``dlq_resend``
sends copies back to their original topics through the broker's send path (brokers/sending.py: the
topic's queue, the quorum write, the send's metrics), each with a new id (core/views.py
``resent_properties``).

A resend is idempotent per (resend id, dead message): its copy carries ``<resendId>:<dlqOffset>`` among
its KEYS, so a second request finds the first copy through the store's index (and, while the index
catches up, this process's memory of the copies it wrote) and answers it with ``already: true``.
Only the serving master resends; a preview changes nothing.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable

from mqrules.codes import ResponseCode

from .control.nameserver import RequestRefused
from .core.admission import Outgoing, Verdict
from .core.fifo import SHARDING_KEY
from .core.pop import dlq_topic
from .core.views import UNIQ_KEY, dead_letter_facts, origin_topic_of, resend_key, resend_message_type, resent_properties
from .messages import IndexedStore, MessageQueries, check_int, check_name, invalid, read_message
from .metalog import MetaLog, MetaMode
from .pop import now_ms
from .sending import STORED, SendService
from .store.message import Message
from .store.store import MessageStore
from .topics import TopicConfigManager

MAX_LIST = 500
MAX_RESEND = 1000
BODY_FLAGS = 0x1 | 0x2 | 0x700  # the sysFlag bits that describe the body (compressed): kept by the copy
RESEND_ID = re.compile(r"[0-9a-fA-F]{32}")
REMEMBERED = 4096  # copies this process wrote, by (resend id, dead message), until the index has them


def parse_resend(payload: dict) -> tuple[str, list[int], str, bool]:
    fields: dict[str, list[str]] = {}
    group = check_name(payload, "group", fields)
    offsets = payload.get("commitLogOffsets")
    if (
        not isinstance(offsets, list)
        or not 0 < len(offsets) <= MAX_RESEND
        or not all(type(o) is int and 0 <= o < 2**63 for o in offsets)
    ):
        fields["commitLogOffsets"] = [f"must be a list of 1-{MAX_RESEND} commit-log offsets"]
    resend_id = payload.get("resendId")
    if not isinstance(resend_id, str) or RESEND_ID.fullmatch(resend_id) is None:
        fields["resendId"] = ["must be 32 hex digits"]
    preview = payload.get("preview", False)
    if not isinstance(preview, bool):
        fields["preview"] = ["must be true or false"]
    if fields:
        raise invalid(fields)
    return group, list(dict.fromkeys(offsets)), resend_id.lower(), preview  # type: ignore[union-attr, arg-type]


class DeadLetters:
    """``sending()``: the send service (None until the client endpoints serve)."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        metalog: MetaLog,
        queries: MessageQueries,
        sending: Callable[[], SendService | None],
    ):
        self.store, self.topics, self.metalog, self.queries, self.sending = store, topics, metalog, queries, sending
        self.index: IndexedStore = store  # type: ignore[assignment]
        self._resending = asyncio.Lock()  # one resend at a time: a repeat waits for the first and finds its copies
        self._written: OrderedDict[tuple[str, int], tuple[str, str]] = OrderedDict()

    def view(self, m: Message) -> dict:
        return {**self.queries.view(m), **dead_letter_facts(m.properties, m.reconsume_times)}

    async def dlq_list(self, payload: dict) -> dict:
        """``{"group", "offset", "limit"}`` -> ``{"messages", "minOffset", "maxOffset"}``."""
        fields: dict[str, list[str]] = {}
        group = check_name(payload, "group", fields)
        offset = check_int(payload, "offset", 0, 2**63 - 1, 0, fields)
        limit = check_int(payload, "limit", 1, MAX_LIST, 100, fields)
        if fields:
            raise invalid(fields)
        topic = dlq_topic(group)
        low, high = self.store.min_queue_offset(topic, 0), self.store.max_queue_offset(topic, 0)
        messages = await self.store.get_messages(topic, 0, max(offset, low), limit) if high else []
        return {"messages": [self.view(m) for m in messages], "minOffset": low, "maxOffset": high}

    async def dlq_resend(self, payload: dict) -> dict:
        """``{"group", "commitLogOffsets", "resendId", "preview"}`` -> ``{"resent": [{"commitLogOffset",
        "originTopic", "newMsgId", "newUniqKey", "already"}], "missing": [offset]}``."""
        group, offsets, resend_id, preview = parse_resend(payload)
        if not preview and self.metalog.mode is not MetaMode.WRITER:
            raise RequestRefused.of(
                ResponseCode.SYSTEM_ERROR, "not the master of this broker set: dead letters are resent by the serving master"
            )
        resent, missing = [], []
        async with self._resending:
            for offset in offsets:
                dead = await read_message(self.store, offset)
                if dead is None or dead.topic != dlq_topic(group):
                    missing.append(offset)
                    continue
                resent.append(await self._resend_one(dead, resend_id, preview))
        return {"resent": resent, "missing": missing}

    async def _resend_one(self, dead: Message, resend_id: str, preview: bool) -> dict:
        origin = origin_topic_of(dead.properties)
        if origin is None:
            raise invalid({"commitLogOffsets": [f"the message at {dead.physical_offset} names no original topic"]})
        answer = {"commitLogOffset": dead.physical_offset, "originTopic": origin, "newMsgId": None, "newUniqKey": None}
        earlier = await self._earlier(origin, resend_id, dead)
        if earlier is not None:
            return {**answer, "newMsgId": earlier[0], "newUniqKey": earlier[1], "already": True}
        if preview:
            return {**answer, "already": False}
        msg_id, uniq = await self._send(origin, dead, resend_id)
        self._written[(resend_id, dead.physical_offset)] = (msg_id, uniq)
        while len(self._written) > REMEMBERED:
            self._written.popitem(last=False)
        return {**answer, "newMsgId": msg_id, "newUniqKey": uniq, "already": False}

    async def _earlier(self, origin: str, resend_id: str, dead: Message) -> tuple[str, str] | None:
        """(offset message id, unique key) of the copy an earlier request with ``resend_id`` wrote."""
        known = self._written.get((resend_id, dead.physical_offset))
        if known is not None:
            return known
        key = resend_key(resend_id, dead.physical_offset)
        for copy in await self.index.query_index_messages(origin, key, dead.store_timestamp, now_ms() + 60_000, 4):
            if key in copy.properties.get("KEYS", "").split(" "):
                return self.queries.view(copy)["msgId"], copy.properties.get(UNIQ_KEY, "")
        return None

    def _outgoing(self, origin: str, dead: Message, resend_id: str) -> Outgoing:
        tc = self.topics.topics.get(origin)
        if tc is None:
            raise RequestRefused.of(ResponseCode.TOPIC_NOT_EXIST, f"the original topic {origin} does not exist here")
        kind = resend_message_type(tc.message_type)
        if kind is None:
            raise RequestRefused.of(
                ResponseCode.INVALID_PARAMETER, f"{origin} is a {tc.message_type} topic: a dead letter is not resent to it"
            )
        uniq = uuid.uuid4().hex.upper()
        props = resent_properties(dead.properties, uniq, resend_id, dead.physical_offset)
        group = props.get(SHARDING_KEY, uniq) if kind.name == "FIFO" else ""
        if group:
            props[SHARDING_KEY] = group
        now = now_ms()
        delivery = now if kind.name == "DELAY" else None
        return Outgoing(origin, dead.body, kind, group, delivery, props, now, flag=dead.flag, sys_flag=dead.sys_flag & BODY_FLAGS)

    async def _send(self, origin: str, dead: Message, resend_id: str) -> tuple[str, str]:
        sending = self.sending()
        if sending is None:
            raise RequestRefused.of(ResponseCode.SERVICE_NOT_AVAILABLE, "the broker does not serve clients yet")
        out = self._outgoing(origin, dead, resend_id)
        admission = sending.admit([out], may_forward=False)
        if admission.verdict is not Verdict.STORE:
            detail = admission.status.message if admission.status is not None else admission.verdict.value
            raise RequestRefused.of(ResponseCode.SYSTEM_ERROR, f"the resend to {origin} was refused: {detail}")
        result = (await sending.append(admission, [out]))[0]
        if result.status not in STORED:
            raise RequestRefused.of(
                ResponseCode.SYSTEM_ERROR, f"the resend to {origin} was not stored: {result.detail or result.status}"
            )
        copy = await read_message(self.store, result.physical_offset)
        msg_id = self.queries.view(copy)["msgId"] if copy is not None else ""
        return msg_id, out.properties[UNIQ_KEY]
