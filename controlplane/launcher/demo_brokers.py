"""The demo's replica group: DEMO_BROKERS (3; 0 for none) broker processes of group demo-a in
controller mode, stores under .data/demo-brokers/, a topic DemoTopic."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from testkit.brokers import BrokerPorts, broker_argv, broker_keys, write_broker_conf
from testkit.procs import Process

from .common import DATA_DIR, display_path, log, start_child

DEMO_REPLICAS = int(os.environ.get("DEMO_BROKERS", "3"))
TOPIC = "DemoTopic"


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


def start_demo_brokers(base: str, token_path: Path, env: dict[str, str]) -> list[DemoBroker]:
    """Not watched: killing one is how to watch a failover."""
    brokers = []
    for i in range(DEMO_REPLICAS):
        name = f"broker-{chr(ord('a') + i)}"
        root = DATA_DIR / "demo-brokers" / name
        _topics_file(root)
        ports = BrokerPorts.reserve()
        conf = write_broker_conf(
            root / "broker.conf",
            broker_keys(
                "demo-a",
                root,
                ports,
                base,
                cluster="DemoCluster",
                token_file=token_path,
                enableControllerMode=True,
                allAckInSyncStateSet=True,
                mappedFileSizeCommitLog=64 * 1024 * 1024,
                controllerHeartBeatTimeoutMills=3000,
            ),
        )
        child = start_child(name, broker_argv(conf), env)
        log(f"started {name} (pid {child.pid}, log {display_path(child.log_path)})")
        brokers.append(DemoBroker(child, ports.grpc))
    return brokers
