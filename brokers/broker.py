"""The broker process: store + membership, one event loop, every task owned and cancelled on stop.

The composition root: the one module that knows every part. It builds them and hands each, through
its constructor, the ports it needs (the parts it calls, and callables for what it tells). Where two
parts need each other, the one built first (the HA service and the nameserver link, which the
replicas manager, the member-group tracker and the admin need) is handed a method of ``Broker``
that forwards to the later part ("Late binding" below): written once here, not assigned onto parts.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import asdict
from functools import partial
from pathlib import Path

from .acl import AccessControl
from .admin import BrokerAdmin
from .clients_report import connected_clients
from .config import BrokerConfig
from .control.members import PUSH as MIN_BROKER_PUSH
from .control.members import MemberGroupTracker, parse_member_group
from .control.nameserver import ControlPlaneError, LinkHooks, NameserverLink, RequestHandler
from .control.offset_reports import OffsetReporter
from .control.peers import PeerClient, PeerRefused, RequestCode, ResponseCode, peer_guard, peer_handlers
from .control.preonline import ActingMaster
from .control.replicas import ReplicasManager
from .core.roles import BrokerRole
from .dlq import DeadLetters
from .grpc.service import GrpcEndpoint, serve
from .ha.gate import WritePermission
from .ha.service import HAService
from .messages import MESSAGE_REQUESTS, BrokerIdentity, MessageQueries, indexed
from .meta import ConsumerMeta
from .metalog import MetaLog, MetaMode
from .metrics import BrokerMetrics, DiskUse, HAView, MetricsEndpoint, Sources, Traffic
from .remoting.endpoint import RemotingEndpoint, RemotingPorts
from .remoting.locks import gather_replies
from .remoting.server import RemotingServer
from .retention import Retention, disk_usage
from .services import BrokerServices, ServicePorts
from .store import codec
from .store.store import FlushDiskType, MessageStore, StoreConfig
from .tasks import cancel_and_wait
from .timer import Checkpoint, TimerService
from .tls import TlsMode, remoting_server_context, replication_client_context
from .topics import TopicConfig, TopicConfigManager, system_topics
from .trace import MessageTracer
from .transaction import Resolution
from .transaction_check import EitherProducers, TransactionChecks

log = logging.getLogger("brokers")


def store_config(config: BrokerConfig) -> StoreConfig:
    return StoreConfig(
        Path(config.storePathRootDir),
        mapped_file_size_commit_log=config.mappedFileSizeCommitLog,
        flush_disk_type=FlushDiskType(config.flushDiskType),
        flush_interval_commit_log=config.flushIntervalCommitLog,
        flush_commit_log_least_pages=config.flushCommitLogLeastPages,
        flush_commit_log_thorough_interval=config.flushCommitLogThoroughInterval,
        message_index_enable=config.messageIndexEnable,
        max_hash_slot_num=config.maxHashSlotNum,
        max_index_num=config.maxIndexNum,
    )


class Broker:
    def __init__(self, config: BrokerConfig, config_path: Path | None = None):
        """``config_path``: the broker.conf ``config`` was read from (an operator's changes are kept there)."""
        self.config = config
        root = Path(config.storePathRootDir)
        controller = config.enableControllerMode
        classic_acting = config.enableSlaveActingMaster and not controller
        self.pre_online = classic_acting and not config.skipPreOnline and config.totalReplicas > 1
        self.traffic = Traffic()  # what the edges count as they serve (brokers/metrics.py)
        # The one owner of "does this broker take sends": the HA service feeds it the role, the
        # replicas manager whether the controller assigned one, this class an operator's isolation.
        self.permission = WritePermission(BrokerRole(config.brokerRole), fenced=controller)
        # A slave publishes consume-queue entries only up to its master's confirm offset, from
        # recovery on (reference §2.6).
        self.store = MessageStore(store_config(config), self.permission, follow_max=self._classic_master)
        self.topics = TopicConfigManager(root / "config" / "topics.json", on_changed=self._topic_changed)
        self.topics.seed(system_topics(config.brokerClusterName, config.brokerName))
        self.ha = HAService(
            config,
            self.store,
            self.permission,
            on_expand=self._sync_state_set_may_change if controller else None,
            on_slave_gone=self._sync_state_set_may_change if controller else None,
            alive_in_group=self._alive_in_group if classic_acting else None,
        )
        # Who may send and receive (brokers/acl.py): the control plane's users and policies, checked by
        # the client edges; built before the link, whose answers and pushes carry them.
        self.access = AccessControl(config.authentication_on, config.authorization_on, config.authenticationSkewMillis)
        self.nameserver = NameserverLink(config, self.topics, self._link_hooks(controller, classic_acting))
        self.replicas = (
            ReplicasManager(config, self.store, self.ha, self.nameserver, self.topics, self.permission, on_role=self._on_role)
            if controller
            else None
        )
        self.grpc_server = None
        self.grpc_service: GrpcEndpoint | None = None
        self.services: BrokerServices | None = None  # built with the client endpoints (_serve_clients)
        # Consumer metadata that replicates with the log (brokers/meta.py): the master writes it,
        # every other replica follows it.
        self.consumer_meta = ConsumerMeta(root / "config" / "consumerOffset.json", self.topics)
        self.metalog = MetaLog(
            self.store,
            self.consumer_meta,
            config.popReviveAfterTakeoverMillis,
            on_topics_changed=self.nameserver.register_soon,
            request_snapshot=self._ask_master_for_snapshot,
        )
        self.timers = TimerService(self.store, config.timerPrecisionMs, config.timerMaxDelaySec * 1000)
        # Retention and the disk's guard (brokers/retention.py): deletes the oldest commit-log files,
        # refuses sends (and registers read-only) while the disk is full.
        self.retention = Retention(config, self.store, self.ha.epochs, self._disk_full)
        self.offset_reporter = OffsetReporter(config, self.nameserver, self.ha, self.store, self.consumer_meta)
        # Operators' view and requests (brokers/admin.py): the broker_status report, config changes, resets.
        self.admin = BrokerAdmin(
            config,
            config_path,
            link=self.nameserver,
            store=self.store,
            topics=self.topics,
            meta=self.consumer_meta,
            metalog=self.metalog,
            ha=self.ha,
            permission=self.permission,
            retention=self.retention,
            consumers=lambda: self.services.consuming if self.services is not None else None,
            config_changed=self._config_changed,
            metrics_addr=lambda: self.metrics.address if self.metrics is not None else None,
            clients=self._connected_clients,
        )
        self.message_requests = self._build_message_requests(config)
        self._build_acting(config, classic_acting)
        self.metrics = self._build_metrics(config)
        # The background tasks this broker owns (each cancelled on stop).
        self._transactions: asyncio.Task | None = None
        self._report_offsets: asyncio.Task | None = None
        self._report_status: asyncio.Task | None = None
        self._retention: asyncio.Task | None = None
        self._follow: asyncio.Task | None = None
        self._pre_online: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()

    @property
    def _classic_master(self) -> bool:
        """A master by configuration (classic mode: the controller gives no role)."""
        return not self.config.enableControllerMode and BrokerRole(self.config.brokerRole) is not BrokerRole.SLAVE

    def _build_message_requests(self, config: BrokerConfig) -> dict[str, RequestHandler]:
        """The control plane's requests to find messages, trace them and resend dead letters
        (brokers/messages.py, trace.py, dlq.py; docs/messages.md §3)."""
        broker = BrokerIdentity(
            config.brokerName, lambda: self.nameserver.broker_id, config.broker_addr, config.brokerIP1, config.listenPort
        )
        queries = MessageQueries(
            self.store, self.topics, broker, lambda: self.services.consuming if self.services is not None else None
        )
        tracer = MessageTracer(self.store, self.consumer_meta, queries)
        dead = DeadLetters(
            self.store,
            self.topics,
            self.metalog,
            queries,
            lambda: self.services.sending if self.services is not None else None,
        )
        handlers = {**queries.handlers(), "message_trace": tracer.message_trace}
        return indexed({**handlers, "dlq_list": dead.dlq_list, "dlq_resend": dead.dlq_resend})

    def _connected_clients(self) -> list[dict]:
        """The clients connected now, gRPC and remoting (the broker_status report's ``clients``)."""
        grpc, remoting = self.grpc_service, self.remoting_service
        return connected_clients(grpc.clients if grpc else None, remoting.clients if remoting else None)

    async def _message_request(self, kind: str, payload: dict) -> dict:
        return await self.message_requests[kind](payload)

    def _build_acting(self, config: BrokerConfig, classic_acting: bool) -> None:
        """RIP-32 (reference §5): pre-online and the acting master, the peer channel on listenPort
        that serves them, and (classic mode) the member-group poll that finds the group's minimum."""
        self.acting = ActingMaster(
            config,
            self.ha,
            self.consumer_meta,
            self.metalog,
            self.nameserver,
            pre_online=self.pre_online,
            on_adopted=partial(self.offset_reporter.whole_table, "pre_online_sync"),
            on_acting=self._on_acting,
            take_timer_checkpoint=self._take_timer_checkpoint,
            take_resolutions=self._take_resolutions,
        )
        # listenPort: remoting clients (brokers/remoting/) and this set's peers (brokers/control/peers.py)
        # with TLS (brokers/tls.py): plaintext too for remoting clients unless tlsServerMode=enforcing;
        # with tlsReplicationEnable a peer is who its broker certificate says, instead of the peer token
        self.remoting = RemotingServer(
            config.brokerIP1,
            config.listenPort,
            answered=self.traffic.remoting_answered,
            tls=remoting_server_context(config),
            tls_only=config.tlsServerMode == TlsMode.ENFORCING,
        )
        self._peer_guard = peer_guard(config.brokerClusterName, config.brokerName, config.tlsReplicationEnable, config.peer_token)
        self.remoting.handle_all(
            peer_handlers(
                self._peer_guard,
                {
                    RequestCode.EXCHANGE_BROKER_HA_INFO: self.acting.exchange_ha_info,
                    RequestCode.GET_CONSUMER_META: self.acting.consumer_meta,
                    RequestCode.GET_TIMER_CHECK_POINT: self._timer_checkpoint_asked,
                    RequestCode.GET_TRANSACTION_RESOLUTIONS: self._resolutions_asked,
                    RequestCode.WANT_CONSUMER_META_SNAPSHOT: self._snapshot_asked,
                },
            )
        )
        self.remoting_service: RemotingEndpoint | None = None
        self._peer_client = PeerClient(config.peer_token, tls=replication_client_context(config))
        self._master_addr: str | None = None  # classic mode: from the nameserver's registration answers
        self._members: dict[int, str] = {}  # this set's live replicas, as last heard (brokers/transaction_check.py)
        acting = self.acting
        self.members = (
            MemberGroupTracker(config, self.nameserver, acting.on_min_broker, paused=lambda: acting.pre_online)
            if classic_acting
            else None
        )

    def _build_metrics(self, config: BrokerConfig) -> MetricsEndpoint | None:
        """Prometheus metrics (brokers/metrics.py) unless metricsExporterType=DISABLE."""
        if config.metricsExporterType == "DISABLE":
            return None
        ha, store, meta, retention = self.ha, self.store, self.consumer_meta, self.retention

        def ha_view() -> HAView:
            levels = ha.water_levels()
            return HAView(
                levels["role"], levels["masterEpoch"], frozenset(ha.effective_sync_state_set()), tuple(levels["slaves"])
            )

        async def disk() -> DiskUse:
            return DiskUse(disk_usage(retention.path).ratio / 100, config.diskSpaceWarningLevelRatio / 100)

        sources = Sources(
            config=config,
            store=store,
            topic_count=lambda: len(self.topics.topics),
            group_count=lambda: len(meta.groups),
            committed=lambda: meta.offsets.offsets,
            popped=lambda: {key: q.pop_offset for key, q in meta.pop.queues.items()},
            ha=ha_view,
            gate=lambda: self.permission.reason,
            acting=lambda: self.metalog.mode is MetaMode.ACTING,
            disk=disk,
        )
        return MetricsEndpoint(
            config.metrics_host,
            config.metricsPromExporterPort,
            BrokerMetrics(sources, self.traffic),
            interval=lambda: config.brokerStatusReportInterval / 1000,
        )

    def _link_hooks(self, controller: bool, classic_acting: bool) -> LinkHooks:
        """What the nameserver link tells this broker's parts; the link is built before them."""
        pushes = {"isolate": self._on_isolate, "static_topic": self._on_static_topic, "acl_update": self.access.pushed}
        if controller:
            pushes["notify_broker_role_changed"] = self._role_pushed
        if classic_acting:
            pushes[MIN_BROKER_PUSH] = self._min_broker_pushed
        return LinkHooks(
            pushes=pushes,
            requests={
                "update_broker_config": self._update_broker_config,
                "reset_offset": self._reset_offset,
                **{kind: partial(self._message_request, kind) for kind in MESSAGE_REQUESTS},
            },
            registered=self._on_registered,
            may_register=self._may_register,
            water_levels=self.ha.water_levels,
            connected=self._poll_controller if controller else None,
            register_refused=self._register_refused if controller else None,
        )

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
        await self.retention.check()  # a full disk is known before the first registration
        self._retention = loop.create_task(self.retention.run(), name="retention")
        await self.metalog.catch_up()  # what this broker's own log holds beyond its last persisted state
        if self._classic_master and not self.pre_online:
            await self.metalog.become_writer()
        await self.remoting.start()
        if self.metrics is not None:
            await self.metrics.start()
        self._follow = loop.create_task(self.metalog.follow_forever(), name="meta-follow")
        await self._serve_clients()
        self._report_offsets = loop.create_task(self.offset_reporter.run(), name="offset-reports")
        self._report_status = loop.create_task(self.admin.run(), name="broker-status")
        if self.metalog.mode is MetaMode.WRITER:
            self._taken_over()
        if self.pre_online:  # §5.3: no registration, no writes, until the consumer state is back
            self.permission.update(pre_online=True)
            self._pre_online = loop.create_task(self.acting.run_pre_online(self._peer_client, self._go_online), name="pre-online")
        self.nameserver.start()
        if self.members is not None:
            self.members.start()
        if self.replicas is not None:
            self.replicas.start()  # a master whose store fails steps down (ReplicasManager)
        else:
            self._in_background(self._repair_store_in_place(), "store-repair")

    async def _serve_clients(self) -> None:
        """The services every edge calls, then the client endpoints over them: gRPC and remoting."""
        loop = asyncio.get_running_loop()
        ports = ServicePorts(  # what the services need of this broker (brokers/services.py)
            gate=self.permission,  # with acting(): whether sends go to the master (brokers/core/admission.py)
            acting=lambda: self.metalog.mode is MetaMode.ACTING,
            topics_changed=self.nameserver.register_soon,
            offset_committed=self.offset_reporter.committed,
            report_sealed=lambda sealed: self.nameserver.call("static_topic_sealed", sealed),
            may_seal=lambda: self.metalog.mode is MetaMode.WRITER,  # static topics: the master seals
        )
        services = self.services = BrokerServices(
            self.config, self.store, self.topics, self.consumer_meta, self.metalog, ports, self.traffic
        )
        self.grpc_service = GrpcEndpoint(self.config, services, self.topics, self.access)
        self.grpc_server = await serve(self.grpc_service)
        self._revive = loop.create_task(services.consuming.revive_forever(), name="revive")
        self.remoting_service = RemotingEndpoint(
            self.config,
            self.store,
            self.topics,
            services,
            RemotingPorts(
                writer=lambda: self.metalog.mode is MetaMode.WRITER,
                serving=lambda: self.metalog.mode in (MetaMode.WRITER, MetaMode.ACTING),
                ask_replicas=self._ask_replicas,
            ),
            self.access,
        )
        self.remoting.handle_all(self.remoting_service.handlers())
        self.remoting.on_closed(self.remoting_service.clients.connection_closed)
        # The set's transaction checks run where its special services do (reference §5.1): on the
        # master, or on the slave acting for a dead one.
        checks = TransactionChecks(
            services.transactions,
            EitherProducers(self.grpc_service.producers, self.remoting_service.clients),
            self._peer_client,
            self._group_members,
            self.config.broker_addr,
            self.config.transactionCheckInterval,
            serving=lambda: self.metalog.mode in (MetaMode.WRITER, MetaMode.ACTING),
        )
        self.remoting.handle_all(peer_handlers(self._peer_guard, checks.handlers()))
        self._transactions = loop.create_task(checks.run(), name="transactions")

    async def _repair_store_in_place(self) -> None:
        """Classic mode has no controller to move mastership: a failed store is repaired in place
        once its disk takes writes again, instead of refusing every send until a restart."""
        while True:
            await self.store.failed.wait()
            await self.store.repair_when_possible()

    async def _go_online(self) -> None:
        """The end of pre-online: a master records its (possibly adopted) state, takes writes, registers."""
        if BrokerRole(self.config.brokerRole) is not BrokerRole.SLAVE:
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
        if self.remoting_service is not None:
            self.remoting.withdraw(self.remoting_service.handlers(), "the broker is shutting down")
            await self.remoting_service.close()
        if self.grpc_server is not None:
            await cancel_and_wait(self._revive, self._transactions)
            await self.grpc_server.stop(grace=2)
            await self.timers.deactivate()
            self.services.consuming.persist_offsets()
            await self.grpc_service.close()
            await self.services.close()
        await cancel_and_wait(self._report_offsets, self._report_status, self._retention, self._follow, *self._background)
        if self.members is not None:
            await self.members.stop()
        await self.nameserver.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        await self.remoting.stop()
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

    async def _snapshot_asked(self, body: dict) -> dict:
        """A replica without a base asks for a snapshot record (only a master writes one)."""
        if self.metalog.mode is not MetaMode.WRITER:
            raise PeerRefused(ResponseCode.SYSTEM_ERROR, "not the master of this broker set")
        self.metalog.want_snapshot()
        return {}

    async def _ask_replicas(self, code: int, body: dict) -> list[dict]:
        """The lock quorum (brokers/remoting/locks.py): the answers of this set's other live replicas."""
        members = await self._group_members()
        others = [addr for addr in members.values() if addr != self.config.broker_addr]
        return await gather_replies([self._peer_client.call(addr, code, body) for addr in others])

    async def _ask_master_for_snapshot(self) -> None:
        master = self.replicas.master_addr if self.replicas is not None else self._master_addr
        if master and master != self.config.broker_addr:
            await self._peer_client.call(master, RequestCode.WANT_CONSUMER_META_SNAPSHOT, {})

    def _taken_over(self) -> None:
        """Serving as master now (writes are let in once the caller returns): record the state for
        the slaves, correct offsets beyond their queue's end before new messages pass them, and turn
        the timer wheel."""
        self.metalog.want_snapshot()
        if self.services is not None:
            self._in_background(self.services.consuming.correct_overflows(), "offset-overflow")
            self.services.static.seal_due()
            self.services.transactions.reload()  # rebuilt from this log at its first use
        if self.config.timerWheelEnable:
            self.timers.activate()  # due timers go out from this log's last checkpoint on

    # --- timers while acting for a dead master (RIP-32 escape) -------------------------------------

    def _on_acting(self, acting: bool) -> None:
        """An acting master checks and resolves transactions (kept until its master takes them back);
        with escape on (enableRemoteEscape) it also turns the timer wheel: due timers and commits go
        to another master of the cluster. Without escape, timers and the messages of commits wait for
        their master's return."""
        if self.grpc_service is None or self.services is None:
            return
        escape = self.grpc_service.escape.put if acting and self.config.enableRemoteEscape else None
        self.services.transactions.act(acting, escape)
        if escape is not None and self.config.timerWheelEnable:
            self.timers.activate(escape=escape)
        elif not acting:
            self._in_background(self.timers.deactivate(), "timer-stop")

    async def _resolutions_asked(self, body: dict) -> dict:
        """10060: the transactions this broker resolved while acting (empty: none), and of those the
        commits whose message it sent nowhere (``unsent``: the returning master stores it)."""
        if self.services is None:
            return {}
        ops, unsent = self.services.transactions.handed_back()
        return {"resolutions": {txn: r.value for txn, r in ops.items()}, "unsent": sorted(unsent)} if ops else {}

    def _take_resolutions(self, reply: dict) -> None:
        raw, unsent = reply.get("resolutions"), reply.get("unsent", [])
        if not isinstance(raw, dict) or not isinstance(unsent, list) or self.services is None:
            log.warning("pre-online: refused transaction resolutions %r", reply)
            return
        try:
            taken = {str(txn): Resolution(r) for txn, r in raw.items()}
        except ValueError as exc:
            log.warning("pre-online: refused transaction resolutions (%s)", exc)
            return
        self.services.transactions.adopt(taken, {str(txn) for txn in unsent})
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
        this broker: so isolation survives a restart of this process and a push it missed; and the
        cluster's access-control snapshot (a push it missed only delays a change)."""
        self.access.registered(reply)
        self.ha.on_master_ha_addr(reply.get("haServerAddr"))
        self._master_addr = reply.get("masterAddr") or None
        if self.services is not None:  # static topics: the poll behind the pushes; a seal not decided is reported again
            for mapping in reply.get("staticTopics") or ():
                self.services.static.update(mapping)
            self.services.static.seal_due()
        if "isolated" in reply:  # (a control plane that does not say leaves the last word standing)
            self._set_isolated(reply["isolated"] is True)

    async def _on_static_topic(self, payload: dict) -> None:
        """A static topic's mapping changed (pushed by the control plane)."""
        if self.services is not None and isinstance(payload.get("mapping"), dict):
            self.services.static.update(payload["mapping"])

    async def _on_isolate(self, payload: dict) -> None:
        """An operator isolated this broker (or lifted it): pushed at once, and repeated by every
        registration answer."""
        self._set_isolated(payload.get("isolated") is True)

    def _disk_full(self, full: bool) -> None:
        """The disk passed diskSpaceWarningLevelRatio (or is back): sends refused, and the topics
        registered without write permission, so routes send elsewhere (RocketMQ's brokerPermission); in
        controller mode a master also steps down, as for a failed store, so an in-sync replica takes over."""
        self.permission.update(disk_full=full)
        if self.topics.mask_write(full):
            self.nameserver.register_soon()
        if full and self.replicas is not None:  # controller mode: a master hands its writes to an in-sync replica
            self.replicas.disk_full.set()

    def _set_isolated(self, isolated: bool) -> None:
        if isolated != self.permission.facts.isolated:
            log.warning("isolated by an operator: not taking writes" if isolated else "isolation lifted by an operator")
        self.permission.update(isolated=isolated)

    @property
    def isolated(self) -> bool:
        return self.permission.facts.isolated

    def _config_changed(self) -> None:
        """An operator changed the configuration (brokers/admin.py): the values parts derived from it
        at startup are taken again (the keys they come from are in DYNAMIC_KEYS; every other dynamic
        key is read at use time)."""
        c = self.config
        self.ha.config_changed()  # QuorumConfig: inSyncReplicas ... slaveTimeout
        self.metalog.revive_after_takeover_ms = c.popReviveAfterTakeoverMillis
        self.access.switch(c.authentication_on, c.authorization_on)  # the edges read them at every call
        if self.services is not None:
            transactions = self.services.transactions
            transactions.timeout_ms, transactions.check_max = c.transactionTimeOut, c.transactionCheckMax

    # --- late binding: parts built first tell parts built after them ---------------------------------
    # The HA service and the nameserver link are built before the replicas manager, the member-group
    # tracker and the admin (which need them); they are handed these methods, which forward.

    def _may_register(self) -> bool:
        """With the nameserver: not while fenced (controller mode, reference §2.1 step 1), nor in
        pre-online (§5.3)."""
        if self.replicas is not None:
            return self.replicas.may_register()
        return not self.acting.pre_online

    def _poll_controller(self) -> None:
        """A (re)connected control-plane link: learn the role at once."""
        if self.replicas is not None:
            self.replicas.poll_now()

    def _register_refused(self, _why: str) -> None:
        """e.g. a newer master holds id 0: ask the controller for the role."""
        self._poll_controller()

    async def _role_pushed(self, payload: dict) -> None:
        if self.replicas is not None:
            await self.replicas.on_role_pushed(payload)

    def _sync_state_set_may_change(self, slave_id: int) -> None:
        if self.replicas is not None:
            self.replicas.want_alter(slave_id)

    async def _min_broker_pushed(self, payload: dict) -> None:
        if self.members is not None:
            await self.members.on_pushed(payload)

    def _alive_in_group(self) -> int | None:
        """aliveReplicaNumInGroup (§5.1) for the quorum: None until the group was first seen."""
        members = self.members
        return members.alive_replicas if members is not None and members.current is not None else None

    async def _update_broker_config(self, payload: dict) -> dict:
        return await self.admin.update_broker_config(payload)

    async def _reset_offset(self, payload: dict) -> dict:
        return await self.admin.reset_offset(payload)

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
