"""Consumer-offset commits reported to the control plane's audit event store (docs/audits.md)."""

from __future__ import annotations

import asyncio
import logging
import time

from ..config import BrokerConfig
from ..core.roles import BrokerRole
from ..ha.service import HAService
from ..meta import ConsumerMeta
from ..store.store import MessageStore
from .nameserver import ControlPlane

log = logging.getLogger("brokers")

OFFSET_REPORT_INTERVAL_S = 1.0
OFFSET_REPORT_MAX_EVENTS = 5000  # per frame (the control plane takes at most 10,000)


class OffsetReporter:
    """Reports consumer-offset commits to the control plane's audit event store (docs/audits.md):
    every second the offsets that changed (source client_commit), and, when this broker
    starts serving as master at an epoch, its whole table once (master_takeover), so a failover onto
    stale offsets shows at once and with its exact size. Pending reports are keyed by queue and
    source, the latest offset winning: while the control plane is unreachable they stay bounded by
    the number of queues, only intermediate values of a queue are lost, and a correction, a takeover
    or a pre-online adoption is never hidden by a client commit that followed it."""

    def __init__(self, config: BrokerConfig, link: ControlPlane, ha: HAService, store: MessageStore, meta: ConsumerMeta):
        self.config, self.link, self.ha, self.store, self.meta = config, link, ha, store, meta
        self.pending: dict[tuple[str, str, int, str], tuple[int, int]] = {}  # (queue, source) -> (offset, ms)
        self._served_epoch: int | None = None

    def committed(self, group: str, topic: str, queue_id: int, offset: int, source: str = "client_commit") -> None:
        self.pending[(group, topic, queue_id, source)] = (offset, int(time.time() * 1000))

    def whole_table(self, source: str) -> None:
        """Every offset this broker holds, once (a takeover, a pre-online adoption)."""
        now = int(time.time() * 1000)
        for key, offset in self.meta.offsets.offsets.items():
            group, topic, queue_id = key.rsplit("@", 2)
            self.pending[(group, topic, int(queue_id), source)] = (offset, now)

    def _note_takeover(self) -> None:
        epoch = self.ha.epochs.last_epoch()
        if self.ha.role is BrokerRole.SLAVE or not self.store.writable or epoch == self._served_epoch:
            return
        self._served_epoch = epoch
        self.whole_table("master_takeover")

    async def run(self) -> None:
        while True:
            await asyncio.sleep(OFFSET_REPORT_INTERVAL_S)
            self._note_takeover()
            if not self.pending or not self.link.connected.is_set():
                continue
            sending, self.pending = self.pending, {}
            try:
                await self._send(sending)
            except Exception as exc:  # keep what was not sent, unless a newer offset came meanwhile
                for queue, value in sending.items():
                    self.pending.setdefault(queue, value)
                log.info("offset report failed (%s); retrying with the next one", exc)

    async def _send(self, sending: dict[tuple[str, str, int, str], tuple[int, int]]) -> None:
        c, ha, store = self.config, self.ha, self.store
        head = {
            "clusterName": c.brokerClusterName,
            "brokerName": c.brokerName,
            "brokerId": ha.broker_id,
            "role": ha.role.value,
            "masterEpoch": ha.epochs.last_epoch(),
        }
        dv = self.meta.data_version
        head["dataVersion"] = {"stateVersion": dv.state_version, "counter": dv.counter, "timestamp": dv.timestamp}
        events = [
            {
                "consumerGroup": g,
                "topic": t,
                "queueId": q,
                "offset": off,
                "source": src,
                "timestampMs": ms,
                "queueMaxOffset": store.max_queue_offset(t, q),
            }
            for (g, t, q, src), (off, ms) in sending.items()
        ]
        for start in range(0, len(events), OFFSET_REPORT_MAX_EVENTS):
            await self.link.call("offset_events", {**head, "events": events[start : start + OFFSET_REPORT_MAX_EVENTS]})
