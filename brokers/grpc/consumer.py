"""ReceiveMessage (pop), AckMessage, ChangeInvisibleDuration and QueryOffset for the official RocketMQ 5
clients: each request read into the consuming service's calls (brokers/consuming.py; the rules:
brokers/core/pop.py, brokers/core/fifo.py), each outcome answered. A replica that does not serve
consumers (a plain slave) forwards the call to its group's serving broker (forward.py); a static
topic's logical queue is served with the broker sets that hold its segments (logical.py)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import replace
from functools import partial

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..clients_report import CLIENT_ID_KEY, GrpcClients, caller_of
from ..config import BrokerConfig
from ..consuming import ConsumeService, Matches, NotStored
from ..core.delay_levels import DELAY
from ..core.fifo import SHARDING_KEY
from ..core.pop import ReceiptHandle, tag_matcher
from ..core.timer import TIMER_KEYS
from ..core.views import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, DLQ_REASON, ORIGIN_MESSAGE_ID, RESEND_ID, RETRY_TOPIC
from ..static import StaticQueues
from ..store.message import Message
from ..topics import TopicConfigManager
from .clients import client_language
from .codes import send_code, status
from .forward import Forwarder, NoServingBroker, ServeHere
from .logical import StaticHops, by_broker, foreign
from .messages import client_message

SYSTEM_KEYS = frozenset(
    {
        "UNIQ_KEY",
        "TAGS",
        "KEYS",
        "BORN_HOST",
        "RECONSUME_TIME",
        "ORIGIN_TOPIC",
        "ORIGIN_QUEUE_ID",
        # RocketMQ's (MessageConst.STRING_HASH_SET: never user properties) and this broker's, on
        # retried, dead and resent messages (brokers/core/views.py)
        RETRY_TOPIC,
        ORIGIN_MESSAGE_ID,
        DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID,
        DLQ_REASON,
        RESEND_ID,
        SHARDING_KEY,
        DELAY,
        *TIMER_KEYS,
    }
)


def _ms(duration: Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 10**6


def answers(outcome: list[pb.Message] | NotStored):
    """A receive's answers: the error of a pop not recorded; MESSAGE_NOT_FOUND; or OK, then each message."""
    if isinstance(outcome, NotStored):
        detail = f"pop not recorded: {outcome.detail or outcome.status}"
        yield spb.ReceiveMessageResponse(status=status(send_code(outcome.status), detail))
    elif not outcome:
        yield spb.ReceiveMessageResponse(status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
    else:
        yield spb.ReceiveMessageResponse(status=status(pb.Code.OK))
        for out in outcome:
            yield spb.ReceiveMessageResponse(message=out)


def _invalid_handle(request: spb.ChangeInvisibleDurationRequest) -> spb.ChangeInvisibleDurationResponse:
    return spb.ChangeInvisibleDurationResponse(
        status=status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle"),
        receipt_handle=request.receipt_handle,
    )


class ReceivingHandler:
    def __init__(
        self,
        config: BrokerConfig,
        consuming: ConsumeService,
        topics: TopicConfigManager,
        static: StaticQueues,
        hops: StaticHops,
        to_master: Forwarder,
        clients: GrpcClients | None = None,
    ):
        """``clients``: the connected clients (a receive tells which queues a client holds; None: a
        registry of this handler's own)."""
        self.config, self.consuming, self.topics, self.static = config, consuming, topics, static
        self.hops, self.to_master = hops, to_master
        self.clients = clients if clients is not None else GrpcClients()
        self._forwarding = lambda: not consuming.serving  # a plain slave hands consumers' calls on

    # --- receive ----------------------------------------------------------------------------------

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context):
        group, topic, queue_id = request.group.name, request.message_queue.topic.name, request.message_queue.id
        expression = request.filter_expression
        matches = tag_matcher(expression.expression, expression.type == pb.FilterType.SQL)
        if matches is None:
            yield spb.ReceiveMessageResponse(status=status(pb.Code.ILLEGAL_FILTER_EXPRESSION, "SQL filters are not supported"))
            return
        if topic not in self.topics.topics:
            yield spb.ReceiveMessageResponse(status=status(pb.Code.TOPIC_NOT_FOUND))
            return
        caller = caller_of(context)
        if not self.consuming.serving:
            # the receiving client's id goes along: the serving broker's pop records name it (a trace)
            client = ((CLIENT_ID_KEY, caller.client_id),) if caller.client_id else None
            try:
                async for response in self.to_master.stream("ReceiveMessage", request, context, self._forwarding, client):
                    yield response
                return
            except NoServingBroker as exc:
                yield spb.ReceiveMessageResponse(status=status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
                return
            except ServeHere:
                pass  # elected meanwhile: served here
        batch = max(1, min(request.batch_size or 32, 1024))
        invisible_ms = _ms(request.invisible_duration) or 30_000
        # Answer before the client's own deadline (request timeout + await duration): keep a margin.
        deadline = asyncio.get_running_loop().time() + max(0.0, _ms(request.long_polling_timeout) / 1000 - 0.5)
        every_queue = bool(client_language(context))
        self.clients.received(caller, group, topic, queue_id)
        static = self.static.get(topic)
        if static is not None:  # a static topic's logical queue (logical.py)
            pop_segment = partial(self._pop_segment, group, topic, batch, invisible_ms, matches, caller.client_id)
            async for answer in self.hops.receive_static(request, context, static, every_queue, pop_segment, deadline):
                yield answer
            return
        try:
            found = await self.consuming.receive(
                group, topic, queue_id, batch, invisible_ms, matches, every_queue, deadline, client_id=caller.client_id
            )
            outcome: list[pb.Message] | NotStored = [
                self.client_message(msg, handle, attempt, invisible_ms, qid) for msg, handle, attempt, qid in found
            ]
        except NotStored as exc:
            outcome = exc
        for answer in answers(outcome):
            yield answer

    async def _pop_segment(
        self,
        group: str,
        topic: str,
        batch: int,
        invisible_ms: int,
        matches: Matches,
        client_id: str,
        deadline: float,
        lid,
        segment,
        long_poll,
    ):
        """The answers to a receive of one segment of a static topic's logical queue ``lid``, held
        here (brokers/consuming.py ``receive_segment``). Clients see the logical queue and offsets;
        handles name this broker set."""
        try:
            found = await self.consuming.receive_segment(
                group, topic, batch, invisible_ms, matches, deadline, segment, long_poll, client_id=client_id
            )
        except NotStored as exc:
            for answer in answers(exc):
                yield answer
            return
        here, outcome = self.static.broker, []
        for msg, handle, attempt, in_segment in found:
            out = self.client_message(msg, replace(handle, broker=here), attempt, invisible_ms, lid)
            if in_segment and segment.logic_start is not None:
                out.system_properties.queue_offset = segment.logic_start + (msg.queue_offset - segment.phys_start)
            outcome.append(out)
        for answer in answers(outcome):
            yield answer

    def client_message(self, m: Message, handle: ReceiptHandle, attempt: int, invisible_ms: int, queue_id: int) -> pb.Message:
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
        if not self.consuming.serving and (
            answer := await self.to_master.forward("AckMessage", request, context, spb.AckMessageResponse, self._forwarding)
        ):
            return answer
        invalid = status(pb.Code.INVALID_RECEIPT_HANDLE)
        codes: list[pb.Status] = [invalid] * len(request.entries)
        by_queue: dict[tuple[str, str, int], list[tuple[int, ReceiptHandle]]] = defaultdict(list)
        elsewhere: dict[int, str] = {}  # static topics: entries another broker set handed out (logical.py)
        for i, e in enumerate(request.entries):
            handle = ReceiptHandle.decode(e.receipt_handle)
            if (broker := foreign(handle, self.static.broker)) is not None:
                elsewhere[i] = broker
            elif handle is not None and handle.group == request.group.name:
                by_queue[(handle.group, handle.topic, handle.queue_id)].append((i, handle))
        outcomes = await asyncio.gather(*(self.ack_queue(key, [h for _, h in acks]) for key, acks in by_queue.items()))
        for acks, statuses in zip(by_queue.values(), outcomes, strict=True):
            for (i, _), code in zip(acks, statuses, strict=True):
                codes[i] = code
        if elsewhere:
            for i, code in (await self.hops.ack_elsewhere(request, context, by_broker(elsewhere))).items():
                codes[i] = code
        entries = [
            spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=code)
            for e, code in zip(request.entries, codes, strict=True)
        ]
        bad = next((c for c in codes if c.code != pb.Code.OK), None)
        if bad is not None and bad.code == pb.Code.INVALID_RECEIPT_HANDLE:
            bad = status(pb.Code.INVALID_RECEIPT_HANDLE, "unknown or expired receipt handle")
        return spb.AckMessageResponse(status=bad or status(pb.Code.OK), entries=entries)

    async def ack_queue(self, key: tuple[str, str, int], handles: list[ReceiptHandle]) -> list[pb.Status]:
        """The acks of one queue, each OK once their record is stored (else the status they all get)."""
        acked, not_stored = await self.consuming.ack_queue(key, handles)
        if not_stored is None:
            stored = status(pb.Code.OK)
        else:
            stored = status(send_code(not_stored.status), f"ack not recorded: {not_stored.detail or not_stored.status}")
        return [stored if ok else status(pb.Code.INVALID_RECEIPT_HANDLE) for ok in acked]

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest, context):
        if not self.consuming.serving and (
            answer := await self.to_master.forward(
                "ChangeInvisibleDuration", request, context, spb.ChangeInvisibleDurationResponse, self._forwarding
            )
        ):
            if not answer.receipt_handle:  # the clients keep the handle of any answer, even an error's
                answer.receipt_handle = request.receipt_handle
            return answer
        handle = ReceiptHandle.decode(request.receipt_handle)
        if handle is None:
            return _invalid_handle(request)
        if (broker := foreign(handle, self.static.broker)) is not None:
            return await self.hops.invisible_elsewhere(broker, request, context)
        try:
            new = await self.consuming.change_invisible(handle, _ms(request.invisible_duration))
        except NotStored as exc:
            return spb.ChangeInvisibleDurationResponse(
                status=status(send_code(exc.status), f"not recorded: {exc.detail or exc.status}"),
                receipt_handle=request.receipt_handle,
            )
        if new is None:
            return _invalid_handle(request)
        return spb.ChangeInvisibleDurationResponse(status=status(pb.Code.OK), receipt_handle=new.encode())

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context) -> spb.QueryOffsetResponse:
        """Min / max offset and search by time (reference §5.5: reads an acting master serves too)."""
        if not self.consuming.serving and (
            answer := await self.to_master.forward("QueryOffset", request, context, spb.QueryOffsetResponse, self._forwarding)
        ):
            return answer
        topic, queue_id = request.message_queue.topic.name, request.message_queue.id
        if topic not in self.topics.topics:
            return spb.QueryOffsetResponse(status=status(pb.Code.TOPIC_NOT_FOUND))
        static = self.static.get(topic)
        if static is not None:
            return await self.hops.query_offset_logical(request, context, static)
        consuming = self.consuming
        end = consuming.store.max_queue_offset(topic, queue_id)
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.END:
            return spb.QueryOffsetResponse(status=status(pb.Code.OK), offset=end)
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            return spb.QueryOffsetResponse(status=status(pb.Code.OK), offset=await consuming.first_offset(topic, queue_id, end))
        wanted = request.timestamp.seconds * 1000 + request.timestamp.nanos // 10**6
        return spb.QueryOffsetResponse(status=status(pb.Code.OK), offset=await consuming.search_offset(topic, queue_id, wanted))
