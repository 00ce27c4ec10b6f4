"""The broker process: store + membership, one event loop, every task owned and cancelled on stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import asdict
from pathlib import Path

from .admin import BrokerAdmin
from .config import BrokerConfig
from .control.members import MemberGroupTracker, parse_member_group
from .control.nameserver import ControlPlaneError, NameserverLink
from .control.peers import PeerClient, PeerRefused, PeerServer, RequestCode, ResponseCode
from .control.preonline import ActingMaster
from .control.replicas import ReplicasManager
from .grpc.service import EndpointPorts, serve
from .ha.gate import WritePermission, WriteReason
from .ha.quorum import BrokerRole
from .ha.service import HAService
from .meta import ConsumerMeta
from .metalog import MetaLog, MetaMode
from .store import codec
from .store.store import FlushDiskType, MessageStore, StoreConfig
from .tasks import cancel_and_wait
from .timer import Checkpoint, TimerService
from .topics import TopicConfig, TopicConfigManager, system_topics
from .transaction import Resolution
from .transaction_check import TransactionChecks

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

    def __init__(self, broker: Broker):
        self.broker = broker
        self.pending: dict[tuple[str, str, int, str], tuple[int, int]] = {}  # (queue, source) -> (offset, ms)
        self._served_epoch: int | None = None

    def committed(self, group: str, topic: str, queue_id: int, offset: int, source: str = "client_commit") -> None:
        self.pending[(group, topic, queue_id, source)] = (offset, int(time.time() * 1000))

    def whole_table(self, source: str) -> None:
        """Every offset this broker holds, once (a takeover, a pre-online adoption)."""
        now = int(time.time() * 1000)
        for key, offset in self.broker.consumer_meta.offsets.offsets.items():
            group, topic, queue_id = key.rsplit("@", 2)
            self.pending[(group, topic, int(queue_id), source)] = (offset, now)

    def _note_takeover(self) -> None:
        ha, store = self.broker.ha, self.broker.store
        epoch = ha.epochs.last_epoch()
        if ha.role.value == "SLAVE" or not store.writable or epoch == self._served_epoch:
            return
        self._served_epoch = epoch
        self.whole_table("master_takeover")

    async def run(self) -> None:
        while True:
            await asyncio.sleep(OFFSET_REPORT_INTERVAL_S)
            self._note_takeover()
            if not self.pending or not self.broker.nameserver.connected.is_set():
                continue
            sending, self.pending = self.pending, {}
            try:
                await self._send(sending)
            except Exception as exc:  # keep what was not sent, unless a newer offset came meanwhile
                for queue, value in sending.items():
                    self.pending.setdefault(queue, value)
                log.info("offset report failed (%s); retrying with the next one", exc)

    async def _send(self, sending: dict[tuple[str, str, int, str], tuple[int, int]]) -> None:
        c, ha, store = self.broker.config, self.broker.ha, self.broker.store
        head = {
            "clusterName": c.brokerClusterName,
            "brokerName": c.brokerName,
            "brokerId": ha.broker_id,
            "role": ha.role.value,
            "masterEpoch": ha.epochs.last_epoch(),
        }
        dv = self.broker.consumer_meta.data_version
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
            await self.broker.nameserver.call(
                "offset_events", {**head, "events": events[start : start + OFFSET_REPORT_MAX_EVENTS]}
            )


class Broker:
    def __init__(self, config: BrokerConfig, config_path: Path | None = None):
        """``config_path``: the broker.conf ``config`` was read from (an operator's changes are kept there)."""
        self.config = config
        root = Path(config.storePathRootDir)
        # The one owner of "does this broker take sends": the HA service feeds it the role, the
        # replicas manager whether the controller assigned one, this class an operator's isolation.
        self.permission = WritePermission(BrokerRole(config.brokerRole), fenced=config.enableControllerMode)
        self.store = MessageStore(
            StoreConfig(
                root,
                mapped_file_size_commit_log=config.mappedFileSizeCommitLog,
                flush_disk_type=FlushDiskType(config.flushDiskType),
                flush_interval_commit_log=config.flushIntervalCommitLog,
                flush_commit_log_least_pages=config.flushCommitLogLeastPages,
                flush_commit_log_thorough_interval=config.flushCommitLogThoroughInterval,
            ),
            self.permission,
        )
        # A slave publishes consume-queue entries only up to its master's confirm offset, from
        # recovery on (reference §2.6).
        self.store.follow_max = config.brokerRole != "SLAVE" and not config.enableControllerMode
        self.topics = TopicConfigManager(root / "config" / "topics.json")
        for tc in system_topics(config.brokerClusterName, config.brokerName):
            if tc.topicName not in self.topics.topics:
                self.topics.update(tc)
        self.nameserver = NameserverLink(config, self.topics)
        self.ha = HAService(config, self.store, self.permission)
        self.nameserver.water_levels = self.ha.water_levels
        self.nameserver.on_registered = self._on_registered
        self.nameserver.on_push["isolate"] = self._on_isolate
        self.nameserver.on_push["static_topic"] = self._on_static_topic
        self.replicas = (
            ReplicasManager(config, self.store, self.ha, self.nameserver, self.topics) if config.enableControllerMode else None
        )
        self.grpc_server = None
        self.grpc_service = None
        self.offset_reporter = OffsetReporter(self)
        self._report_offsets: asyncio.Task | None = None
        self._transactions: asyncio.Task | None = None
        # Operators' view and requests (brokers/admin.py): the broker_status report, config changes, resets.
        self.admin = BrokerAdmin(self, config_path)
        self.nameserver.on_request.update(self.admin.requests())
        self._report_status: asyncio.Task | None = None
        # Consumer metadata that replicates with the log (brokers/meta.py): the master writes it,
        # every other replica follows it.
        self.consumer_meta = ConsumerMeta(root / "config" / "consumerOffset.json", self.topics)
        self.metalog = MetaLog(self.store, self.consumer_meta, config.popReviveAfterTakeoverMillis)
        self.timers = TimerService(self.store, config.timerPrecisionMs, config.timerMaxDelaySec * 1000)
        self.metalog.on_topics_changed = self.nameserver.register_soon
        self.topics.on_changed = self._topic_changed
        if self.replicas is not None:
            self.replicas.on_role = self._on_role
        self._follow: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        # RIP-32 (reference §5): the peer channel on listenPort, the member-group poll, pre-online.
        self.acting = ActingMaster(config, self.ha, self.consumer_meta, self.metalog, self.nameserver)
        self.acting.on_adopted = lambda: self.offset_reporter.whole_table("pre_online_sync")
        self.peers = PeerServer.for_broker(config)
        self.peers.handle(RequestCode.EXCHANGE_BROKER_HA_INFO, self.acting.exchange_ha_info)
        self.peers.handle(RequestCode.GET_CONSUMER_META, self.acting.consumer_meta)
        self.peers.handle(RequestCode.GET_TIMER_CHECK_POINT, self._timer_checkpoint_asked)
        self.acting.on_acting = self._on_acting
        self.acting.take_timer_checkpoint = self._take_timer_checkpoint
        self.peers.handle(RequestCode.GET_TRANSACTION_RESOLUTIONS, self._resolutions_asked)
        self.acting.take_resolutions = self._take_resolutions
        self.peers.handle(RequestCode.WANT_CONSUMER_META_SNAPSHOT, self._snapshot_asked)
        self._peer_client = PeerClient(config.peer_token)
        self._master_addr: str | None = None  # classic mode: from the nameserver's registration answers
        self._members: dict[int, str] = {}  # this set's live replicas, as last heard (brokers/transaction_check.py)
        self.metalog.request_snapshot = self._ask_master_for_snapshot
        classic_acting = config.enableSlaveActingMaster and not config.enableControllerMode
        self.members = (
            MemberGroupTracker(config, self.nameserver, self.acting.on_min_broker, paused=lambda: self.acting.pre_online)
            if classic_acting
            else None
        )
        if self.members is not None:
            self.ha.alive_in_group = lambda: self.members.alive_replicas if self.members.current is not None else None
        self.pre_online = classic_acting and not config.skipPreOnline and config.totalReplicas > 1
        self._pre_online: asyncio.Task | None = None

    async def start(self) -> None:
        report = await self.store.start()
        log.info(
            "store recovered (%s codec): %d messages, max offset %d%s",
            codec.IMPLEMENTATION,
            report.messages,
            report.max_offset,
            f", cut {report.removed_bytes} torn bytes at {report.truncated_at}" if report.truncated_at is not None else "",
        )
        await self.ha.start()
        loop = asyncio.get_running_loop()
        await self.metalog.catch_up()  # what this broker's own log holds beyond its last persisted state
        classic_master = not self.config.enableControllerMode and self.config.brokerRole != "SLAVE"
        if classic_master and not self.pre_online:
            await self.metalog.become_writer()
        await self.peers.start()
        self._follow = loop.create_task(self.metalog.follow_forever(), name="meta-follow")
        ports = EndpointPorts(  # what the gRPC edge needs of this broker (brokers/grpc/service.py)
            gate=self.permission,  # with acting(): whether sends go to the master (brokers/core/admission.py)
            acting=lambda: self.metalog.mode is MetaMode.ACTING,
            topics_changed=self.nameserver.register_soon,
            offset_committed=self.offset_reporter.committed,
            report_sealed=lambda sealed: self.nameserver.call("static_topic_sealed", sealed),
            may_seal=lambda: self.metalog.mode is MetaMode.WRITER,  # static topics: the master seals
        )
        self.grpc_server, self.grpc_service = await serve(
            self.config, self.store, self.topics, self.consumer_meta, self.metalog, ports
        )
        self._revive = loop.create_task(self.grpc_service.revive_forever(), name="revive")
        # The set's transaction checks run where its special services do (reference §5.1): on the
        # master, or on the slave acting for a dead one.
        checks = TransactionChecks(
            self.grpc_service.transactions,
            self.grpc_service.producers,
            self._peer_client,
            self._group_members,
            self.config.broker_addr,
            self.config.transactionCheckInterval,
            serving=lambda: self.metalog.mode in (MetaMode.WRITER, MetaMode.ACTING),
        )
        for code, handler in checks.handlers().items():
            self.peers.handle(code, handler)
        self._transactions = loop.create_task(checks.run(), name="transactions")
        self._report_offsets = loop.create_task(self.offset_reporter.run(), name="offset-reports")
        self._report_status = loop.create_task(self.admin.run(), name="broker-status")
        if self.metalog.mode is MetaMode.WRITER:
            self._taken_over()
        if self.pre_online:  # §5.3: no registration, no writes, until the consumer state is back
            self.permission.update(pre_online=True)
            self.nameserver.may_register = lambda: not self.acting.pre_online
            self.acting.pre_online = True
            self._pre_online = loop.create_task(self.acting.run_pre_online(self._peer_client, self._go_online), name="pre-online")
        self.nameserver.start()
        if self.members is not None:
            self.members.start()
        if self.replicas is not None:
            self.replicas.start()  # a master whose store fails steps down (ReplicasManager)
        else:
            self._in_background(self._repair_store_in_place(), "store-repair")

    async def _repair_store_in_place(self) -> None:
        """Classic mode has no controller to move mastership: a failed store is repaired in place
        once its disk takes writes again, instead of refusing every send until a restart."""
        while True:
            await self.store.failed.wait()
            await self.store.repair_when_possible()

    async def _go_online(self) -> None:
        """The end of pre-online: a master records its (possibly adopted) state, takes writes, registers."""
        if self.config.brokerRole != "SLAVE":
            await self.metalog.become_writer()
        self.permission.update(pre_online=False)
        if self.metalog.mode is MetaMode.WRITER:
            self._taken_over()
        log.info("pre-online done: registering as broker %d", self.config.brokerId)
        self.nameserver.register_soon()

    async def stop(self) -> None:
        """Clients first: nothing is served (and recorded) after this broker leaves its group, so a
        slave that takes over (acting master) has every record this one answered."""
        if self.replicas is not None:
            await self.replicas.stop()
        await cancel_and_wait(self._pre_online)
        if self.grpc_server is not None:
            await cancel_and_wait(self._revive, self._transactions)
            await self.grpc_server.stop(grace=2)
            await self.timers.deactivate()
            self.grpc_service.persist_offsets()
            await self.grpc_service.close()
        await cancel_and_wait(self._report_offsets, self._report_status, self._follow, *self._background)
        if self.members is not None:
            await self.members.stop()
        await self.nameserver.stop()
        await self.peers.stop()
        await self.ha.stop()
        await self.store.shutdown()

    # --- consumer metadata ------------------------------------------------------------------------

    def _in_background(self, work, name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _on_role(self, master: bool, epoch: int) -> None:
        """Controller mode: a new master applies all it followed, then records a snapshot at the new
        epoch (once sends are let in); a slave follows its master's records. Requests forwarded to
        the old master are given up for the new one (a frozen master never answers them)."""
        if self.grpc_service is not None:
            self.grpc_service.master_changed()
        if master:
            await self.metalog.become_writer(state_version=epoch)
            self._taken_over()
        else:
            self.metalog.become_follower()
            await self.timers.deactivate()

    def _forwards_sends(self) -> bool:
        """A slave (or a broker the controller has not given a role yet) hands sends to its master;
        an acting master does not (its group takes no writes while the master is down), nor does an
        isolated or pre-online master (an operator's or the broker's own decision)."""
        reason = self.permission.reason
        return reason in (WriteReason.SLAVE, WriteReason.FENCED) and self.metalog.mode is not MetaMode.ACTING

    async def _snapshot_asked(self, body: dict) -> dict:
        """A replica without a base asks for a snapshot record (only a master writes one)."""
        if self.metalog.mode is not MetaMode.WRITER:
            raise PeerRefused(ResponseCode.SYSTEM_ERROR, "not the master of this broker set")
        self.metalog.want_snapshot()
        return {}

    async def _ask_master_for_snapshot(self) -> None:
        master = self.replicas.master_addr if self.replicas is not None else self._master_addr
        if master and master != self.config.broker_addr:
            await self._peer_client.call(master, RequestCode.WANT_CONSUMER_META_SNAPSHOT, {})

    def _taken_over(self) -> None:
        """Serving as master now (writes are let in once the caller returns): record the state for
        the slaves, correct offsets beyond their queue's end before new messages pass them, and turn
        the timer wheel."""
        self.metalog.want_snapshot()
        if self.grpc_service is not None:
            self._in_background(self.grpc_service.correct_overflows(), "offset-overflow")
            self.grpc_service.static.seal_due()
            self.grpc_service.transactions.loaded = False  # rebuilt from this log at its first use
        if self.config.timerWheelEnable:
            self.timers.activate()  # due timers go out from this log's last checkpoint on

    # --- timers while acting for a dead master (RIP-32 escape) -------------------------------------

    def _on_acting(self, acting: bool) -> None:
        """An acting master checks and resolves transactions (kept until its master takes them back);
        with escape on (enableRemoteEscape) it also turns the timer wheel: due timers and commits go
        to another master of the cluster. Without escape, timers and the messages of commits wait for
        their master's return."""
        if self.grpc_service is None:
            return
        escape = self.grpc_service.escape.put if acting and self.config.enableRemoteEscape else None
        self.grpc_service.transactions.act(acting, escape)
        if escape is not None and self.config.timerWheelEnable:
            self.timers.activate(escape=escape)
        elif not acting:
            self._in_background(self.timers.deactivate(), "timer-stop")

    async def _resolutions_asked(self, body: dict) -> dict:
        """10060: the transactions this broker resolved while acting (empty: none), and of those the
        commits whose message it sent nowhere (``unsent``: the returning master stores it)."""
        if self.grpc_service is None:
            return {}
        ops, unsent = self.grpc_service.transactions.handed_back()
        return {"resolutions": {txn: r.value for txn, r in ops.items()}, "unsent": sorted(unsent)} if ops else {}

    def _take_resolutions(self, reply: dict) -> None:
        raw, unsent = reply.get("resolutions"), reply.get("unsent", [])
        if not isinstance(raw, dict) or not isinstance(unsent, list) or self.grpc_service is None:
            log.warning("pre-online: refused transaction resolutions %r", reply)
            return
        try:
            taken = {str(txn): Resolution(r) for txn, r in raw.items()}
        except ValueError as exc:
            log.warning("pre-online: refused transaction resolutions (%s)", exc)
            return
        self.grpc_service.transactions.adopt(taken, {str(txn) for txn in unsent})
        log.info("pre-online: took back %d transactions the acting master resolved", len(taken))

    async def _group_members(self) -> dict[int, str]:
        """This set's live replicas (broker id -> peer address), from the nameserver's member group;
        the last ones heard while it cannot be asked."""
        c = self.config
        try:
            asked = {"clusterName": c.brokerClusterName, "brokerName": c.brokerName}
            reply = await self.nameserver.call("get_broker_member_group", asked)
            self._members = parse_member_group(reply)
        except (ControlPlaneError, TimeoutError, ValueError) as exc:
            log.info("member group not read (%s); using the last one heard", exc)
        return self._members

    async def _timer_checkpoint_asked(self, body: dict) -> dict:
        """60: what this broker delivered by escape while acting (empty: nothing)."""
        return {"checkpoint": self.timers.checkpoint.to_wire()} if self.timers.escaped_any else {}

    def _take_timer_checkpoint(self, reply: dict) -> None:
        try:
            self.timers.adopted = Checkpoint.from_wire(reply.get("checkpoint"))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("pre-online: refused a timer checkpoint %r (%s)", reply, exc)

    def _topic_changed(self, change: TopicConfig | str) -> None:
        """A master records every topic change for its slaves (a replica that missed a push, or
        joined later, gets it from its log)."""
        if self.metalog.mode is not MetaMode.WRITER:
            return
        if isinstance(change, str):
            record = self.consumer_meta.record("topic", delete=change)
        else:
            record = self.consumer_meta.record("topic", topicConfig=asdict(change))
        self._in_background(self.metalog.write(record), "meta-topic")

    def _on_registered(self, reply: dict) -> None:
        """Every registration answer names the master's HA address and whether an operator isolated
        this broker: so isolation survives a restart of this process and a push it missed."""
        self.ha.on_master_ha_addr(reply.get("haServerAddr"))
        self._master_addr = reply.get("masterAddr") or None
        if self.grpc_service is not None:  # static topics: the poll behind the pushes; a seal not decided is reported again
            for mapping in reply.get("staticTopics") or ():
                self.grpc_service.static.update(mapping)
            self.grpc_service.static.seal_due()
        if "isolated" in reply:  # (a control plane that does not say leaves the last word standing)
            self._set_isolated(reply["isolated"] is True)

    async def _on_static_topic(self, payload: dict) -> None:
        """A static topic's mapping changed (pushed by the control plane)."""
        if self.grpc_service is not None and isinstance(payload.get("mapping"), dict):
            self.grpc_service.static.update(payload["mapping"])

    async def _on_isolate(self, payload: dict) -> None:
        """An operator isolated this broker (or lifted it): pushed at once, and repeated by every
        registration answer."""
        self._set_isolated(payload.get("isolated") is True)

    def _set_isolated(self, isolated: bool) -> None:
        if isolated != self.permission.facts.isolated:
            log.warning("isolated by an operator: not taking writes" if isolated else "isolation lifted by an operator")
        self.permission.update(isolated=isolated)

    @property
    def isolated(self) -> bool:
        return self.permission.facts.isolated

    async def run_until_signalled(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        log.info(
            "broker %s[%d] at %s in cluster %s is up",
            self.config.brokerName,
            self.config.brokerId,
            self.config.broker_addr,
            self.config.brokerClusterName,
        )
        await stop.wait()
        log.info("stopping")
        await self.stop()
