"""The RocketMQ 5 client endpoint: gRPC ``MessagingService`` (docs/grpc-endpoint-notes.md), one protocol
edge of the broker. It translates this protocol's messages to and from the services every edge calls
(brokers/services.py: sending, consuming, the transaction index, static topics), which the
composition root (brokers/broker.py) builds and hands in, with one handler per area:

- routes and the client session (routes.py): QueryRoute, QueryAssignment, Heartbeat, Telemetry,
  NotifyClientTermination;
- sending (sending.py): SendMessage;
- receiving and acks (consumer.py): ReceiveMessage, AckMessage, ChangeInvisibleDuration, QueryOffset;
- transactions (transactions.py): EndTransaction.

``MessagingService`` is the servicer gRPC calls: each RPC is its handler's method. Every other call
answers the base servicer's UNIMPLEMENTED status, never a crash. What is gRPC's own stays here: the
producers' telemetry streams (the transaction checks reach them), the forwarder to the set's serving
broker, static topics' hops to other sets, and the escape bridge (an acting master's way out).
"""

from __future__ import annotations

import functools
import logging
import re
import time

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from ..clients_report import GrpcClients
from ..config import BrokerConfig
from ..metrics import Traffic
from ..services import BrokerServices
from ..tls import TlsMode, grpc_channel_credentials, grpc_server_credentials
from ..tls_front import GrpcFront
from ..topics import TopicConfigManager
from .consumer import ReceivingHandler
from .escape import EscapeBridge
from .forward import Forwarder
from .guard import AccessCheck, guarded
from .logical import StaticHops
from .producers import ProducerStreams
from .routes import RouteHandler
from .sending import SendingHandler
from .settings import MAX_BODY_SIZE
from .transactions import TransactionHandler

log = logging.getLogger("brokers.grpc")


@functools.cache
def _status_name(code: int) -> str:
    """A status code as the rpc latency's response_code: its lower-case name (``ok``), as remoting's."""
    try:
        return pb.Code.Name(code).lower()
    except ValueError:
        return str(code)


def _snake(rpc_name: str) -> str:
    """``SendMessage`` -> ``send_message``: the request_code label, in the remoting codes' style."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc_name).lower()


def _timed(traffic: Traffic, name: str, method):
    """A unary RPC, its latency counted as rocketmq_rpc_latency (protocol_type grpc, request_code the
    RPC's name, response_code the answer's status code)."""
    code_label = _snake(name)

    async def call(request, context):
        started = time.perf_counter()
        response = await method(request, context)
        status = _status_name(response.status.code) if response is not None else ""
        traffic.answered("grpc", code_label, status, (time.perf_counter() - started) * 1000)
        return response

    return call


def _timed_stream(traffic: Traffic, name: str, method):
    """A server-streaming RPC (ReceiveMessage: a long poll), timed from its call to its last answer."""

    code_label = _snake(name)

    async def call(request, context):
        started, status = time.perf_counter(), ""
        async for response in method(request, context):
            if response.HasField("status"):
                status = _status_name(response.status.code)
            yield response
        traffic.answered("grpc", code_label, status, (time.perf_counter() - started) * 1000, long_polling=True)

    return call


class MessagingService(rpc.MessagingServiceServicer):
    """The servicer: each RPC is bound to its area's handler at construction (a call costs no hop but
    its latency's count; Telemetry, a stream that lasts the client's session, is not timed)."""

    def __init__(
        self,
        routes: RouteHandler,
        sending: SendingHandler,
        receiving: ReceivingHandler,
        transactions: TransactionHandler,
        traffic: Traffic,
        access: AccessCheck | None = None,
    ):
        """``access``: with access control on, each RPC is refused before its handler runs unless the
        call is authenticated and authorized (guard.py); refusals are timed like any answer."""
        g = functools.partial(guarded, access)
        self.QueryRoute = _timed(traffic, "QueryRoute", g(routes.QueryRoute))
        self.QueryAssignment = _timed(traffic, "QueryAssignment", g(routes.QueryAssignment))
        self.Heartbeat = _timed(traffic, "Heartbeat", g(routes.Heartbeat))
        self.Telemetry = g(routes.Telemetry)
        self.NotifyClientTermination = _timed(traffic, "NotifyClientTermination", g(routes.NotifyClientTermination))
        self.SendMessage = _timed(traffic, "SendMessage", g(sending.SendMessage))
        self.ReceiveMessage = _timed_stream(traffic, "ReceiveMessage", g(receiving.ReceiveMessage))
        self.AckMessage = _timed(traffic, "AckMessage", g(receiving.AckMessage))
        self.ChangeInvisibleDuration = _timed(traffic, "ChangeInvisibleDuration", g(receiving.ChangeInvisibleDuration))
        self.QueryOffset = _timed(traffic, "QueryOffset", g(receiving.QueryOffset))
        self.EndTransaction = _timed(traffic, "EndTransaction", g(transactions.EndTransaction))


class GrpcEndpoint:
    """The gRPC edge. Public for the composition root: ``clients`` (those connected now),
    ``producers`` (the checks' LocalProducers),
    ``escape`` (an acting master's way out), ``master_changed()`` and ``close()``."""

    def __init__(
        self, config: BrokerConfig, services: BrokerServices, topics: TopicConfigManager, access: AccessCheck | None = None
    ):
        self.config = config
        http, static, consuming, sending = services.http, services.static, services.consuming, services.sending
        self.producers = ProducerStreams()
        tls = grpc_channel_credentials(config)  # to other brokers' endpoints, as this one serves (brokers/tls.py)
        self.escape = EscapeBridge(config.brokerName, http, services.traffic, tls)  # an acting master's way out (RIP-32)
        self.forwarder = Forwarder(config.brokerName, config.grpc_addr, http, tls)  # to this set's serving broker
        self.hops = StaticHops(config.grpc_addr, http, static, consuming)
        self.clients = GrpcClients()  # the clients connected now (the broker_status report's clients)
        self.servicer = MessagingService(
            RouteHandler(config, http, topics, static, self.producers, consuming.fifo_topics, self.clients),
            SendingHandler(sending, self.forwarder, self.hops, static),
            ReceivingHandler(config, consuming, topics, static, self.hops, self.forwarder, self.clients),
            TransactionHandler(services.transactions, self.forwarder, sending.forwards),
            services.traffic,
            access,
        )

    def master_changed(self) -> None:
        """The group has a new master: forwards waiting on the old one are given up for it."""
        self.forwarder.master_changed()

    async def close(self) -> None:
        await self.hops.close()
        await self.forwarder.close()
        await self.escape.close()


class GrpcServing:
    """The running gRPC server, and in permissive mode the front that shares its port (``stop``)."""

    def __init__(self, server: grpc.aio.Server, front: GrpcFront | None = None):
        self.server, self.front = server, front

    async def stop(self, grace: float | None = None) -> None:
        if self.front is not None:
            await self.front.stop()
        await self.server.stop(grace)


def _listen(server: grpc.aio.Server, config: BrokerConfig) -> GrpcFront | None:
    """grpcServerPort as tlsServerMode says (brokers/tls.py): plaintext, TLS, or both through a front
    that splices to two internal ports of 127.0.0.1 (brokers/tls_front.py)."""
    addr = f"{config.brokerIP1}:{config.grpcServerPort}"
    mode = TlsMode(config.tlsServerMode)
    if mode is TlsMode.DISABLED:
        bound = server.add_insecure_port(addr)
    elif mode is TlsMode.ENFORCING:
        bound = server.add_secure_port(addr, grpc_server_credentials(config))
    else:
        plain = server.add_insecure_port("127.0.0.1:0")
        secure = server.add_secure_port("127.0.0.1:0", grpc_server_credentials(config))
        if plain == 0 or secure == 0:
            raise OSError("cannot listen on 127.0.0.1 for the permissive front")
        return GrpcFront(config.brokerIP1, config.grpcServerPort, plain, secure)
    if bound == 0:
        raise OSError(f"cannot listen on {addr}")
    return None


async def serve(endpoint: GrpcEndpoint) -> GrpcServing:
    """Listen on grpcServerPort for ``endpoint``'s clients."""
    config = endpoint.config
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_BODY_SIZE + 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ]
    )
    rpc.add_MessagingServiceServicer_to_server(endpoint.servicer, server)
    front = _listen(server, config)
    await server.start()
    if front is not None:
        try:
            await front.start()
        except OSError:
            await server.stop(None)
            raise
    return GrpcServing(server, front)
