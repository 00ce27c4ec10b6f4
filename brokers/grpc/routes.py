"""Routes and the client session for the official RocketMQ 5 clients: QueryRoute and QueryAssignment
(the nameserver's route, with the addresses each client can use, clients.py; a static topic's logical
queues, each on its owner), Heartbeat, NotifyClientTermination, and Telemetry (the settings exchange,
settings.py; a producer's stream is kept for transaction checks, producers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from mqrules.topic_attributes import DEFAULT_MESSAGE_TYPE, TopicMessageType, accepted_message_types

from ..clients_report import Caller, GrpcClients, caller_of
from ..config import BrokerConfig
from ..static import StaticQueues
from ..topics import TopicConfigManager
from .clients import MULTI_ADDRESS_CLIENTS, ONE_REPLICA_PER_QUEUE_CLIENTS, client_language
from .codes import permission, status
from .producers import ProducerStreams
from .settings import CONSUMERS, client_settings

# Per topic message type (message.type): what its route's queues accept; computed once.
_ROUTE_ACCEPTS = {t: [pb.MessageType.Value(a) for a in accepted_message_types(t)] for t in TopicMessageType}


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


class RouteHandler:
    """``fifo_topics()``: the topics whose receives are orderly (a consumer subscribed to one is told so)."""

    def __init__(
        self,
        config: BrokerConfig,
        http: httpx.AsyncClient,
        topics: TopicConfigManager,
        static: StaticQueues,
        producers: ProducerStreams,
        fifo_topics: Callable[[], Collection[str]],
        clients: GrpcClients,
    ):
        """``clients``: the connected clients, as their Heartbeat, Telemetry and termination tell."""
        self.config, self.http, self.topics, self.static = config, http, topics, static
        self.producers, self.fifo_topics = producers, fifo_topics
        self.clients = clients

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
            r = await self.http.get(f"/api/v1/nameserver/routes/{topic}")
        except httpx.HTTPError as exc:
            return spb.QueryRouteResponse(status=status(pb.Code.INTERNAL_SERVER_ERROR, f"nameserver unreachable: {exc}"))
        if r.status_code == 404:
            return spb.QueryRouteResponse(status=status(pb.Code.TOPIC_NOT_FOUND, f"no route for topic {topic}"))
        if r.status_code != 200:
            return spb.QueryRouteResponse(status=status(pb.Code.INTERNAL_SERVER_ERROR, r.text[:200]))
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
        return spb.QueryRouteResponse(status=status(pb.Code.OK), message_queues=queues)

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
        return spb.QueryRouteResponse(status=status(pb.Code.OK), message_queues=queues)

    async def Heartbeat(self, request, context) -> spb.HeartbeatResponse:
        consumer = request.client_type in CONSUMERS
        self.clients.heartbeat(caller_of(context), request.group.name, consumer)
        return spb.HeartbeatResponse(status=status(pb.Code.OK))

    def _settings_heard(self, caller: Caller, asked: pb.Settings) -> None:
        subscriptions = [
            {
                "topic": e.topic.name,
                "expression": e.expression.expression or "*",
                "type": "SQL92" if e.expression.type == pb.FilterType.SQL else "TAG",
            }
            for e in asked.subscription.subscriptions
        ]
        group = asked.subscription.group.name if asked.HasField("subscription") else ""
        ua = asked.user_agent
        known = ua.language != pb.Language.LANGUAGE_UNSPECIFIED and ua.language in pb.Language.values()
        agent = (pb.Language.Name(ua.language), ua.version) if known else None
        self.clients.settings(caller, [t.name for t in asked.publishing.topics], group, subscriptions, agent)

    async def Telemetry(self, request_iterator, context):
        """Settings exchange: every settings command is answered at once with an OK status and the
        settings RocketMQ's proxy would answer (settings.py). A producer's stream is kept under each
        topic it publishes to (its producer group in gRPC), so that a transaction check can reach it
        (producers.py; which broker of the set relays it: brokers/transaction_check.py)."""
        out: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        groups: set[str] = set()
        caller = caller_of(context)
        self.clients.stream_opened(caller)

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if command.HasField("settings"):
                        asked = command.settings
                        self._settings_heard(caller, asked)
                        out.put_nowait(
                            spb.TelemetryCommand(
                                status=status(pb.Code.OK),
                                settings=client_settings(asked, self.config.retryMaxTimes, self.fifo_topics()),
                            )
                        )
                        if asked.HasField("publishing"):
                            for topic in asked.publishing.topics:
                                if topic.name not in groups:
                                    groups.add(topic.name)
                                    self.producers.add(topic.name, out)
            finally:
                out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (command := await out.get()) is not None:
                yield command
        finally:
            reader.cancel()
            for group in groups:
                self.producers.remove(group, out)
            self.clients.stream_closed(caller.client_id)  # gone with its stream (a live client opens another)

    async def NotifyClientTermination(self, request, context) -> spb.NotifyClientTerminationResponse:
        self.clients.terminated(caller_of(context).client_id)
        return spb.NotifyClientTerminationResponse(status=status(pb.Code.OK))
