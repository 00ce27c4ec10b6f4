"""The RocketMQ 5 client endpoint: gRPC ``MessagingService`` (docs/grpc-endpoint-notes.md), one protocol
edge of the broker. ``GrpcEndpoint`` builds the services every edge calls (sending, consuming, the
transaction index; brokers/sending.py, brokers/consuming.py, brokers/transaction.py) and the handlers
that translate this protocol's messages to and from them, one per area:

- routes and the client session (routes.py): QueryRoute, QueryAssignment, Heartbeat, Telemetry,
  NotifyClientTermination;
- sending (sending.py): SendMessage;
- receiving and acks (consumer.py): ReceiveMessage, AckMessage, ChangeInvisibleDuration, QueryOffset;
- transactions (transactions.py): EndTransaction.

``MessagingService`` is the servicer gRPC calls: each RPC is its handler's method. Every other call
answers the base servicer's UNIMPLEMENTED status, never a crash. What the edge needs of the rest of
the broker comes through its constructor (``EndpointPorts``), from the composition root
(brokers/broker.py), which uses the endpoint's public methods in turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from ..config import BrokerConfig
from ..consuming import ConsumeService, OffsetCommitted
from ..meta import ConsumerMeta
from ..metalog import MetaLog
from ..pop import PopState
from ..sending import SendService, WriteGate
from ..static import Report, StaticQueues
from ..store.store import MessageStore
from ..topics import TopicConfigManager
from ..transaction import Transactions
from .consumer import ReceivingHandler
from .escape import EscapeBridge
from .forward import Forwarder
from .logical import StaticHops
from .producers import ProducerStreams
from .routes import RouteHandler
from .sending import SendingHandler
from .settings import MAX_BODY_SIZE
from .transactions import TransactionHandler

log = logging.getLogger("brokers.grpc")

ROUTE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class EndpointPorts:
    """What the edge needs of the rest of the broker.

    - ``gate``: the write gate (brokers/ha/gate.py ``WritePermission``); with ``acting()`` (this broker
      acts for its set's dead master) it says whether sends go to the master (brokers/core/admission.py);
    - ``topics_changed()``: a retry or DLQ topic was created (the broker re-registers);
    - ``offset_committed(group, topic, queueId, offset, source)``: the audit's offset report;
    - ``report_sealed(sealed)``: a static topic's sealed segment end (the static_topic_sealed frame),
      ``may_seal()``: whether this broker seals (the master).
    """

    gate: WriteGate
    acting: Callable[[], bool]
    topics_changed: Callable[[], None] | None = None
    offset_committed: OffsetCommitted | None = None
    report_sealed: Report | None = None
    may_seal: Callable[[], bool] = lambda: False


class MessagingService(rpc.MessagingServiceServicer):
    """The servicer: each RPC is bound to its area's handler at construction (a call costs no hop)."""

    def __init__(
        self, routes: RouteHandler, sending: SendingHandler, receiving: ReceivingHandler, transactions: TransactionHandler
    ):
        self.QueryRoute = routes.QueryRoute
        self.QueryAssignment = routes.QueryAssignment
        self.Heartbeat = routes.Heartbeat
        self.Telemetry = routes.Telemetry
        self.NotifyClientTermination = routes.NotifyClientTermination
        self.SendMessage = sending.SendMessage
        self.ReceiveMessage = receiving.ReceiveMessage
        self.AckMessage = receiving.AckMessage
        self.ChangeInvisibleDuration = receiving.ChangeInvisibleDuration
        self.QueryOffset = receiving.QueryOffset
        self.EndTransaction = transactions.EndTransaction


class GrpcEndpoint:
    """The gRPC edge and the services it serves clients with. Public for the composition root:
    ``transactions`` (the checks, pre-online), ``producers`` (the checks' LocalProducers), ``static``
    (mappings pushed or repeated by the control plane), ``escape`` (an acting master's way out),
    ``consuming`` (offsets, resets: brokers/admin.py), and the methods below."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        meta: ConsumerMeta,
        metalog: MetaLog,
        ports: EndpointPorts,
    ):
        self.config = config
        self._http = httpx.AsyncClient(
            base_url=config.controlPlaneUrl, timeout=ROUTE_TIMEOUT_S, headers={"Authorization": f"Bearer {config.token}"}
        )
        static_path = Path(config.storePathRootDir) / "config" / "staticTopics.json"
        self.static = StaticQueues(
            config.brokerName, store.max_queue_offset, static_path, report=ports.report_sealed, may_seal=ports.may_seal
        )
        self.consuming = ConsumeService(
            config,
            store,
            topics,
            meta,
            metalog,
            self.static,
            topics_changed=ports.topics_changed,
            offset_committed=ports.offset_committed,
        )
        self.sending = SendService(config, store, topics, self.static, ports.gate, ports.acting)
        self.transactions = Transactions(store, config.transactionTimeOut, config.transactionCheckMax)
        self.producers = ProducerStreams()
        self.escape = EscapeBridge(config.brokerName, self._http)  # an acting master's way out (RIP-32)
        self.forwarder = Forwarder(config.brokerName, config.grpc_addr, self._http)  # to this set's serving broker
        self.hops = StaticHops(config.grpc_addr, self._http, self.static, self.consuming)
        self.servicer = MessagingService(
            RouteHandler(config, self._http, topics, self.static, self.producers, self.consuming.fifo_topics),
            SendingHandler(self.sending, self.forwarder, self.hops, self.static),
            ReceivingHandler(config, self.consuming, topics, self.static, self.hops, self.forwarder),
            TransactionHandler(self.transactions, self.forwarder, self.sending.forwards),
        )

    @property
    def pop(self) -> PopState:
        return self.consuming.pop

    async def revive_forever(self) -> None:
        """The revive loop (brokers/consuming.py): run it as a task of the broker's."""
        await self.consuming.revive_forever()

    async def correct_overflows(self) -> None:
        """At a takeover: offsets beyond their queue's end corrected (brokers/consuming.py)."""
        await self.consuming.correct_overflows()

    def persist_offsets(self) -> None:
        """The offset table follows the pop state, kept on disk (at a stop)."""
        self.consuming.persist_offsets()

    def master_changed(self) -> None:
        """The group has a new master: forwards waiting on the old one are given up for it."""
        self.forwarder.master_changed()

    # (brokers/admin.py: the operator's offsets and resets)
    async def first_offset(self, topic: str, queue_id: int, end: int) -> int:
        return await self.consuming.first_offset(topic, queue_id, end)

    async def search_offset(self, topic: str, queue_id: int, wanted: int) -> int:
        return await self.consuming.search_offset(topic, queue_id, wanted)

    async def reset_queue(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None:
        await self.consuming.reset_queue(group, topic, queue_id, offset, source)

    async def close(self) -> None:
        await self.hops.close()
        await self.static.close()
        await self.forwarder.close()
        await self.escape.close()
        await self._http.aclose()


async def serve(endpoint: GrpcEndpoint) -> grpc.aio.Server:
    """Listen on grpcServerPort for ``endpoint``'s clients."""
    config = endpoint.config
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_BODY_SIZE + 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ]
    )
    rpc.add_MessagingServiceServicer_to_server(endpoint.servicer, server)
    addr = f"{config.brokerIP1}:{config.grpcServerPort}"
    if server.add_insecure_port(addr) == 0:
        raise OSError(f"cannot listen on {addr}")
    await server.start()
    return server
