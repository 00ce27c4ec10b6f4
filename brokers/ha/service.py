"""The broker's HA service: its role's side of the link, the quorum gate, and its water levels.

Classic master/slave (brokerRole, no controller): a master listens on haListenPort and ships its
log; a SYNC_MASTER makes sends wait for inSyncReplicas copies (reference §4); a slave copies its
master's log, serves reads, and refuses sends. Controller mode (role changes at run time) builds on
the same pieces.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ..config import BrokerConfig
from ..store.store import MessageStore, PutMessageStatus
from ..tls import replication_client_context, replication_server_context, same_group
from .epoch import EPOCH_FILE_NAME, EpochEntry, EpochFile
from .gate import WritePermission
from .master import HAServer, LinkTimings, MasterConnection
from .quorum import (
    ALL_ACK_IN_SYNC_STATE_SET,
    AckWaiters,
    BrokerRole,
    QuorumConfig,
    acked_replicas,
    ha_in_sync_count,
    need_ack_nums,
    slave_in_sync,
)
from .slave import HAClient

log = logging.getLogger("brokers.ha")


def quorum_config(c: BrokerConfig) -> QuorumConfig:
    return QuorumConfig(
        c.inSyncReplicas,
        c.minInSyncReplicas,
        c.totalReplicas,
        c.enableAutoInSyncReplicas,
        c.haMaxGapNotInSync,
        c.allAckInSyncStateSet,
        c.slaveTimeout,
    )


def link_timings(c: BrokerConfig) -> LinkTimings:
    return LinkTimings(c.haTransferBatchSize, c.haSendHeartbeatInterval / 1000, c.haHousekeepingInterval / 1000)


class HAService:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        permission: WritePermission,
        *,
        on_expand: Callable[[int], None] | None = None,
        on_slave_gone: Callable[[int], None] | None = None,
        alive_in_group: Callable[[], int | None] | None = None,
    ):
        """``permission``: the write gate ``store`` was built with; this service feeds it the role.
        Controller mode: ``on_expand(slave_id)`` when a slave qualifies for the SyncStateSet,
        ``on_slave_gone(slave_id)`` when a member's link closed (the replicas manager proposes the
        change). Slave-acting-master (§5.1): ``alive_in_group()``, the live members of the group
        (aliveReplicaNumInGroup; None: not known yet)."""
        self.config = config
        self.store = store
        self.role = BrokerRole(config.brokerRole)
        self.permission = permission
        self.quorum = quorum_config(config)
        self.timings = link_timings(config)
        self.epochs = EpochFile(Path(config.storePathRootDir) / EPOCH_FILE_NAME)
        self.waiters = AckWaiters()
        self.server: HAServer | None = None
        self.client: HAClient | None = None
        self.master_ha_addr: str | None = config.haMasterAddress or None  # a slave's; else from the nameserver
        # Controller mode (reference §2.1-2.3): roles change at run time; the SyncStateSet is the
        # controller's, widened by a proposal in flight (#5663).
        self.controller_mode = config.enableControllerMode
        self.broker_id = config.brokerId  # the controller id in controller mode
        self.sync_state_set: set[int] = set()
        self.proposed_sync_state_set: set[int] | None = None
        self._on_expand = on_expand
        self._on_slave_gone = on_slave_gone
        self._alive_in_group = alive_in_group
        # tlsReplicationEnable: mutual TLS with the cluster CA on the link (brokers/tls.py)
        self.tls_client = replication_client_context(config)

    # --- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self.permission.update(role=self.role)
        if self.controller_mode:  # fenced until the controller gives a role (brokers/control/replicas.py)
            self.store.set_follow_max(False)
            return
        if self.role is BrokerRole.SLAVE:
            self.store.set_follow_max(False)
            self.client = HAClient(
                self.store,
                self.epochs,
                self.config.brokerId,
                lambda: self.master_ha_addr,
                self.timings,
                self.config.syncFromLastFile,
                self.config.asyncLearner,
                tls=self.tls_client,
            )
            self.client.start()
        else:
            if not self.epochs.entries:  # classic mode has no controller epochs: one epoch from the start
                self.epochs.append(EpochEntry(1, self.store.min_offset))
            self.store.set_follow_max(True)
            await self._serve_slaves()
            self.store.replicas = self if self.role is BrokerRole.SYNC_MASTER else None

    async def _serve_slaves(self) -> None:
        tls, admit = None, None
        if self.config.tlsReplicationEnable:
            tls = replication_server_context(self.config)
            admit = partial(same_group, cluster=self.config.brokerClusterName, broker_name=self.config.brokerName)
        self.server = HAServer(self.store, self.epochs, self.timings, self._on_ack, tls=tls, admit=admit)
        await self.server.start(self.config.brokerIP1, self.config.haListenPort)

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

    # --- controller mode: role changes (reference §2.3) ------------------------------------------

    async def change_to_master(self, epoch: int, sync_state_set: set[int]) -> None:
        """Become master at ``epoch``: stop copying, cut a torn tail, open the epoch, serve slaves."""
        if epoch < self.epochs.last_epoch():
            raise ValueError(f"master epoch {epoch} is older than this replica's last epoch {self.epochs.last_epoch()}")
        if self.client is not None:
            await self.client.stop()
            self.client = None
        # A copy cut mid-record (§2.3 truncateInvalidMsg), judged on the log as it is once every write
        # the copy queued is done: the epoch below must start where this master's first byte will go.
        if await self.store.cut_partial_record():
            self.epochs.truncate_suffix_by_offset(self.store.max_offset + 1)
        if self.epochs.last_epoch() >= epoch:
            self.epochs.truncate_suffix_by_epoch(epoch)
        # An epoch that never got a byte cannot be followed by one starting at the same offset.
        self.epochs.truncate_suffix_by_offset(self.store.max_offset)
        self.epochs.append(EpochEntry(epoch, self.store.max_offset))
        self.role = BrokerRole.SYNC_MASTER
        self.set_sync_state_set(sync_state_set)
        if self.server is None:
            await self._serve_slaves()
        self.store.replicas = self
        self.permission.update(role=self.role)  # last: sends wait for replicas from the first one

    async def change_to_slave(self) -> None:
        """Follow the master (its HA address comes from the nameserver); stop serving slaves."""
        self.role = BrokerRole.SLAVE
        self.permission.update(role=self.role)  # first: no send may start while the role changes
        self.store.replicas = None
        self.waiters.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.sync_state_set, self.proposed_sync_state_set = set(), None
        if self.server is not None:
            await self.server.stop()
            self.server = None
        self.store.set_follow_max(False)
        if self.client is not None:
            await self.client.stop()
        self.master_ha_addr = self.config.haMasterAddress or None
        self.client = HAClient(
            self.store,
            self.epochs,
            self.broker_id,
            lambda: self.master_ha_addr,
            self.timings,
            self.config.syncFromLastFile,
            self.config.asyncLearner,
            tls=self.tls_client,
        )
        self.client.start()

    def config_changed(self) -> None:
        """An operator changed quorum settings (update_broker_config, brokers/admin.py): the next send
        counts with them (a send already waiting keeps the count it started with); a controller-mode
        master follows allAckInSyncStateSet at once (its confirm offset)."""
        self.quorum = quorum_config(self.config)
        self._update_confirm_offset()

    def set_sync_state_set(self, members: set[int]) -> None:
        """Apply a controller-confirmed SyncStateSet; ends a proposal in flight (§2.2)."""
        self.sync_state_set = set(members)
        self.proposed_sync_state_set = None
        self._update_confirm_offset()
        self._release_waiters()

    def propose_sync_state_set(self, proposal: set[int] | None) -> None:
        """A SyncStateSet change in flight: counted with the old set until the controller confirms it
        (``set_sync_state_set``, #5663); None: the proposal was given up."""
        self.proposed_sync_state_set = proposal

    def effective_sync_state_set(self) -> set[int]:
        if self.proposed_sync_state_set is None:
            return set(self.sync_state_set)
        return self.sync_state_set | self.proposed_sync_state_set

    def _update_confirm_offset(self) -> None:
        """§2.6 on a controller-mode master."""
        if not self.controller_mode or self.role is BrokerRole.SLAVE:
            return
        members = self.effective_sync_state_set()
        if len(members) <= 1 or not self.quorum.all_ack_in_sync_state_set:
            self.store.set_follow_max(True)
            return
        self.store.set_follow_max(False)
        acks = self._member_acks(members)
        if any(a is None for a in acks.values()):
            return  # a member without a link: unchanged (#6662)
        live = [a for a in acks.values() if a and a > 0]  # members that have not acked yet are ignored (#6728)
        self.store.set_confirm_offset(min([self.store.max_offset, *live]))

    def _member_acks(self, members: set[int]) -> dict[int, int | None]:
        by_id = {c.slave_id: c.ack_offset for c in (self.server.connections if self.server else ()) if c.slave_id is not None}
        return {m: by_id.get(m) for m in members if m != self.broker_id}

    # --- quorum (ReplicaGate) ---------------------------------------------------------------------

    def _acks(self) -> list[int]:
        if self.server is None:
            return []
        return [c.ack_offset for c in self.server.connections if c.ack_offset >= 0 and not c.async_learner]

    def precheck(self) -> tuple[PutMessageStatus | None, int]:
        if self.controller_mode:
            return need_ack_nums(
                self.quorum,
                self.role,
                controller_mode=True,
                acting_master_mode=False,
                in_sync=max(len(self.sync_state_set), len(self.proposed_sync_state_set or ())),
            )
        in_sync = ha_in_sync_count(self.store.max_offset, self._acks(), self.quorum.ha_max_gap_not_in_sync)
        return need_ack_nums(
            self.quorum,
            self.role,
            controller_mode=False,
            acting_master_mode=self.config.enableSlaveActingMaster,
            in_sync=in_sync,
            alive_in_group=self._alive_in_group() if self._alive_in_group is not None else None,
        )

    async def wait(self, next_offset: int, need_acks: int) -> PutMessageStatus:
        if need_acks == ALL_ACK_IN_SYNC_STATE_SET:
            members = self._member_acks(self.effective_sync_state_set())
            satisfied = all((a or 0) >= next_offset for a in members.values())
        else:
            satisfied = acked_replicas(next_offset, self._acks()) >= need_acks
        return await self.waiters.wait(next_offset, need_acks, self.quorum.slave_timeout_ms / 1000, satisfied)

    def _release_waiters(self) -> None:
        if len(self.waiters):
            members = [a or 0 for a in self._member_acks(self.effective_sync_state_set()).values()]
            self.waiters.release(self._acks(), members)

    def _on_ack(self, conn: MasterConnection) -> None:
        if self.controller_mode and self.role is not BrokerRole.SLAVE and conn.slave_id is not None:
            closed = self.server is None or conn not in self.server.connections
            members = self.effective_sync_state_set()
            if closed:
                if conn.slave_id in members and self._on_slave_gone is not None:
                    self._on_slave_gone(conn.slave_id)
            elif (
                conn.slave_id not in members
                and not conn.async_learner
                and self._on_expand is not None
                and conn.ack_offset >= self.store.confirm_offset
                and conn.ack_offset >= self.epoch_start_offset()
            ):
                self._on_expand(conn.slave_id)  # §2.2 maybeExpandInSyncStateSet
            self._update_confirm_offset()
        self._release_waiters()

    def epoch_start_offset(self) -> int:
        """Where this master's current epoch starts (0 before any): a slave below it cannot join (§2.2)."""
        last = self.epochs.last_entry()
        return last.start_offset if last is not None else 0

    def caught_up_members(self, now_ms: int | None = None) -> set[int]:
        """Members still caught up within haMaxTimeSlaveNotCatchup (§2.2 shrink); self always."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        limit = self.config.haMaxTimeSlaveNotCatchup
        keep = {self.broker_id}
        for c in self.server.connections if self.server else ():
            if c.slave_id in self.sync_state_set and c.caught_up_ms and now_ms - c.caught_up_ms <= limit:
                keep.add(c.slave_id)
        return keep

    # --- water levels -------------------------------------------------------------------------------

    def water_levels(self) -> dict:
        store = self.store
        max_gap = self.quorum.ha_max_gap_not_in_sync
        report: dict = {
            "brokerName": self.config.brokerName,
            "brokerId": self.broker_id,
            "role": self.role.value,
            "masterEpoch": self.epochs.last_epoch(),
            "maxOffset": store.max_offset,
            "confirmOffset": store.confirm_offset,
            "minOffset": store.min_offset,
            "haMaxGapNotInSync": max_gap,
            "slaves": [],
        }
        if self.server is not None:
            members = self.effective_sync_state_set()
            slaves = [c for c in self.server.connections if c.slave_id is not None]
            in_sync = {c: slave_in_sync(store.max_offset, c.ack_offset, max_gap) for c in slaves}
            report["slaves"] = sorted(
                (c.water_level(c.slave_id in members, in_sync[c]) for c in slaves), key=lambda s: s["brokerId"]
            )
        return report
