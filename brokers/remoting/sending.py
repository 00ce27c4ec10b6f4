"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) for remoting clients: each
message read into an ``Outgoing`` (its properties as the client wrote them, the queue the client chose),
the send admitted and stored by the sending service (brokers/sending.py; the rules:
brokers/core/admission.py), exactly as a gRPC send is, and the Admission answered in
``SendMessageResponseHeader`` terms.

What differs from gRPC is only translation:

- the message type comes from the properties, as Java's broker reads them: ``TRAN_MSG`` a
  transactional half message, ``DELAY`` (a 4.x delay level) or ``TIMER_DELIVER_MS`` /
  ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` a timed one, ``__SHARDINGKEY`` a FIFO one (its group), else
  normal;
- the client picks the queue (``queueId``); one beyond the topic's write queues is refused;
- a send to ``%RETRY%<group>`` (a consumer's fallback when CONSUMER_SEND_MSG_BACK failed) creates that
  retry topic, and goes to ``%DLQ%<group>`` once ``reconsumeTimes`` reaches ``maxReconsumeTimes``;
- a slave that would hand the send to its master answers SERVICE_NOT_AVAILABLE instead: a remoting
  client sends to the address its route names as id 0 and retries another broker set on an error
  (Java's slave refuses the same way);
- the answer's ``msgId`` is the offset message id (this broker's address and the record's commit-log
  offset), the client's own id being its ``UNIQ_KEY``; a batch answers every offset id, comma-joined.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand
from mqrules.remoting.headers import (
    SEND_MESSAGE_REQUEST,
    SEND_MESSAGE_REQUEST_V2,
    SEND_MESSAGE_RESPONSE,
    encode_header,
    parse_header,
)
from mqrules.remoting.message_id import encode_offset_message_id
from mqrules.remoting.properties import decode_properties

from ..consuming import ConsumeService
from ..core.admission import Admission, MessageType, Outgoing, Verdict
from ..core.codes import Code
from ..core.delay_levels import DELAY
from ..core.fifo import SHARDING_KEY
from ..core.pop import dlq_topic
from ..core.timer import TIMER_DELIVER_MS
from ..core.transaction import TRAN_MSG
from ..sending import SendService
from ..static import StaticQueues
from ..store.results import PutMessageStatus, PutResult
from .server import Connection

UNIQ_KEY = "UNIQ_KEY"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"  # MessageConst.PROPERTY_TIMER_DELAY_SEC: a delivery this long after the send
TIMER_DELAY_MS = "TIMER_DELAY_MS"
RETRY_PREFIX = "%RETRY%"
# MessageSysFlag bits that describe the body, kept with it: compressed (and by what), multiple tags.
BODY_FLAGS = 0x1 | 0x2 | 0x700
DECIDE_WAIT_S = 3.0  # a static queue's move decision, waited for once (as the gRPC edge waits)

# A core refusal in remoting terms (Java's SendMessageProcessor answers these codes for the same checks).
REFUSAL_CODES = {
    Code.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Code.FORBIDDEN: ResponseCode.NO_PERMISSION,
    Code.NOT_IMPLEMENTED: ResponseCode.SYSTEM_ERROR,
    Code.INTERNAL_SERVER_ERROR: ResponseCode.SYSTEM_ERROR,
}
# The store's answer: the three "stored, but" statuses keep their meaning (clients do not retry them).
PUT_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}

_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magicCode, bodyCRC, flag, bodyLength (MessageDecoder.encodeMessage)
_SHORT = struct.Struct(">h")


class BadBatch(ValueError):
    pass


def refusal_code(code: Code) -> int:
    """A core refusal's remoting code: the message's own faults are MESSAGE_ILLEGAL."""
    return REFUSAL_CODES.get(code, ResponseCode.MESSAGE_ILLEGAL)


def message_type(props: dict[str, str]) -> tuple[int, str, int | None]:
    """(message type, message group, delivery time in ms) of a remoting message, from its properties."""
    if props.get(TRAN_MSG) == "true":
        return MessageType.TRANSACTION, "", None
    if DELAY in props:
        return MessageType.DELAY, "", None
    for key, scale in ((TIMER_DELIVER_MS, None), (TIMER_DELAY_SEC, 1000), (TIMER_DELAY_MS, 1)):
        raw = props.get(key)
        if raw is not None:
            try:
                value = int(raw)
            except ValueError:
                value = -1  # admission refuses it: a time is a whole number
            return MessageType.DELAY, "", value if scale is None else int(time.time() * 1000) + value * scale
    group = props.get(SHARDING_KEY, "")
    return (MessageType.FIFO, group, None) if group else (MessageType.NORMAL, "", None)


def decode_batch(body: bytes) -> list[tuple[bytes, int, dict[str, str]]]:
    """A batch send's body (MessageBatch.encode): (body, flag, properties) per message."""
    out, pos, end = [], 0, len(body)
    while pos < end:
        if end - pos < _BATCH_HEAD.size:
            raise BadBatch(f"a batch message at byte {pos} is cut short")
        size, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        if size < _BATCH_HEAD.size + 2 or pos + size > end or body_len < 0 or _BATCH_HEAD.size + body_len + 2 > size:
            raise BadBatch(f"a batch message at byte {pos} has sizes that do not add up")
        p = pos + _BATCH_HEAD.size
        data = body[p : p + body_len]
        p += body_len
        props_len = _SHORT.unpack_from(body, p)[0]
        p += 2
        if props_len < 0 or p + props_len != pos + size:
            raise BadBatch(f"a batch message at byte {pos} has sizes that do not add up")
        try:
            props = decode_properties(body[p : p + props_len].decode())
        except UnicodeDecodeError:
            raise BadBatch(f"the properties of the batch message at byte {pos} are not UTF-8") from None
        out.append((data, flag, props))
        pos += size
    if not out:
        raise BadBatch("a batch of no message")
    return out


class SendingHandler:
    """``writer()``: whether this broker writes the consumer metadata (the master): only there is a
    retry topic created by a send."""

    def __init__(
        self,
        sending: SendService,
        consuming: ConsumeService,
        static: StaticQueues,
        addr: tuple[str, int],
        writer: Callable[[], bool],
    ):
        self.sending, self.consuming, self.static = sending, consuming, static
        self.host, self.port = addr
        self.writer = writer

    def handlers(self) -> dict[int, Callable]:
        return {
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
        }

    async def send(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        table = SEND_MESSAGE_REQUEST if request.code == RequestCode.SEND_MESSAGE else SEND_MESSAGE_REQUEST_V2
        h = parse_header(table, request.ext_fields)
        topic, queue_id = str(h["topic"]), int(h["queueId"])  # type: ignore[arg-type]
        reconsumed = int(h["reconsumeTimes"] or 0)
        if topic.startswith(RETRY_PREFIX):
            topic = self._retry_target(topic, reconsumed, h["maxReconsumeTimes"])
            queue_id = 0
        batch_props = decode_properties(str(h["properties"] or ""))
        if request.code == RequestCode.SEND_BATCH_MESSAGE or h["batch"]:
            try:
                parts = decode_batch(request.body)
            except BadBatch as exc:
                return request.response(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        else:
            parts = [(request.body, int(h["flag"]), batch_props)]  # type: ignore[arg-type]
        born, body_flags = int(h["bornTimestamp"]), int(h["sysFlag"]) & BODY_FLAGS  # type: ignore[arg-type]
        messages = [
            self._outgoing(topic, data, flag, props, born, queue_id, reconsumed, body_flags) for data, flag, props in parts
        ]
        return await self._admit(request, messages)

    def _retry_target(self, topic: str, reconsumed: int, max_times: object) -> str:
        """A retry topic exists once a consumer sends to it; past its last retry a message is dead."""
        group = topic[len(RETRY_PREFIX) :]
        limit = max_times if isinstance(max_times, int) else self.consuming.config.retryMaxTimes
        target = dlq_topic(group) if reconsumed > limit else topic
        if self.writer():
            self.consuming.ensure_topic(target)
        return target

    def _outgoing(
        self, topic: str, body: bytes, flag: int, props: dict[str, str], born: int, queue_id: int, reconsumed: int, sys_flag: int
    ) -> Outgoing:
        if UNIQ_KEY not in props:  # (every client sets one; the broker's own id for one that did not)
            props = {**props, UNIQ_KEY: uuid.uuid4().hex.upper()}
        kind, group, deliver_ms = message_type(props)
        return Outgoing(
            topic, body, kind, group, deliver_ms, props, born, None if group else queue_id, flag, reconsumed, sys_flag
        )

    async def _admit(self, request: RemotingCommand, messages: list[Outgoing], waited: bool = False) -> RemotingCommand:
        admission = self.sending.admit(messages, waited=waited)
        verdict = admission.verdict
        if verdict is Verdict.STORE:
            return self._stored(request, admission, await self.sending.append(admission, messages))
        if verdict is Verdict.REFUSE:
            assert admission.status is not None
            return request.response(refusal_code(admission.status.code), admission.status.message)
        if verdict is Verdict.TO_MASTER:
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, "this broker is a slave: send to its master")
        if verdict is Verdict.TO_OWNER:
            remark = f"the queue's writes moved to broker set {admission.owner}: read the topic's route again"
            return request.response(ResponseCode.NOT_LEADER_FOR_QUEUE, remark)
        await self.static.decided(admission.topic, admission.logical_queue, DECIDE_WAIT_S)  # AWAIT_DECISION
        return await self._admit(request, messages, waited=True)

    def _stored(self, request: RemotingCommand, admission: Admission, results: list[PutResult]) -> RemotingCommand:
        """SUCCESS (or a "stored, but" status) with the first message's queue and offset, or the
        first refusal."""
        for result in results:
            code = PUT_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
            if code in (ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR):
                return request.response(code, result.detail or str(result.status))
        first, admitted = results[0], admission.messages[0]
        worst = max((PUT_CODES[r.status] for r in results), default=ResponseCode.SUCCESS)
        ids = ",".join(encode_offset_message_id(self.host, self.port, r.physical_offset) for r in results)
        header: dict[str, str | int | bool | None] = {
            "msgId": ids,
            "queueId": admitted.queue_id,
            "queueOffset": first.queue_offset,
        }
        if admitted.half:
            header["transactionId"] = admitted.properties[UNIQ_KEY]
        return request.response(worst, None, ext_fields=encode_header(header, SEND_MESSAGE_RESPONSE))
