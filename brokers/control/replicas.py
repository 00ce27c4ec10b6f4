"""Controller mode on the broker (reference §2.1-2.2): the replicas manager.

The broker starts fenced (no sends). It gets a controller id (getNextBrokerId -> a temporary
identity file -> applyBrokerId -> the identity file), registers with the controller, heartbeats to
it every brokerHeartbeatInterval over the control-plane websocket, and takes its role from the
controller's pushes (notify_broker_role_changed) and from a replica-info poll every
syncBrokerMetadataPeriod, acting only on a strictly greater master epoch. Only then is it unfenced
and registered with the nameserver (as id 0 when master). A master keeps its SyncStateSet: it shrinks
it when a slave falls behind for haMaxTimeSlaveNotCatchup or its link closes, expands it when a slave
catches up, and proposes each change with alterSyncStateSet (epoch-fenced by the controller).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path

from mqrules.codes import ResponseCode

from ..config import BrokerConfig
from ..core.roles import BrokerRole, RoleAction, after_poll, role_to_take
from ..ha.gate import WritePermission
from ..ha.service import HAService
from ..retry import Backoff, retry
from ..store.files import write_json_atomically
from ..store.store import MessageStore
from ..tasks import cancel_and_wait
from ..topics import TopicConfigManager
from .nameserver import ControlPlaneError, LinkDown, NameserverLink

log = logging.getLogger("brokers.controller")
IDENTITY_FILE = "brokerIdentity"
RETRY_START_S, RETRY_MAX_S = 0.2, 2.0  # a controller call retried: 0.2 s doubling up to 2 s
# A refused alterSyncStateSet that means this broker's view is stale: it asks for its role at once.
STALE_VIEW = (ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH, ResponseCode.CONTROLLER_INVALID_MASTER)


class ReplicasState(StrEnum):
    """RocketMQ's ``ReplicasManager.State``."""

    INITIAL = "INITIAL"
    FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE = "FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE"
    REGISTER_TO_CONTROLLER_DONE = "REGISTER_TO_CONTROLLER_DONE"
    RUNNING = "RUNNING"


class ReplicasManager:
    """The parts built before this one hear from it through its public methods, which the composition
    root (brokers/broker.py) hands them: the nameserver link ``may_register``, ``poll_now`` (a
    reconnected socket, a refused registration) and ``on_role_pushed``; the HA service ``want_alter``
    (a slave qualifies for the SyncStateSet, or a member's link closed)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        ha: HAService,
        link: NameserverLink,
        topics: TopicConfigManager,
        permission: WritePermission,
        *,
        on_role: Callable[[bool, int], Awaitable[None]],
    ):
        """``on_role(is_master, master_epoch)``: told of every role taken, before sends are let in."""
        self.config, self.store, self.ha, self.link, self.topics = config, store, ha, link, topics
        self.permission = permission
        # Set when the disk passed diskSpaceWarningLevelRatio (brokers/retention.py): a master steps down
        # as for a failed store, so an in-sync replica takes the writes instead of none.
        self.disk_full = asyncio.Event()
        self.on_role = on_role
        self.root = Path(config.storePathRootDir)
        self.broker_id: int | None = None  # brokerControllerId
        self.master_id: int | None = None
        self.master_addr: str | None = None
        self.master_epoch = 0
        self.sync_state_set_epoch = 0
        self.role_known = asyncio.Event()
        self.state = ReplicasState.INITIAL
        self._role_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self._alter_wanted = asyncio.Event()
        permission.update(fenced=True)  # until the controller assigns a role
        self._poll_now = asyncio.Event()
        self._stopping = False

    # --- what the link and the HA service tell it -------------------------------------------------

    def may_register(self) -> bool:
        """Not with the nameserver while fenced (reference §2.1 step 1)."""
        return self.role_known.is_set()

    def poll_now(self) -> None:
        """Ask the controller for the role at once (after a control-plane restart; a registration
        refused, e.g. because a newer master holds id 0)."""
        self._poll_now.set()

    def want_alter(self, _slave_id: int | None = None) -> None:
        """The SyncStateSet may need a change (a slave caught up, or a member's link closed)."""
        self._alter_wanted.set()

    # --- life cycle -------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(), name="replicas-manager")]

    async def stop(self) -> None:
        self._stopping = True  # a broker on its way out takes no role
        await cancel_and_wait(*self._tasks)

    async def _run(self) -> None:
        await self._wait_connected()
        await self._ensure_identity()
        self.state = ReplicasState.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE
        reply = await self._retry("register to the controller", self._register_to_controller)
        self.state = ReplicasState.REGISTER_TO_CONTROLLER_DONE
        loop = asyncio.get_running_loop()
        self._tasks += [
            loop.create_task(self._heartbeats(), name="controller-heartbeat"),
            loop.create_task(self._sync_metadata(), name="controller-sync"),
            loop.create_task(self._keep_sync_state_set(), name="sync-state-set"),
            loop.create_task(self._step_down_on_store_failure(), name="store-failure"),
        ]
        await self._heartbeat_once()
        if reply.get("masterBrokerId") is not None and reply.get("masterEpoch", 0) > self.master_epoch:
            await self._apply(reply)
        else:
            await self._elect()

    async def _wait_connected(self) -> None:
        await self.link.connected.wait()

    async def _retry(self, what: str, call: Callable[[], Awaitable[dict]], attempts: int = 0) -> dict:
        return await retry(
            what,
            call,
            errors=(ControlPlaneError, OSError, TimeoutError),
            backoff=Backoff(RETRY_START_S, RETRY_MAX_S),
            log=log,
            attempts=attempts,
        )

    # --- identity (reference §1.8) ----------------------------------------------------------------

    async def _ensure_identity(self) -> None:
        path = self.root / IDENTITY_FILE
        if path.exists():
            identity = json.loads(path.read_text())
            self.broker_id = int(identity["brokerId"])
            self.ha.broker_id = self.broker_id
            return
        tmp = self.root / (IDENTITY_FILE + ".tmp")
        c = self.config
        while True:
            if tmp.exists():  # a crash between apply and the identity file: apply the same id again
                pending = json.loads(tmp.read_text())
            else:
                reply = await self._retry(
                    "getNextBrokerId",
                    lambda: self.link.call(
                        "get_next_broker_id", {"clusterName": c.brokerClusterName, "brokerName": c.brokerName}
                    ),
                )
                pending = {
                    "brokerId": int(reply["nextBrokerId"]),
                    "registerCheckCode": f"{c.broker_addr};{int(time.time() * 1000)}",
                }
                write_json_atomically(tmp, pending)
            try:
                await self.link.call(
                    "apply_broker_id",
                    {
                        "clusterName": c.brokerClusterName,
                        "brokerName": c.brokerName,
                        "appliedBrokerId": pending["brokerId"],
                        "registerCheckCode": pending["registerCheckCode"],
                    },
                )
            except LinkDown:
                await asyncio.sleep(0.5)
                continue
            except ControlPlaneError as exc:
                log.info("broker id %d taken (%s); asking for another", pending["brokerId"], exc)
                tmp.unlink(missing_ok=True)
                continue
            write_json_atomically(
                path, {"clusterName": c.brokerClusterName, "brokerName": c.brokerName, "brokerId": pending["brokerId"]}
            )
            tmp.unlink(missing_ok=True)
            self.broker_id = pending["brokerId"]
            self.ha.broker_id = self.broker_id
            log.info("controller assigned broker id %d", self.broker_id)
            return

    async def _register_to_controller(self) -> dict:
        c = self.config
        return await self.link.call(
            "register_broker_to_controller",
            {
                "clusterName": c.brokerClusterName,
                "brokerName": c.brokerName,
                "brokerId": self.broker_id,
                "brokerAddress": c.broker_addr,
            },
        )

    # --- heartbeat and metadata -------------------------------------------------------------------

    async def _heartbeat_once(self) -> None:
        c = self.config
        await self.link.call(
            "controller_heartbeat",
            {
                "clusterName": c.brokerClusterName,
                "brokerName": c.brokerName,
                "brokerAddr": c.broker_addr,
                "brokerId": self.broker_id,
                "epoch": self.ha.epochs.last_epoch(),
                "maxOffset": self.store.max_offset,
                "confirmOffset": self.store.confirm_offset,
                "heartbeatTimeoutMillis": c.controllerHeartBeatTimeoutMills,
                "electionPriority": c.brokerElectionPriority,
            },
            timeout=c.sendHeartbeatTimeoutMillis / 1000,  # as RocketMQ times its heartbeat to the controller
        )

    async def _heartbeats(self) -> None:
        period = self.config.brokerHeartbeatInterval / 1000
        timeout = self.config.controllerHeartBeatTimeoutMills / 1000
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(period)
            if loop.time() - last > timeout:
                # This process was paused (SIGSTOP, a VM freeze) longer than the heartbeat timeout: the
                # controller may have elected another master meanwhile. Ask now, not at the next poll.
                log.warning("paused for %.1f s (> heartbeat timeout); checking the role with the controller", loop.time() - last)
                self._poll_now.set()
            last = loop.time()
            try:
                await self._heartbeat_once()
            except (ControlPlaneError, OSError, TimeoutError) as exc:
                log.debug("controller heartbeat failed: %s", exc)
            except Exception:  # never let the heartbeat task die
                log.exception("controller heartbeat failed")

    async def _sync_metadata(self) -> None:
        """The replica-info poll (§2.1 syncBrokerMetadata); also re-registers with the nameserver
        while a slave does not know its master's HA address yet."""
        period = self.config.syncBrokerMetadataPeriod / 1000
        next_poll = asyncio.get_running_loop().time() + period
        while True:
            try:
                await asyncio.wait_for(self._poll_now.wait(), 0.5)
            except TimeoutError:
                pass
            urgent = self._poll_now.is_set()
            self._poll_now.clear()
            if self.role_known.is_set() and self.ha.role is BrokerRole.SLAVE and not self.ha.master_ha_addr:
                self.link.register_soon()  # the answer names the master's HA address once it registered
            if not urgent and asyncio.get_running_loop().time() < next_poll:
                continue
            if urgent:
                try:
                    await self._heartbeat_once()
                except (ControlPlaneError, OSError, TimeoutError):
                    pass
            next_poll = asyncio.get_running_loop().time() + period
            try:
                await self._poll_once()
            except Exception:  # never let the metadata task die
                log.exception("replica-info poll failed")

    async def _poll_once(self) -> None:
        try:
            info = await self.link.call("get_replica_info", {"brokerName": self.config.brokerName})
        except ControlPlaneError as exc:
            if exc.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                await self._retry("re-register to the controller", self._register_to_controller, attempts=3)
            return
        except (OSError, TimeoutError):
            return
        action = after_poll(info, self.broker_id, self.master_epoch, self.master_id).action
        if action is RoleAction.ELECT:
            await self._elect()
        elif action is RoleAction.SYNC_STATE_SET:
            self._adopt_sync_state_set(info)
        elif action is not RoleAction.NONE:
            await self._apply(info)

    async def _elect(self) -> None:
        """brokerElect (§2.1): ask the controller to elect, as this broker."""
        try:
            reply = await self.link.call(
                "elect_master",
                {"clusterName": self.config.brokerClusterName, "brokerName": self.config.brokerName, "brokerId": self.broker_id},
            )
        except ControlPlaneError as exc:
            log.info("election request failed (%s); the metadata poll retries", exc)
            return
        if reply.get("masterBrokerId") is not None:
            await self._apply(reply)

    async def on_role_pushed(self, payload: dict) -> None:
        """A ``notify_broker_role_changed`` push: acted on only for a strictly greater master epoch."""
        if role_to_take(payload, self.broker_id, self.master_epoch).action is not RoleAction.NONE:
            await self._apply(payload)

    # --- role changes (§2.1 changeToMaster / changeToSlave) ---------------------------------------

    async def _apply(self, info: dict) -> None:
        if self._stopping:
            return
        async with self._role_lock:  # decided again under the lock: another answer may have moved the epoch
            role = role_to_take(info, self.broker_id, self.master_epoch)
            if role.action is RoleAction.MASTER:
                await self._change_to_master(role.epoch, set(role.members), role.sync_state_set_epoch)
            elif role.action is RoleAction.SLAVE:
                assert role.master_id is not None
                await self._change_to_slave(role.master_id, role.master_addr, role.epoch)

    async def _change_to_master(self, epoch: int, members: set[int], ss_epoch: int) -> None:
        started = time.monotonic()
        self.master_epoch = epoch
        self.sync_state_set_epoch = ss_epoch
        await self.ha.change_to_master(epoch, members or {self.broker_id})
        self.master_id, self.master_addr = self.broker_id, self.config.broker_addr
        self.topics.bump_state_version(epoch)
        await self.on_role(True, epoch)
        self.link.broker_id = 0
        self.permission.update(fenced=False)
        self.role_known.set()
        self.state = ReplicasState.RUNNING
        log.info(
            "now MASTER of %s at epoch %d (SyncStateSet %s) in %.0f ms",
            self.config.brokerName,
            epoch,
            sorted(members),
            (time.monotonic() - started) * 1000,
        )
        self.link.register_soon()

    async def _change_to_slave(self, master_id: int, master_addr: str | None, epoch: int) -> None:
        same_master = master_id == self.master_id and self.ha.role is BrokerRole.SLAVE
        self.master_epoch = epoch
        self.master_id, self.master_addr = master_id, master_addr
        self.topics.bump_state_version(epoch)
        if not same_master:
            await self.ha.change_to_slave()
        await self.on_role(False, epoch)
        self.link.broker_id = self.broker_id
        self.permission.update(fenced=False)
        self.role_known.set()
        self.state = ReplicasState.RUNNING
        log.info("now SLAVE of %s (master %s at %s, epoch %d)", self.config.brokerName, master_id, master_addr, epoch)
        self.link.register_soon()

    # --- a master whose store fails steps down -------------------------------------------------------

    async def _step_down_on_store_failure(self) -> None:
        """A RocketMQ master whose store fails keeps refusing sends in place; here it steps down: it
        leaves the control plane (its socket's close makes the controller elect an in-sync replica at
        once, as for a dead master), repairs its store once the disk takes writes, comes back and
        follows the new master. A slave's store failure needs no election; it repairs in place."""
        while True:
            await _first_set(self.store.failed, self.disk_full)
            master = self.master_id == self.broker_id and self.ha.role is not BrokerRole.SLAVE
            if master:
                if not self.store.failed.is_set():
                    log.error("the disk is full (diskSpaceWarningLevelRatio): the store takes no writes")
                log.error("the store stopped taking writes: stepping down so that the controller elects an in-sync replica")
                self.permission.update(fenced=True)
                await self.link.stop(unregister=True)
            self.disk_full.clear()
            if self.store.failed.is_set():
                await self.store.repair_when_possible()
            if master:
                self.link.broker_id = self.broker_id  # not id 0 while another may hold it: no double master
                self.link.start()
                await self.link.connected.wait()
                await self._poll_once()  # a new master's epoch: this broker follows it (changes to slave)
                if self.master_id == self.broker_id:  # nobody else was elected: master again
                    self.link.broker_id = 0
                    self.permission.update(fenced=False)
                    self.link.register_soon()
                log.info("back after the store failure as %s", "MASTER" if self.master_id == self.broker_id else "SLAVE")

    # --- SyncStateSet upkeep (§2.2, master only) --------------------------------------------------

    def _adopt_sync_state_set(self, info: dict) -> None:
        ss_epoch = int(info.get("syncStateSetEpoch", 0))
        if ss_epoch > self.sync_state_set_epoch:
            self.sync_state_set_epoch = ss_epoch
            self.ha.set_sync_state_set(set(info.get("syncStateSet") or []))

    async def _keep_sync_state_set(self) -> None:
        period = self.config.checkSyncStateSetPeriod / 1000
        while True:
            try:
                await asyncio.wait_for(self._alter_wanted.wait(), period)
            except TimeoutError:
                pass
            self._alter_wanted.clear()
            if self.master_id != self.broker_id or not self.role_known.is_set():
                continue
            try:
                await self._maybe_alter()
            except (ControlPlaneError, OSError, TimeoutError) as exc:
                log.info("SyncStateSet change not applied (%s); retrying", exc)
                self.ha.propose_sync_state_set(None)
                if isinstance(exc, ControlPlaneError) and exc.code in STALE_VIEW:  # not master any more (or a stale epoch)
                    self._poll_now.set()
                await asyncio.sleep(0.5)
                self._alter_wanted.set()
            except Exception:  # never let the upkeep task die
                log.exception("SyncStateSet upkeep failed")
                self.ha.propose_sync_state_set(None)
                await asyncio.sleep(0.5)

    async def _maybe_alter(self) -> None:
        ha = self.ha
        current = set(ha.sync_state_set)
        keep = ha.caught_up_members() & (current | {self.broker_id})
        connected = {c.slave_id for c in (ha.server.connections if ha.server else ()) if c.slave_id is not None}
        keep = {m for m in keep if m == self.broker_id or m in connected}
        joining = {
            c.slave_id
            for c in (ha.server.connections if ha.server else ())
            if c.slave_id is not None
            and c.slave_id not in current
            and not c.async_learner
            and c.ack_offset >= self.store.confirm_offset
            and c.ack_offset >= ha.epoch_start_offset()
        }
        proposal = keep | joining | {self.broker_id}
        if proposal == current:
            return
        ha.propose_sync_state_set(proposal)  # counted with the old set while in flight (#5663)
        reply = await self.link.call(
            "alter_sync_state_set",
            {
                "clusterName": self.config.brokerClusterName,
                "brokerName": self.config.brokerName,
                "masterBrokerId": self.broker_id,
                "masterEpoch": self.master_epoch,
                "syncStateSet": sorted(proposal),
                "syncStateSetEpoch": self.sync_state_set_epoch,
            },
        )
        self.sync_state_set_epoch = int(reply.get("syncStateSetEpoch", self.sync_state_set_epoch + 1))
        ha.set_sync_state_set(set(reply.get("syncStateSet") or proposal))
        log.info(
            "SyncStateSet of %s is now %s (epoch %d)",
            self.config.brokerName,
            sorted(ha.sync_state_set),
            self.sync_state_set_epoch,
        )


async def _first_set(*events: asyncio.Event) -> None:
    """Returns once any of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
