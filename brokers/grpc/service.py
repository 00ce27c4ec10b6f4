"""``MessagingService`` for the official RocketMQ 5 clients: QueryRoute, QueryAssignment, Heartbeat,
Telemetry (settings exchange), SendMessage, NotifyClientTermination here; ReceiveMessage, AckMessage and
ChangeInvisibleDuration in consumer.py. Every other call answers the base servicer's UNIMPLEMENTED
status, never a crash."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from mqrules.topic_attributes import (
    DEFAULT_MESSAGE_TYPE,
    TopicMessageType,
    accepted_message_types,
    accepted_send_types,
    type_conflict,
)

from ..config import BrokerConfig
from ..delay_levels import DELAY, level_delay_ms, level_for, level_of, parse_delay_levels
from ..escape import EscapeBridge
from ..fifo import SHARDING_KEY, IllegalGroup, check_group, queue_of_group
from ..meta import ConsumerMeta
from ..metalog import MetaLog
from ..static import StaticQueues
from ..store.message import Message
from ..store.store import MessageStore, PutMessageStatus
from ..timer import REAL_QID, REAL_TOPIC, TIMER_DELIVER_MS, TIMER_OUT_MS, TimerRefused, delivery_due, into_wheel, now_ms
from ..topics import TopicConfigManager
from ..transaction import TRANSACTION_ID, TXN_KEYS, Resolution, Transactions, TxnNotStored, TxnRefused, into_half
from .clients import MULTI_ADDRESS_CLIENTS, ONE_REPLICA_PER_QUEUE_CLIENTS, client_language
from .codes import permission, send_code
from .consumer import ConsumerSide
from .forward import Forwarder
from .logical import DECIDE_WAIT_S
from .messages import client_message
from .settings import MAX_BODY_SIZE, client_settings

log = logging.getLogger("brokers.grpc")

ROUTE_TIMEOUT_S = 3.0


def _status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


_OK = _status(pb.Code.OK)  # copied into each entry that carries it (protobuf messages are never shared)
# Per topic message type (message.type): what its route's queues accept, and the MessageType values a
# sent message may carry; computed once, so a send checks each message with one set lookup.
_ROUTE_ACCEPTS = {t: [pb.MessageType.Value(a) for a in accepted_message_types(t)] for t in TopicMessageType}
_SEND_ACCEPTS = {t: frozenset(pb.MessageType.Value(a) for a in accepted_send_types(t)) for t in TopicMessageType}


def _refused_type(topic: str, topic_type: TopicMessageType, message_type: int) -> spb.SendMessageResponse:
    name = pb.MessageType.Name(message_type) if message_type in pb.MessageType.values() else str(message_type)
    status = _status(pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, type_conflict(topic, topic_type, name))
    return spb.SendMessageResponse(status=status)


def _conflict(detail: str) -> spb.SendMessageResponse:
    return spb.SendMessageResponse(status=_status(pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, detail))


_RESOLUTIONS = {pb.TransactionResolution.COMMIT: Resolution.COMMIT, pb.TransactionResolution.ROLLBACK: Resolution.ROLLBACK}
_HIDDEN = frozenset({"UNIQ_KEY", "TAGS", "KEYS", "BORN_HOST", *TXN_KEYS})


def check_message(half: Message) -> pb.Message:
    """A half message as a transaction check shows it to its producer (its real topic and queue, as
    the proxy converts it)."""
    props = half.properties
    out = client_message(half, props.get(REAL_TOPIC, ""), int(props.get(REAL_QID, "0")), _HIDDEN)
    out.system_properties.message_type = pb.MessageType.TRANSACTION
    return out


def _endpoints(addrs: list[str]) -> pb.Endpoints:
    out = pb.Endpoints(scheme=pb.AddressScheme.IPv4)
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        out.addresses.add(host=host, port=int(port))
    return out


def replica_addrs(grpc_addrs: dict[str, str]) -> list[str]:
    """A broker set's live client endpoints: its master's (or acting master's) first, then every
    other live replica by broker id (they forward, forward.py); with no master, the live replicas
    (they hold requests until there is one)."""
    first = grpc_addrs.get("0")
    others = [a for i, a in sorted(grpc_addrs.items(), key=lambda kv: int(kv[0])) if i != "0" and a != first]
    return ([first] if first else []) + others


def queue_addrs(replicas: list[str], qid: int, language: str) -> list[str]:
    """The addresses one queue's Endpoints names for a client (``replicas`` from replica_addrs).

    - clients that cannot fail over between addresses (the Node.js client): the master's;
    - the Java client (it connects in the order given, retries on the same queue, and its keepalive
      finds a frozen peer): every replica, the master first;
    - the Python client (it keeps one channel per Endpoints on the address it reached first and
      retries on the next queue): one replica per queue. With two slaves or more, the slaves in
      turn and never the master: a master that stops answering (SIGSTOP) holds each request sent to
      it for the client's whole deadline, and a retry that reached it would wait again, while a
      slave holds a forwarded request only until the controller names the new master. With one
      slave, the master and the slave in turn (a send and its retry never go to the same replica).
    """
    if language not in MULTI_ADDRESS_CLIENTS:
        return replicas[:1]
    if language not in ONE_REPLICA_PER_QUEUE_CLIENTS or len(replicas) < 2:
        return replicas
    serving = replicas[1:] if len(replicas) > 2 else replicas
    return [serving[qid % len(serving)]]


class MessagingService(ConsumerSide, rpc.MessagingServiceServicer):
    def __init__(
        self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager, meta: ConsumerMeta, metalog: MetaLog
    ):
        self.config = config
        self.store = store
        self.topics = topics
        self.init_consumer(meta, metalog)
        self._next_queue = itertools.count()
        self._http = httpx.AsyncClient(
            base_url=config.controlPlaneUrl, timeout=ROUTE_TIMEOUT_S, headers={"Authorization": f"Bearer {config.token}"}
        )
        self.forwarder = Forwarder(config.brokerName, config.grpc_addr, self._http)
        self.escape = EscapeBridge(config.brokerName, self._http)  # an acting master's way out (RIP-32)
        # Whether a send goes to the group's master instead (a slave, or a broker without a role yet):
        # the broker decides (brokers/broker.py); by default nothing is forwarded.
        self.forwards_sends: Callable[[], bool] = lambda: False
        self._producers: dict[str, list[asyncio.Queue]] = {}  # producer group -> Telemetry streams
        self.transactions = Transactions(store, config.transactionTimeOut, config.transactionCheckMax)
        self._delay_levels = parse_delay_levels(config.messageDelayLevel)
        static_path = Path(config.storePathRootDir) / "config" / "staticTopics.json"
        self.init_logical(StaticQueues(config.brokerName, store.max_queue_offset, static_path))

    async def close(self) -> None:
        await self.close_logical()
        await self.forwarder.close()
        await self.escape.close()
        await self._http.aclose()

    # --- routes ----------------------------------------------------------------------------------

    async def QueryRoute(self, request: spb.QueryRouteRequest, context) -> spb.QueryRouteResponse:
        return await self._route(request.topic, client_language(context))

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context) -> spb.QueryAssignmentResponse:
        """Push consumers' queues: every readable queue of the topic's masters (the broker side of
        rebalancing is "all readable queues"; the clients share them among themselves)."""
        route = await self._route(request.topic, client_language(context))
        if route.status.code != pb.Code.OK:
            return spb.QueryAssignmentResponse(status=route.status)
        readable = (pb.Permission.READ, pb.Permission.READ_WRITE)
        return spb.QueryAssignmentResponse(
            status=route.status,
            assignments=[pb.Assignment(message_queue=q) for q in route.message_queues if q.permission in readable],
        )

    async def _route(self, resource: pb.Resource, language: str = "") -> spb.QueryRouteResponse:
        topic = resource.name
        try:
            r = await self._http.get(f"/api/v1/nameserver/routes/{topic}")
        except httpx.HTTPError as exc:
            return spb.QueryRouteResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, f"nameserver unreachable: {exc}"))
        if r.status_code == 404:
            return spb.QueryRouteResponse(status=_status(pb.Code.TOPIC_NOT_FOUND, f"no route for topic {topic}"))
        if r.status_code != 200:
            return spb.QueryRouteResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, r.text[:200]))
        route = r.json()
        perms = {qd["brokerName"]: qd for qd in route["queueDatas"]}
        # The topic's type as this broker knows it (the proxy asks the broker too); unknown here: NORMAL.
        config = self.topics.topics.get(topic)
        accepts = _ROUTE_ACCEPTS[DEFAULT_MESSAGE_TYPE if config is None else config.message_type]
        if "logicQueueMapping" in route:  # a static topic: its logical queues, each on its owner
            self.static.update(route["logicQueueMapping"])
            return self._logical_route(resource, route, accepts, language)
        queues = []
        for bd in route["brokerDatas"]:
            replicas = replica_addrs(bd.get("brokerGrpcAddrs", {}))
            qd = perms.get(bd["brokerName"])
            if not replicas or qd is None:
                continue  # no live replica with a client endpoint: nothing to route to
            brokers: dict[tuple[str, ...], pb.Broker] = {}
            for qid in range(max(qd["readQueueNums"], qd["writeQueueNums"])):
                perm = qd["perm"]
                if qid >= qd["writeQueueNums"]:
                    perm &= ~2
                if qid >= qd["readQueueNums"]:
                    perm &= ~4
                addrs = tuple(queue_addrs(replicas, qid, language))
                broker = brokers.get(addrs)
                if broker is None:
                    broker = brokers[addrs] = pb.Broker(name=bd["brokerName"], id=0, endpoints=_endpoints(list(addrs)))
                queues.append(
                    pb.MessageQueue(
                        topic=resource,
                        id=qid,
                        permission=permission(perm),
                        broker=broker,
                        accept_message_types=accepts,
                    )
                )
        return spb.QueryRouteResponse(status=_status(pb.Code.OK), message_queues=queues)

    def _logical_route(self, resource: pb.Resource, route: dict, accepts: list, language: str) -> spb.QueryRouteResponse:
        """One queue per logical queue, on the broker set that owns its writable segment (clients
        need no change; brokers/grpc/logical.py serves the rest)."""
        m = self.static.get(resource.name)
        addrs = {bd["brokerName"]: replica_addrs(bd.get("brokerGrpcAddrs", {})) for bd in route["brokerDatas"]}
        queues = []
        for q in m.queues if m is not None else ():
            replicas = addrs.get(q.writable.broker_name)
            if not replicas:
                continue  # no live replica with a client endpoint: nothing to route to
            broker = pb.Broker(
                name=q.writable.broker_name, id=0, endpoints=_endpoints(queue_addrs(replicas, q.queue_id, language))
            )
            queues.append(
                pb.MessageQueue(
                    topic=resource,
                    id=q.queue_id,
                    permission=pb.Permission.READ_WRITE,
                    broker=broker,
                    accept_message_types=accepts,
                )
            )
        return spb.QueryRouteResponse(status=_status(pb.Code.OK), message_queues=queues)

    # --- client session ---------------------------------------------------------------------------

    async def Heartbeat(self, request, context) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=_status(pb.Code.OK))

    async def Telemetry(self, request_iterator, context):
        """Settings exchange: every settings command is answered at once with an OK status and the
        settings RocketMQ's proxy would answer (settings.py). A producer's stream is kept under each
        topic it publishes to (its producer group in gRPC), so that a transaction check can reach it
        (``relay_check``; which broker of the set relays it: brokers/transaction_check.py)."""
        out: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        groups: set[str] = set()

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if command.HasField("settings"):
                        asked = command.settings
                        out.put_nowait(
                            spb.TelemetryCommand(
                                status=_status(pb.Code.OK),
                                settings=client_settings(asked, self.config.retryMaxTimes, self.fifo_topics()),
                            )
                        )
                        if asked.HasField("publishing"):
                            for topic in asked.publishing.topics:
                                if topic.name not in groups:
                                    groups.add(topic.name)
                                    self._producers.setdefault(topic.name, []).append(out)
            finally:
                out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (command := await out.get()) is not None:
                yield command
        finally:
            reader.cancel()
            for group in groups:
                streams = self._producers.get(group, [])
                if out in streams:
                    streams.remove(out)
                if not streams:
                    self._producers.pop(group, None)

    def producers_of(self, group: str) -> int:
        """How many Telemetry streams of producers of ``group`` this broker holds."""
        return len(self._producers.get(group, ()))

    def relay_check(self, group: str, half: Message) -> bool:
        """Ask a producer of ``group`` connected here about a transaction (RocketMQ's check through the
        proxy: a Telemetry RecoverOrphanedTransactionCommand); False when none is connected here."""
        streams = self._producers.get(group)
        if not streams:
            return False
        streams.append(streams.pop(0))  # in turn
        txn = half.properties.get(TRANSACTION_ID, "")
        command = spb.RecoverOrphanedTransactionCommand(message=check_message(half), transaction_id=txn)
        streams[-1].put_nowait(spb.TelemetryCommand(recover_orphaned_transaction_command=command))
        return True

    async def EndTransaction(self, request: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        """COMMIT or ROLLBACK a transaction (brokers/transaction.py); a slave forwards it to its master.
        An unresolved answer to a check (resolution unspecified) leaves it to the next check."""
        if self.forwards_sends() and (
            answer := await self._forward("EndTransaction", request, context, spb.EndTransactionResponse, self.forwards_sends)
        ):
            return answer
        if not request.transaction_id.strip():
            return spb.EndTransactionResponse(status=_status(pb.Code.INVALID_TRANSACTION_ID, "transaction_id is blank"))
        resolution = _RESOLUTIONS.get(request.resolution)
        if resolution is None:
            return spb.EndTransactionResponse(status=_status(pb.Code.OK, "unresolved: checked again later"))
        try:
            await self.transactions.end(request.transaction_id, request.topic.name, resolution)
        except TxnRefused as exc:
            return spb.EndTransactionResponse(status=_status(pb.Code.INVALID_TRANSACTION_ID, str(exc)))
        except TxnNotStored as exc:
            return spb.EndTransactionResponse(status=_status(send_code(exc.status), f"not resolved: {exc}"))
        return spb.EndTransactionResponse(status=_OK)

    async def NotifyClientTermination(self, request, context) -> spb.NotifyClientTerminationResponse:
        return spb.NotifyClientTerminationResponse(status=_status(pb.Code.OK))

    # --- sending ----------------------------------------------------------------------------------

    async def SendMessage(self, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        return await self._send(request, context)

    async def _send(self, request: spb.SendMessageRequest, context, waited: bool = False) -> spb.SendMessageResponse:
        """Validate every message (a batch is refused whole on the first bad one, as the proxy does),
        store them in one call, answer one entry per message. Runs once per message sent: field reads
        are hoisted, a batch's topic is checked once, and OK entries share one status. A static
        topic's message goes to its logical queue's writable segment (logical.py): here, or handed on
        to the broker set that owns it; nothing awaits between that check and the store, so a seal
        (brokers/static.py) never misses a message. ``waited``: for a move's decision, once."""
        if self.forwards_sends() and (
            answer := await self._forward("SendMessage", request, context, spb.SendMessageResponse, self.forwards_sends)
        ):
            return answer  # (None: elected while the send waited; it is stored here)
        if not request.messages:
            return spb.SendMessageResponse(status=_status(pb.Code.BAD_REQUEST, "no message"))
        topics, next_queue = self.topics.topics, self._next_queue
        stored, ids = [], []
        txns: set[str] = set()
        checked_name, topic, accepted, static = None, None, frozenset(), None
        bases: list[int] | None = None  # static topics: per message, its logical offset less its physical one
        for m in request.messages:
            name = m.topic.name
            if name != checked_name:
                topic = topics.get(name)
                if topic is None:
                    return spb.SendMessageResponse(status=_status(pb.Code.TOPIC_NOT_FOUND, f"topic {name} not found"))
                if topic.writeQueueNums < 1 or not topic.perm & 2:
                    return spb.SendMessageResponse(status=_status(pb.Code.FORBIDDEN, f"topic {name} is not writeable"))
                checked_name, accepted = name, _SEND_ACCEPTS[topic.message_type]
                static = self.static.get(name)
            body = m.body
            if not body:
                return spb.SendMessageResponse(status=_status(pb.Code.MESSAGE_BODY_EMPTY))
            if len(body) > MAX_BODY_SIZE:
                return spb.SendMessageResponse(status=_status(pb.Code.MESSAGE_BODY_TOO_LARGE))
            sp = m.system_properties
            if sp.message_type not in accepted:  # the proxy's DefaultTopicMessageTypeValidator
                return _refused_type(name, topic.message_type, sp.message_type)
            user = m.user_properties
            props = dict(user) if user else {}
            props["UNIQ_KEY"] = message_id = sp.message_id
            if sp.HasField("tag"):
                props["TAGS"] = sp.tag
            if sp.keys:
                props["KEYS"] = " ".join(sp.keys)
            props["BORN_HOST"] = sp.born_host
            born = sp.born_timestamp
            group = sp.message_group
            if group:  # FIFO: every message of its group to one queue (brokers/fifo.py)
                try:
                    check_group(group)
                except IllegalGroup as exc:
                    return spb.SendMessageResponse(status=_status(pb.Code.ILLEGAL_MESSAGE_GROUP, str(exc)))
                props[SHARDING_KEY] = group
                queue_id = queue_of_group(group, topic.writeQueueNums if static is None else len(static.queues))
            else:
                queue_id = next(next_queue) % topic.writeQueueNums
            if static is not None:
                target = self.static.write_target(static, queue_id if group else None)
                if target is None:  # another broker set takes this logical queue's writes
                    lid = queue_id if group else queue_id % len(static.queues)
                    return await self.send_elsewhere(static.queues[lid].writable.broker_name, request, context)
                segment = target[1]
                if segment.logic_start is None:  # the old segment's end is being reported
                    if waited:
                        status = _status(pb.Code.INTERNAL_SERVER_ERROR, "the logical queue's move is not decided yet; retry")
                        return spb.SendMessageResponse(status=status)
                    await self.static.decided(name, target[0], DECIDE_WAIT_S)
                    return await self._send(request, context, waited=True)
                queue_id = segment.queue_id
                bases = bases if bases is not None else []
                bases.append(segment.logic_start - segment.phys_start)
            msg = Message(
                topic.topicName,
                queue_id,
                body,
                props,
                born_timestamp=born.seconds * 1000 + born.nanos // 1_000_000,
            )
            if static is not None and (
                sp.message_type == pb.MessageType.TRANSACTION or sp.HasField("delivery_timestamp") or DELAY in props
            ):
                return _conflict(
                    f"{name} is a static topic: it takes normal and FIFO messages (timer and transactional ones not yet)"
                )
            if sp.message_type == pb.MessageType.TRANSACTION:  # a half message until EndTransaction
                if group or sp.HasField("delivery_timestamp") or DELAY in props:
                    return _conflict("a transactional message has no message group, no delivery time and no delay level")
                if TRANSACTION_ID not in props:  # (with it: committed at an acting master, escaped here)
                    msg = into_half(msg, message_id)
                    txns.add(message_id)
            elif sp.HasField("delivery_timestamp") or DELAY in props:
                if group and DELAY in props:
                    return _conflict("a FIFO message has no delay level: it would leave its group's order")
                timed = self._timed(msg, sp.delivery_timestamp if sp.HasField("delivery_timestamp") else None)
                if isinstance(timed, spb.SendMessageResponse):
                    return timed  # refused: nothing of the request is stored
                msg = timed
            stored.append(msg)
            ids.append(message_id)
        if bases is None:
            results = await self.store.put_messages(stored)
        elif len(bases) != len(stored):
            detail = "a batch with a static topic's messages takes no other topic's"
            return spb.SendMessageResponse(status=_status(pb.Code.BAD_REQUEST, detail))
        else:
            writing = self.static.writing
            queues = [(msg.topic, msg.queue_id) for msg in stored if msg.topic == checked_name]
            writing.update(queues)
            try:
                results = await self.store.put_messages(stored)
            finally:
                writing.subtract(queues)
            results = [r._replace(queue_offset=r.queue_offset + base) for r, base in zip(results, bases, strict=True)]
        response = spb.SendMessageResponse()
        add = response.entries.add
        first_bad = None
        for message_id, result in zip(ids, results, strict=True):
            if result.status is PutMessageStatus.PUT_OK:
                if message_id in txns:  # the transaction id is the message id (RocketMQ's UNIQ_KEY)
                    add(status=_OK, message_id=message_id, transaction_id=message_id, offset=result.queue_offset)
                else:
                    add(status=_OK, message_id=message_id, offset=result.queue_offset)
                continue
            status = _status(send_code(result.status), result.detail)  # never OK: only PUT_OK maps to OK
            add(status=status, message_id=message_id, offset=max(0, result.queue_offset))
            if first_bad is None:
                first_bad = status
        response.status.CopyFrom(_OK if first_bad is None else first_bad)
        return response

    def _timed(self, msg: Message, at) -> Message | spb.SendMessageResponse:
        """A message with a delivery time or a 4.x delay level (brokers/timer.py,
        brokers/delay_levels.py): kept in the timer queue until due, or stored at once when due now,
        or when it went through a timer wheel already (``TIMER_OUT_MS``: escaped by another broker
        set's acting master, brokers/escape.py). A delay level wins over a delivery time (RocketMQ's
        rule); with useDelayLevel a delivery time is rounded up to a level. A time in the past is due
        now. Refused: a time beyond timerMaxDelaySec (ILLEGAL_DELIVERY_TIME), a level that is not a
        whole number (ILLEGAL_MESSAGE_PROPERTY_KEY)."""
        props = msg.properties
        asked = None if at is None else at.seconds * 1000 + at.nanos // 1_000_000
        if TIMER_OUT_MS in props:
            if asked is not None:
                msg.properties = {**props, TIMER_DELIVER_MS: str(asked)}
            return msg
        if not self.config.timerWheelEnable:
            return spb.SendMessageResponse(
                status=_status(pb.Code.NOT_IMPLEMENTED, "timer messages are off on this broker (timerWheelEnable=false)")
            )
        now, levels = now_ms(), self._delay_levels
        try:
            if DELAY in props:  # that long after now, whatever the delivery time says
                wait = level_delay_ms(level_of(props[DELAY]), levels)
                if wait is None:
                    return msg  # level 0 or less: no delay
                deliver_ms = due = now + wait
            else:
                deliver_ms, due = asked, delivery_due(asked, now, self.config.timerMaxDelaySec * 1000)
                if due is not None and self.config.useDelayLevel:
                    level = level_for(due - now, levels)
                    props = {**props, DELAY: str(level)}
                    deliver_ms = due = now + (level_delay_ms(level, levels) or 0)
        except TimerRefused as exc:
            return spb.SendMessageResponse(status=_status(pb.Code.ILLEGAL_DELIVERY_TIME, str(exc)))
        except ValueError as exc:  # the DELAY property
            return spb.SendMessageResponse(status=_status(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, str(exc)))
        msg.properties = {**props, TIMER_DELIVER_MS: str(deliver_ms)}
        return into_wheel(msg, due) if due is not None else msg


async def serve(
    config: BrokerConfig, store: MessageStore, topics: TopicConfigManager, meta: ConsumerMeta, metalog: MetaLog
) -> tuple[grpc.aio.Server, MessagingService]:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_BODY_SIZE + 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ]
    )
    service = MessagingService(config, store, topics, meta, metalog)
    rpc.add_MessagingServiceServicer_to_server(service, server)
    addr = f"{config.brokerIP1}:{config.grpcServerPort}"
    if server.add_insecure_port(addr) == 0:
        raise OSError(f"cannot listen on {addr}")
    await server.start()
    return server, service
