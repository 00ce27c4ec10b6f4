"""The broker's HA service: its role's side of the link, the quorum gate, and its water levels.

Classic master/slave (brokerRole, no controller): a master listens on haListenPort and ships its
log; a SYNC_MASTER makes sends wait for inSyncReplicas copies (reference §4); a slave copies its
master's log, serves reads, and refuses sends. Controller mode (role changes at run time) builds on
the same pieces.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..config import BrokerConfig
from ..store.store import MessageStore, PutMessageStatus
from .epoch import EPOCH_FILE_NAME, EpochEntry, EpochFile
from .master import HAServer, LinkTimings, MasterConnection
from .quorum import AckWaiters, BrokerRole, QuorumConfig, acked_replicas, ha_in_sync_count, need_ack_nums
from .slave import HAClient

log = logging.getLogger("brokers.ha")


def quorum_config(c: BrokerConfig) -> QuorumConfig:
    return QuorumConfig(c.inSyncReplicas, c.minInSyncReplicas, c.totalReplicas, c.enableAutoInSyncReplicas,
                        c.haMaxGapNotInSync, c.allAckInSyncStateSet, c.slaveTimeout)


def link_timings(c: BrokerConfig) -> LinkTimings:
    return LinkTimings(c.haTransferBatchSize, c.haSendHeartbeatInterval / 1000, c.haHousekeepingInterval / 1000)


class HAService:
    def __init__(self, config: BrokerConfig, store: MessageStore):
        self.config = config
        self.store = store
        self.role = BrokerRole(config.brokerRole)
        self.quorum = quorum_config(config)
        self.timings = link_timings(config)
        self.epochs = EpochFile(Path(config.storePathRootDir) / EPOCH_FILE_NAME)
        self.waiters = AckWaiters()
        self.server: HAServer | None = None
        self.client: HAClient | None = None
        self.master_ha_addr: str | None = config.haMasterAddress or None  # a slave's; else from the nameserver

    # --- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.role is BrokerRole.SLAVE:
            self.store.writable = False
            self.store.not_writable_reason = "this broker is a SLAVE"
            self.store.set_follow_max(False)
            self.client = HAClient(self.store, self.epochs, self.config.brokerId, lambda: self.master_ha_addr,
                                   self.timings, self.config.syncFromLastFile, self.config.asyncLearner)
            self.client.start()
        else:
            if not self.epochs.entries:  # classic mode has no controller epochs: one epoch from the start
                self.epochs.append(EpochEntry(1, self.store.min_offset))
            self.store.set_follow_max(True)
            self.server = HAServer(self.store, self.epochs, self.timings, self._on_ack)
            await self.server.start(self.config.brokerIP1, self.config.haListenPort)
            self.store.replicas = self if self.role is BrokerRole.SYNC_MASTER else None

    async def stop(self) -> None:
        self.store.replicas = None
        self.waiters.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        if self.server is not None:
            await self.server.stop()
        if self.client is not None:
            await self.client.stop()

    def on_master_ha_addr(self, addr: str | None) -> None:
        """The nameserver's registration answer names the master's HA address (reference §2.3)."""
        if not self.config.haMasterAddress and addr and addr != self.master_ha_addr:
            log.info("master HA address from the nameserver: %s", addr)
            self.master_ha_addr = addr

    # --- quorum (ReplicaGate) ---------------------------------------------------------------------

    def _acks(self) -> list[int]:
        if self.server is None:
            return []
        return [c.ack_offset for c in self.server.connections if c.ack_offset >= 0 and not c.async_learner]

    def precheck(self) -> tuple[PutMessageStatus | None, int]:
        in_sync = ha_in_sync_count(self.store.max_offset, self._acks(), self.quorum.ha_max_gap_not_in_sync)
        return need_ack_nums(self.quorum, self.role, controller_mode=False,
                             acting_master_mode=self.config.enableSlaveActingMaster, in_sync=in_sync)

    async def wait(self, next_offset: int, need_acks: int) -> PutMessageStatus:
        satisfied = acked_replicas(next_offset, self._acks()) >= need_acks
        return await self.waiters.wait(next_offset, need_acks, self.quorum.slave_timeout_ms / 1000, satisfied)

    def _on_ack(self, _conn: MasterConnection) -> None:
        if len(self.waiters):
            self.waiters.release(self._acks())

    # --- water levels -------------------------------------------------------------------------------

    def water_levels(self) -> dict:
        store = self.store
        report = {"brokerName": self.config.brokerName, "brokerId": self.config.brokerId, "role": self.role.value,
                  "masterEpoch": self.epochs.last_epoch(), "maxOffset": store.max_offset,
                  "confirmOffset": store.confirm_offset, "minOffset": store.min_offset, "slaves": []}
        if self.server is not None:
            report["slaves"] = sorted((c.water_level(False) for c in self.server.connections if c.slave_id is not None),
                                      key=lambda s: s["brokerId"])
        return report
