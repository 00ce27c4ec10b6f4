"""``MessagingService`` for the official RocketMQ 5 clients: QueryRoute, QueryAssignment, Heartbeat,
Telemetry (settings exchange), SendMessage, NotifyClientTermination here; ReceiveMessage, AckMessage and
ChangeInvisibleDuration in consumer.py. Every other call answers the base servicer's UNIMPLEMENTED
status, never a crash."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

import grpc
import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from ..config import BrokerConfig
from ..meta import ConsumerMeta
from ..metalog import MetaLog
from ..store.message import Message
from ..store.store import MessageStore, PutMessageStatus
from ..topics import TopicConfigManager
from .clients import MULTI_ADDRESS_CLIENTS, ONE_REPLICA_PER_QUEUE_CLIENTS, client_language
from .codes import permission, send_code
from .consumer import ConsumerSide
from .forward import Forwarder, NoServingBroker, ServeHere
from .settings import MAX_BODY_SIZE, client_settings

log = logging.getLogger("brokers.grpc")

ROUTE_TIMEOUT_S = 3.0


def _status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


_OK = _status(pb.Code.OK)  # copied into each entry that carries it (protobuf messages are never shared)


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
        # Whether a send goes to the group's master instead (a slave, or a broker without a role yet):
        # the broker decides (brokers/broker.py); by default nothing is forwarded.
        self.forwards_sends: Callable[[], bool] = lambda: False

    async def close(self) -> None:
        await self.forwarder.close()
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
                        accept_message_types=[pb.MessageType.NORMAL],
                    )
                )
        return spb.QueryRouteResponse(status=_status(pb.Code.OK), message_queues=queues)

    # --- client session ---------------------------------------------------------------------------

    async def Heartbeat(self, request, context) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=_status(pb.Code.OK))

    async def Telemetry(self, request_iterator, context):
        """Settings exchange: every settings command is answered at once with an OK status and the
        settings RocketMQ's proxy would answer (settings.py)."""
        async for command in request_iterator:
            if command.HasField("settings"):
                settings = client_settings(command.settings, self.config.retryMaxTimes)
                yield spb.TelemetryCommand(status=_status(pb.Code.OK), settings=settings)

    async def NotifyClientTermination(self, request, context) -> spb.NotifyClientTerminationResponse:
        return spb.NotifyClientTerminationResponse(status=_status(pb.Code.OK))

    # --- sending ----------------------------------------------------------------------------------

    async def SendMessage(self, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        """Validate every message (a batch is refused whole on the first bad one, as the proxy does),
        store them in one call, answer one entry per message. Runs once per message sent: field reads
        are hoisted, a batch's topic is checked once, and OK entries share one status."""
        if self.forwards_sends():
            try:
                return await self.forwarder.unary("SendMessage", request, context, self.forwards_sends)
            except NoServingBroker as exc:
                return spb.SendMessageResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
            except ServeHere:
                pass  # elected while the send waited: it is stored here
        if not request.messages:
            return spb.SendMessageResponse(status=_status(pb.Code.BAD_REQUEST, "no message"))
        topics, next_queue = self.topics.topics, self._next_queue
        stored, ids = [], []
        checked_name, topic = None, None
        for m in request.messages:
            name = m.topic.name
            if name != checked_name:
                topic = topics.get(name)
                if topic is None:
                    return spb.SendMessageResponse(status=_status(pb.Code.TOPIC_NOT_FOUND, f"topic {name} not found"))
                if topic.writeQueueNums < 1 or not topic.perm & 2:
                    return spb.SendMessageResponse(status=_status(pb.Code.FORBIDDEN, f"topic {name} is not writeable"))
                checked_name = name
            body = m.body
            if not body:
                return spb.SendMessageResponse(status=_status(pb.Code.MESSAGE_BODY_EMPTY))
            if len(body) > MAX_BODY_SIZE:
                return spb.SendMessageResponse(status=_status(pb.Code.MESSAGE_BODY_TOO_LARGE))
            sp = m.system_properties
            user = m.user_properties
            props = dict(user) if user else {}
            props["UNIQ_KEY"] = message_id = sp.message_id
            if sp.HasField("tag"):
                props["TAGS"] = sp.tag
            if sp.keys:
                props["KEYS"] = " ".join(sp.keys)
            props["BORN_HOST"] = sp.born_host
            born = sp.born_timestamp
            stored.append(
                Message(
                    topic.topicName,
                    next(next_queue) % topic.writeQueueNums,
                    body,
                    props,
                    born_timestamp=born.seconds * 1000 + born.nanos // 1_000_000,
                )
            )
            ids.append(message_id)
        results = await self.store.put_messages(stored)
        response = spb.SendMessageResponse()
        add = response.entries.add
        first_bad = None
        for message_id, result in zip(ids, results, strict=True):
            if result.status is PutMessageStatus.PUT_OK:
                add(status=_OK, message_id=message_id, offset=result.queue_offset)
                continue
            status = _status(send_code(result.status), result.detail)  # never OK: only PUT_OK maps to OK
            add(status=status, message_id=message_id, offset=max(0, result.queue_offset))
            if first_bad is None:
                first_bad = status
        response.status.CopyFrom(_OK if first_bad is None else first_bad)
        return response


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
