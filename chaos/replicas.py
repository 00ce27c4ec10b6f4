"""The broker processes of one replica group: configuration files, start / kill -9 / SIGSTOP, and
what their store folders hold after a run (commit log segments, epoch file).

``controller`` mode is the issue's: every replica sets ``enableControllerMode=true``, gets its id
and role from the controller, and the master registers with the nameserver as id 0. ``classic`` mode
(a SYNC_MASTER with brokerId 0 and SLAVEs with fixed ids and ``haMasterAddress``) has no failover;
the runner uses it to check itself against the classic replication that exists already."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from brokers.ha.epoch import EPOCH_FILE_NAME, EpochEntry, EpochFileCorrupt, parse_checkpoint
from testkit.brokers import BrokerPorts, broker_argv, broker_keys, broker_process, watch_broker_log, write_broker_conf
from testkit.netns import Host

CLUSTER = "chaos"
GROUP = "chaos-a"


@dataclass(frozen=True)
class GroupSettings:
    replicas: int = 2
    all_ack: bool = True
    in_sync_replicas: int = 1  # inSyncReplicas; with all_ack the SyncStateSet decides instead
    heartbeat_interval_ms: int = 1000  # brokerHeartbeatInterval
    heartbeat_timeout_ms: int = 3000  # controllerHeartBeatTimeoutMills
    segment_bytes: int = 4 * 1024 * 1024
    mode: str = "controller"  # controller | classic
    extra: dict[str, str] = field(default_factory=dict)  # more broker.conf keys, verbatim

    @property
    def expects_no_loss(self) -> bool:
        """Every acknowledged message is on at least two replicas (or on every in-sync one)."""
        return self.all_ack or self.in_sync_replicas >= 2

    @property
    def in_sync_replicas_key(self) -> int:
        # Classic mode has no SyncStateSet: all-ack there means a SYNC_MASTER waiting for every replica.
        return self.replicas if self.mode == "classic" and self.all_ack else self.in_sync_replicas


class BrokerNode:
    """One replica: a fixed name (n1, n2, ...), fixed ports and store folder across restarts. With a
    ``host`` (testkit.netns), it runs in that host's network namespace and binds and advertises the
    host's address (brokerIP1) instead of 127.0.0.1."""

    def __init__(self, index: int, run_dir: Path, env: dict[str, str], host: Host | None = None):
        self.index = index
        self.name = f"n{index}"
        self.host = host
        self.ip = host.ip if host else "127.0.0.1"
        self.root = run_dir / "brokers" / self.name
        self.ports = BrokerPorts.reserve()
        self.listen_port, self.ha_port, self.grpc_port = self.ports.listen, self.ports.ha, self.ports.grpc
        self.conf = self.root / "broker.conf"
        self.log = log = run_dir / "logs" / f"broker-{self.name}.log"
        name = f"broker-{self.name}"
        if host is not None:
            self.process = host.process(name, broker_argv(self.conf), watch_broker_log(log), env)
        else:
            self.process = broker_process(name, self.conf, log, env)

    @property
    def addr(self) -> str:
        return f"{self.ip}:{self.listen_port}"

    @property
    def grpc_addr(self) -> str:
        return f"{self.ip}:{self.grpc_port}"

    @property
    def ha_addr(self) -> str:
        return f"{self.ip}:{self.ha_port}"

    def configure(self, settings: GroupSettings, control_plane_url: str, token: str, master_ha_addr: str | None = None) -> None:
        s = settings
        lines = broker_keys(
            GROUP,
            self.root,
            self.ports,
            control_plane_url,
            cluster=CLUSTER,
            token=token,
            brokerIP1=self.ip,
            mappedFileSizeCommitLog=s.segment_bytes,
            brokerHeartbeatInterval=s.heartbeat_interval_ms,
            brokerNotActiveTimeoutMillis=s.heartbeat_timeout_ms,
            totalReplicas=s.replicas,
            inSyncReplicas=s.in_sync_replicas_key,
            minInSyncReplicas=1,
            allAckInSyncStateSet=s.all_ack,
            haSendHeartbeatInterval=500,
            haHousekeepingInterval=3000,
        )
        if s.mode == "controller":
            lines |= {
                "enableControllerMode": True,
                "controllerHeartBeatTimeoutMills": s.heartbeat_timeout_ms,
                "brokerElectionPriority": self.index,
            }
        elif self.index == 1:
            lines |= {"brokerId": 0, "brokerRole": "SYNC_MASTER"}
        else:
            lines |= {"brokerId": self.index - 1, "brokerRole": "SLAVE"}
        if master_ha_addr:  # a fixed master HA address (e.g. a fault proxy): only while that master lasts
            lines["haMasterAddress"] = master_ha_addr
        lines |= s.extra
        write_broker_conf(self.conf, lines)

    # --- what the store holds (read with the broker stopped) -------------------------------------

    def segments(self) -> list[tuple[int, Path]]:
        d = self.root / "commitlog"
        if not d.is_dir():
            return []
        return sorted((int(p.name), p) for p in d.iterdir() if p.name.isdigit())

    def log_span(self) -> tuple[int, int]:
        """(first offset, end offset) of the commit log files; (0, 0) when there are none."""
        segs = self.segments()
        if not segs:
            return 0, 0
        last_start, last_path = segs[-1]
        return segs[0][0], last_start + last_path.stat().st_size

    def read_log(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the commit log, from the segment files (missing bytes read as empty)."""
        out = bytearray()
        for seg_start, path in self.segments():
            size = path.stat().st_size
            lo, hi = max(start, seg_start), min(end, seg_start + size)
            if lo >= hi:
                continue
            with open(path, "rb") as f:
                f.seek(lo - seg_start)
                out += f.read(hi - lo)
        return bytes(out)

    def epoch_entries(self) -> list[EpochEntry] | str:
        """The epoch file's entries, or why it cannot be read."""
        for path in (self.root / EPOCH_FILE_NAME, self.root / (EPOCH_FILE_NAME + ".bak")):
            try:
                return parse_checkpoint(path.read_text())
            except FileNotFoundError:
                continue
            except (EpochFileCorrupt, UnicodeDecodeError) as exc:
                return f"unreadable: {exc}"
        return []
