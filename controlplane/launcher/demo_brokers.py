"""The demo's replica group: DEMO_BROKERS (3; 0 for none) broker processes of group demo-a in
controller mode, stores under .data/demo-brokers/, a topic DemoTopic; and the demo's certificates
(.data/tls/: a cluster CA, the control plane's, one per broker; docs/acl.md "TLS")."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from testkit.brokers import BrokerPorts, broker_argv, broker_keys, write_broker_conf
from testkit.certs import CertFiles, broker_tls_conf, create_ca, issue, issue_broker
from testkit.procs import Process

from .common import DATA_DIR, display_path, log, start_child

DEMO_REPLICAS = int(os.environ.get("DEMO_BROKERS", "3"))
TOPIC = "DemoTopic"
CLUSTER, GROUP = "DemoCluster", "demo-a"
# The brokers' gRPC and remoting listeners take TLS and plaintext (RocketMQ's permissive: clients started
# without the CA still work); the HA link and the peer channel take mutual TLS only.
DEMO_TLS_MODE = "permissive"


@dataclass(frozen=True)
class DemoTls:
    ca: CertFiles
    control_plane: CertFiles
    brokers: dict[str, CertFiles]  # by broker name (broker-a, ...)


def demo_certificates(directory: Path) -> DemoTls:
    """The CA (made once, kept: clients configured with it keep working across demo runs) and fresh
    leaf certificates each run (a rotation: docs/acl.md)."""
    ca = CertFiles(directory / "ca.pem", directory / "ca-key.pem")
    if not (ca.cert.exists() and ca.key.exists()):
        ca = create_ca(directory, "rmqha demo cluster CA")
    control_plane = issue(ca, directory, "control-plane", "rmqha demo control plane")
    brokers = {_name(i): issue_broker(ca, directory, CLUSTER, GROUP, i) for i in range(DEMO_REPLICAS)}
    return DemoTls(ca, control_plane, brokers)


def demo_acl_keys(path: Path) -> str:
    """The demo's key for ACL users' secret keys at rest (RMQHA_ACL_KEYS, docs/acl.md): made once, owner
    read-only, kept so that the users of earlier runs stay readable."""
    if path.exists():
        return path.read_text().strip()
    from cryptography.fernet import Fernet

    key = Fernet.generate_key().decode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return key


def _name(i: int) -> str:
    return f"broker-{chr(ord('a') + i)}"


@dataclass(frozen=True)
class DemoBroker:
    process: Process
    grpc_port: int


def _topics_file(root: Path) -> None:
    topics = root / "config" / "topics.json"
    if topics.exists():
        return
    topics.parent.mkdir(parents=True, exist_ok=True)
    topics.write_text(
        json.dumps(
            {
                "topicConfigTable": {
                    TOPIC: {"topicName": TOPIC, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
                },
                "dataVersion": {"stateVersion": 0, "counter": 1, "timestamp": 0},
            }
        )
    )


def start_demo_brokers(base: str, token_path: Path, env: dict[str, str], tls: DemoTls | None = None) -> list[DemoBroker]:
    """Not watched: killing one is how to watch a failover. ``tls``: the brokers serve TLS and reach
    the control plane (``base``, https) checking its certificate against the demo's CA."""
    brokers = []
    for i in range(DEMO_REPLICAS):
        name = _name(i)
        tls_keys = (
            {} if tls is None else broker_tls_conf(tls.ca, tls.brokers[name], DEMO_TLS_MODE) | {"controlPlaneCaPath": tls.ca.cert}
        )
        root = DATA_DIR / "demo-brokers" / name
        _topics_file(root)
        ports = BrokerPorts.reserve()
        conf = write_broker_conf(
            root / "broker.conf",
            broker_keys(
                GROUP,
                root,
                ports,
                base,
                cluster=CLUSTER,
                token_file=token_path,
                enableControllerMode=True,
                allAckInSyncStateSet=True,
                mappedFileSizeCommitLog=64 * 1024 * 1024,
                controllerHeartBeatTimeoutMills=3000,
                **tls_keys,
            ),
        )
        child = start_child(name, broker_argv(conf), env)
        log(f"started {name} (pid {child.pid}, log {display_path(child.log_path)})")
        brokers.append(DemoBroker(child, ports.grpc))
    return brokers
