"""A running test bed: the control plane, one replica group of broker processes, a topic, and the
observer. Knows who the master is, whether a replica is back in sync, and stops everything it
started (in reverse order), also after an error or Ctrl-C.

With a ``network`` (testkit.netns.Network), every broker runs on a host of its own (``n1``, ``n2``,
...: a network namespace) and the control plane on the root-namespace host ``cp``, so that
chaos/partition.py can cut real network paths between them; the test process stays the observer
and the client, reaching every host. The network's owner closes it after :meth:`Harness.stop`."""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

from testkit.controlplane import ControlPlane, ScaledControlPlane
from testkit.netns import Host, Network
from testkit.procs import wait_until

from .api import ControlPlaneApi
from .monitor import Monitor
from .replicas import CLUSTER, GROUP, BrokerNode, GroupSettings

TOPIC = "ChaosTopic"
QUEUES = 4
READY_TIMEOUT_S = 90.0


class Harness:
    def __init__(
        self,
        settings: GroupSettings,
        run_dir: Path,
        env: dict[str, str],
        *,
        scan_interval_ms: int = 1000,
        verbose: bool = True,
        controlplane: ControlPlane | ScaledControlPlane | None = None,
        network: Network | None = None,
    ):
        """``controlplane``: one its caller started and stops (e.g. several web processes behind a
        balancer); by default the harness starts and stops a ControlPlane of its own. ``network``:
        place the brokers and the control plane on hosts of it (see the module docstring; a
        ``controlplane`` of the caller's must then serve at the network's host ``cp``)."""
        self.settings = settings
        self.run_dir = run_dir
        self.scan_interval_ms = scan_interval_ms
        self.verbose = verbose
        self.network = network
        self.controlplane_host: Host | None = None
        cp_ip = "127.0.0.1"
        if network is not None:
            self.controlplane_host = network.hosts.get("cp") or network.root_host("cp")
            cp_ip = self.controlplane_host.ip
            # the brokers' requests and websockets name it as their Host and Origin
            env = env | {"DJANGO_ALLOWED_HOSTS": f"{env.get('DJANGO_ALLOWED_HOSTS', '127.0.0.1,localhost')},{cp_ip}"}
        self.env = env
        self.owns_controlplane = controlplane is None
        self.controlplane = controlplane or ControlPlane(env, run_dir / "logs", host=cp_ip)
        self.nodes = [
            BrokerNode(i, run_dir, env, network.host(f"n{i}") if network else None) for i in range(1, settings.replicas + 1)
        ]
        self.api: ControlPlaneApi | None = None
        self.monitor: Monitor | None = None
        self.started_at = time.monotonic()
        self.events: list[tuple[float, str]] = []
        self.broker_token = ""
        self.admin_token = ""
        self.fixed_ha_addr: dict[str, str] = {}  # node -> haMasterAddress (e.g. a fault proxy)

    @property
    def controller_mode(self) -> bool:
        return self.settings.mode == "controller"

    def note(self, text: str) -> None:
        t = time.monotonic()
        self.events.append((t, text))
        if self.verbose:
            print(f"[chaos {t - self.started_at:7.2f}s] {text}", file=sys.stderr, flush=True)

    # --- start / stop -----------------------------------------------------------------------------

    def start(self, before_slaves=None) -> None:
        """Control plane, tokens, controller settings, the master, then the slaves (``before_slaves``
        is called with the master node first, e.g. to put a proxy in front of it), then the topic."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.owns_controlplane:
            self.controlplane.start()
        self.note(f"control plane up at {self.controlplane.url} (logs in {self.run_dir / 'logs'})")
        tag = secrets.token_hex(3)
        self.broker_token = self.controlplane.issue_token(f"chaos-broker-{tag}", "broker")
        self.admin_token = admin_token = self.controlplane.issue_token(f"chaos-admin-{tag}", "admin")
        (self.run_dir / "admin.token").write_text(admin_token + "\n")
        self.api = self.new_api()
        scan = self.scan_interval_ms
        self.api.update_controller_config({"scanNotActiveBrokerInterval": scan, "scanInactiveMasterInterval": scan})
        self.api.update_nameserver_config({"scanNotActiveBrokerInterval": scan})
        # The first replica starts alone, so it is the first master whatever the election order.
        first, rest = self.nodes[0], self.nodes[1:]
        self._configure(first)
        first.process.start()
        took = wait_until(
            lambda: self.master_node() is first and self._registered(first), READY_TIMEOUT_S, f"{first.name} as the first master"
        )
        self.note(f"{first.name} is the master ({took:.2f} s after its start)")
        if before_slaves is not None:
            before_slaves(first)
        for node in rest:
            self._configure(node)
            node.process.start()
        took = wait_until(lambda: all(self.in_sync(n) for n in rest), READY_TIMEOUT_S, "every slave in sync")
        self.note(f"{', '.join(n.name for n in rest)} in sync ({took:.2f} s after their start)")
        self.api.create_topic(TOPIC, GROUP, QUEUES)
        wait_until(
            lambda: all(self.has_topic(n) for n in self.nodes) and self.route_ready(),
            READY_TIMEOUT_S,
            f"topic {TOPIC} on every replica and in the route",
        )
        self.monitor = Monitor(self.new_api(), CLUSTER, GROUP, self.controller_mode)
        self.monitor.start()
        self.note(f"group {GROUP} ready: {', '.join(self.describe(n) for n in self.nodes)}")

    def new_api(self) -> ControlPlaneApi:
        """A client of its own (one per thread)."""
        return ControlPlaneApi(self.controlplane.url, self.admin_token)

    def _configure(self, node: BrokerNode) -> None:
        node.configure(self.settings, self.controlplane.url, self.broker_token, self.fixed_ha_addr.get(node.name))

    def stop_brokers(self) -> dict[str, int | None]:
        """A clean stop of every broker (SIGTERM), the slaves first so that no election runs while
        the group shuts down; returns their exit codes."""
        master = self.master_node()
        order = [n for n in self.nodes if n is not master] + ([master] if master else [])
        return {n.name: n.process.stop() for n in order}

    def stop(self) -> None:
        """Everything this harness started, each by its own process id; safe to call twice."""
        try:  # the slaves first, so that no election runs while the group shuts down
            master = self.master_node() if self.api is not None else None
        except Exception:
            master = None
        steps = [(n.name, n.process.stop) for n in sorted(self.nodes, key=lambda n: n is master)]
        if self.owns_controlplane:
            steps += [(p.name, p.stop) for p in (self.controlplane.beat, self.controlplane.worker, self.controlplane.web)]
        if self.monitor is not None:
            steps.insert(0, ("monitor", self.monitor.stop))
        for name, stop in steps:
            try:
                stop()
            except Exception as exc:  # keep stopping the rest
                print(f"stopping {name}: {exc!r}", file=sys.stderr)
        for api in (self.monitor.api if self.monitor else None, self.api):
            if api is not None:
                api.close()

    # --- who is who ----------------------------------------------------------------------------------

    def node_by_addr(self, addr: str | None) -> BrokerNode | None:
        return next((n for n in self.nodes if n.addr == addr), None)

    def node_by_grpc(self, addr: str | None) -> BrokerNode | None:
        return next((n for n in self.nodes if n.grpc_addr == addr), None)

    def broker_id(self, node: BrokerNode) -> int | None:
        if not self.controller_mode:
            return 0 if node.index == 1 else node.index - 1
        info = self.api.replica_info(GROUP)
        return next((i for i, a in (info.members if info else {}).items() if a == node.addr), None)

    def master_node(self) -> BrokerNode | None:
        """The controller's master (controller mode) or the route's id 0 (classic mode)."""
        if self.controller_mode:
            info = self.api.replica_info(GROUP)
            return self.node_by_addr(info.master_address) if info and info.master_broker_id is not None else None
        return self.node_by_grpc(self.api.master_grpc_addr_from_route(TOPIC, GROUP)) or (
            self.nodes[0] if self.nodes[0].process.alive() else None
        )

    def resolve(self, api: ControlPlaneApi, via: str = "controller") -> tuple[str, str] | None:
        """The producer's view: (node name, gRPC address) of the master, from the controller's
        replica info or from the nameserver's route of the topic."""
        try:
            if via == "controller" and self.controller_mode:
                info = api.replica_info(GROUP)
                node = self.node_by_addr(info.master_address) if info and info.master_broker_id is not None else None
            else:
                node = self.node_by_grpc(api.master_grpc_addr_from_route(TOPIC, GROUP))
        except Exception:
            return None
        return (node.name, node.grpc_addr) if node else None

    def levels(self) -> dict[str, dict]:
        """brokerAddr -> latest water-level report (fetched now)."""
        return {w["brokerAddr"]: w for w in self.api.water_levels(CLUSTER, GROUP)}

    def in_sync(self, node: BrokerNode) -> bool:
        """A slave that follows the master: in the SyncStateSet (controller mode) or, in classic mode,
        connected to the master with less than 1 MiB to copy."""
        if not node.process.alive():
            return False
        if self.controller_mode:
            info = self.api.replica_info(GROUP)
            if info is None or info.master_broker_id is None:
                return False
            node_id = next((i for i, a in info.members.items() if a == node.addr), None)
            return node_id is not None and node_id in info.sync_state_set
        master = self.levels().get(self.nodes[0].addr)
        wanted = node.index - 1
        return master is not None and any(s["brokerId"] == wanted and s["lagBytes"] < 1 << 20 for s in master["slaves"])

    def rejoined_as_slave(self, node: BrokerNode, epoch: int | None = None) -> bool:
        """Reports itself as a SLAVE (at ``epoch`` or later, when given) and is back in sync."""
        report = self.levels().get(node.addr)
        if report is None or report["role"] != "SLAVE" or (epoch is not None and report["masterEpoch"] < epoch):
            return False
        return self.in_sync(node)

    def _registered(self, node: BrokerNode) -> bool:
        """Registered with the nameserver (a classic slave learns its master's HA address there)."""
        return node.addr in self.api.cluster_members(CLUSTER, GROUP).values()

    def has_topic(self, node: BrokerNode) -> bool:
        path = node.root / "config" / "topics.json"
        return path.exists() and TOPIC in json.loads(path.read_text())["topicConfigTable"]

    def route_ready(self) -> bool:
        return self.api.master_grpc_addr_from_route(TOPIC, GROUP) is not None

    def converged(self) -> bool:
        """Every replica alive and reporting, all at the same max offset, the master's confirm offset
        there too (a read-back from the master then sees everything)."""
        levels = self.levels()
        reports = [levels.get(n.addr) for n in self.nodes]
        if any(r is None for r in reports) or not all(n.process.alive() for n in self.nodes):
            return False
        ends = {r["maxOffset"] for r in reports}
        master = self.master_node()
        return len(ends) == 1 and master is not None and levels[master.addr]["confirmOffset"] == ends.pop()

    def describe(self, node: BrokerNode) -> str:
        role = "master" if self.master_node() is node else "slave"
        return f"{node.name}={node.addr} (grpc {node.grpc_port}, ha {node.ha_port}, {role})"
