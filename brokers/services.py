"""The services every protocol edge calls, built once by the composition root (brokers/broker.py) and
handed to each edge: sending (brokers/sending.py), consuming (offsets, pop state, revive:
brokers/consuming.py), the transaction index (brokers/transaction.py), static topics' logical queues
(brokers/static.py) and the control plane's HTTP client they and the edges share. An edge (brokers/grpc,
brokers/remoting) only translates its protocol to and from them; neither builds nor owns one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from .config import BrokerConfig
from .consuming import ConsumeService, OffsetCommitted
from .meta import ConsumerMeta
from .metalog import MetaLog
from .metrics import Traffic
from .sending import SendService, WriteGate
from .static import Report, StaticQueues
from .store.store import MessageStore
from .tls import control_plane_context
from .topics import TopicConfigManager
from .transaction import Transactions

CONTROL_PLANE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ServicePorts:
    """What the services need of the rest of the broker.

    - ``gate``: the write gate (brokers/ha/gate.py ``WritePermission``); with ``acting()`` (this broker
      acts for a dead master) it decides whether sends are stored here or go to the master;
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


class BrokerServices:
    """``http`` (the control plane, with the broker's token), ``static``, ``consuming``, ``sending``,
    ``transactions``; ``close()`` at the broker's stop, after its edges."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        meta: ConsumerMeta,
        metalog: MetaLog,
        ports: ServicePorts,
        traffic: Traffic,
    ):
        self.traffic = traffic  # what the edges count as they serve (brokers/metrics.py)
        self.http = httpx.AsyncClient(
            base_url=config.controlPlaneUrl,
            timeout=CONTROL_PLANE_TIMEOUT_S,
            headers={"Authorization": f"Bearer {config.token}"},
            verify=control_plane_context(config) or True,  # https: the control plane's CA (controlPlaneCaPath)
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
            traffic=traffic,
        )
        self.sending = SendService(config, store, topics, self.static, ports.gate, ports.acting, traffic)
        self.transactions = Transactions(store, config.transactionTimeOut, config.transactionCheckMax)

    async def close(self) -> None:
        await self.static.close()
        await self.http.aclose()
