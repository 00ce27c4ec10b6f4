"""The broker's remoting edge (issue 36): RocketMQ's classic protocol for 4.x clients, over the same
broker core the gRPC edge serves (brokers/sending.py, brokers/consuming.py, brokers/transaction.py):
the same admission rules, store, quorum write, consumer offsets and special messages. The composition
root (brokers/broker.py) builds it with the services (brokers/services.py) and the ports below and registers its handlers
on the broker's remoting listener (server.py), beside the peer channel's.

Handlers, by area: sending.py (10, 310, 320), consumer.py (11, 14, 15, 29-33, 36), clients.py (34, 35,
38, 203, and the broker's 39 and 40 to clients), locks.py (41, 42), admin.py (mqadmin's and the
dashboard's reads: 21, 28, 201, 202, 208), query.py (QUERY_MESSAGE 12, from the store's index), and
END_TRANSACTION (37) here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand
from mqrules.remoting.headers import END_TRANSACTION_REQUEST, parse_header

from ..config import BrokerConfig
from ..core.timer import REAL_TOPIC
from ..core.transaction import Resolution, TxnRefused, end_answer
from ..services import BrokerServices
from ..store.message import Message, decode
from ..store.store import MessageStore
from ..topics import TopicConfigManager
from ..transaction import TxnNotStored
from .admin import AdminRequests
from .clients import ClientRegistry
from .consumer import ConsumerHandler
from .guard import AccessCheck, guarded
from .locks import AskReplicas, LockHandler, RebalanceLocks
from .query import QueryHandler
from .sending import PUT_CODES, SendingHandler
from .server import Connection, Handler

COMMIT, ROLLBACK = 0x8, 0xC  # MessageSysFlag.TRANSACTION_COMMIT_TYPE / TRANSACTION_ROLLBACK_TYPE
_RESOLUTIONS = {COMMIT: Resolution.COMMIT, ROLLBACK: Resolution.ROLLBACK}


@dataclass(frozen=True)
class RemotingPorts:
    """What the edge needs of the rest of the broker: ``writer()`` (the set's master: it stores),
    ``serving()`` (the master, or a slave acting for a dead one: its offsets count), and
    ``ask_replicas(code, body)`` (the lock quorum: the set's other live replicas' answers),
    ``runtime()`` (brokers/remoting/admin.py)."""

    writer: Callable[[], bool]
    serving: Callable[[], bool]
    ask_replicas: AskReplicas
    runtime: Callable[[], dict[str, str]] = dict  # GET_BROKER_RUNTIME_INFO's values the root knows


class RemotingEndpoint:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        services: BrokerServices,
        ports: RemotingPorts,
        access: AccessCheck | None = None,
    ):
        """``access``: with access control on, every client request is checked first (guard.py)."""
        sending, consuming, static = services.sending, services.consuming, services.static
        self.config, self.store, self.sending, self.transactions, self.ports = (
            config,
            store,
            sending,
            services.transactions,
            ports,
        )
        self.consuming = consuming
        self.clients = ClientRegistry(group_added=self._group_added)
        self.locks = RebalanceLocks()
        addr = (config.brokerIP1, config.listenPort)
        self.consumer = ConsumerHandler(
            consuming, sending, store, topics, self.clients, serving=ports.serving, writer=ports.writer
        )
        self._handlers: dict[int, Handler] = {
            **SendingHandler(sending, consuming, static, addr, ports.writer).handlers(),
            **self.consumer.handlers(),
            **self.clients.handlers(),
            **LockHandler(
                self.locks,
                ports.ask_replicas,
                strict=lambda: config.lockInStrictMode,
                quorum=lambda: config.totalReplicas // 2 + 1,
            ).handlers(),
            RequestCode.END_TRANSACTION: self.end_transaction,
            **AdminRequests(config, store, topics, consuming.meta, ports.runtime).handlers(),
            **QueryHandler(store).handlers(),
        }
        self._handlers = guarded(access, self._handlers)

    def handlers(self) -> dict[int, Handler]:
        return dict(self._handlers)

    async def close(self) -> None:
        await self.consumer.close()

    def _group_added(self, group: str) -> None:
        """A consumer group's first heartbeat here: on the master, its retry topic exists from now on
        (Java creates it at the heartbeat too: the consumer pulls it from its start)."""
        if self.ports.writer():
            self.consuming.ensure_topic("%RETRY%" + group)

    async def end_transaction(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """COMMIT (8) or ROLLBACK (12) of a half message, by its transaction id (the ``UNIQ_KEY`` the
        send answered as ``transactionId``); 0 (not decided: the producer's answer to a check that it
        cannot give yet) leaves it to the next check. Clients send it oneway; the reply is for tools."""
        h = parse_header(END_TRANSACTION_REQUEST, request.ext_fields)
        resolution = _RESOLUTIONS.get(int(h["commitOrRollback"]))  # type: ignore[arg-type]
        txn = str(h["transactionId"] or h["msgId"] or "")
        early = end_answer(txn, resolution)
        if early is not None:
            code = ResponseCode.SUCCESS if resolution is None and txn.strip() else ResponseCode.SYSTEM_ERROR
            return request.response(code, early.message)
        assert resolution is not None
        if self.sending.forwards():
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE, "this broker is a slave: end transactions at the master")
        topic = h["topic"]
        if not topic:  # a 4.x client names no topic: the half message at commitLogOffset does
            raw = await self.store.read_record(int(h["commitLogOffset"]))  # type: ignore[arg-type]
            half = decode(raw) if raw is not None else None
            topic = half.properties.get(REAL_TOPIC, "") if isinstance(half, Message) else ""
        try:
            await self.transactions.end(txn, str(topic), resolution)
        except TxnRefused as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except TxnNotStored as exc:
            return request.response(PUT_CODES.get(exc.status, ResponseCode.SYSTEM_ERROR), f"not resolved: {exc}")
        return request.response(ResponseCode.SUCCESS)
