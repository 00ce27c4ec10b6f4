"""A real broker process against a real control plane: registration, heartbeats over the websocket,
a topic created through the REST API reaching the broker (stored, surviving a restart) and the
routes, and kill -9 removing the broker at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, broker_process, write_broker_conf
from testkit.procs import wait_until
from tests.procs import ARTIFACTS, create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def start_broker(conf: Path, name: str) -> subprocess.Popen:
    """``python -m brokers -c conf`` in its own process group, logging under test-artifacts/."""
    log_path = ARTIFACTS / f"broker-{name}-{os.getpid()}-{time.time_ns()}.log"
    popen = broker_process(f"broker-{name}", conf, log_path).start().popen
    assert popen is not None
    return popen


def wait_for(predicate, timeout_s: float, what: str) -> float:
    """Poll until truthy (an exception fails the test at once); the seconds it took."""
    return wait_until(predicate, timeout_s, what, tolerate=())


def test_broker_membership_topics_and_kill_9(tmp_path):
    broker_token = ApiToken.issue("e2e-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('e2e-admin', 'admin')[1]}"}
    ports = BrokerPorts.reserve()
    with uvicorn_server() as base:
        conf = write_broker_conf(
            tmp_path / "broker.conf",
            broker_keys(
                "broker-a",
                tmp_path / "store",
                ports,
                base,
                cluster="e2e",
                token=broker_token,
                brokerId=0,
                mappedFileSizeCommitLog=65536,
                brokerHeartbeatInterval=200,
            ),
        )
        addr = f"127.0.0.1:{ports.listen}"

        def members():
            info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
            return info["brokerAddrTable"].get("broker-a", {}).get("brokerAddrs", {})

        proc = start_broker(conf, "a")
        try:
            wait_for(lambda: members() == {"0": addr}, 30, "the broker's registration")
            create_topic(base, admin, "Orders", 4, clusterName="e2e")

            def stored():
                path = tmp_path / "store" / "config" / "topics.json"
                return path.exists() and "Orders" in json.loads(path.read_text())["topicConfigTable"]

            took = wait_for(stored, 10, "the topic on the broker")
            route = httpx.get(f"{base}/api/v1/nameserver/routes/Orders", headers=admin, timeout=5).json()
            assert route["queueDatas"][0]["writeQueueNums"] == 4 and route["brokerDatas"][0]["brokerAddrs"] == {"0": addr}
            print(f"topic stored on the broker {took:.2f} s after the API call")

            # A clean restart: the topic survives on the broker and in the route it registers.
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            proc = start_broker(conf, "a2")
            wait_for(lambda: members() == {"0": addr}, 30, "the restarted broker")
            assert "Orders" in json.loads((tmp_path / "store" / "config" / "topics.json").read_text())["topicConfigTable"]
            assert httpx.get(f"{base}/api/v1/nameserver/routes/Orders", headers=admin, timeout=5).status_code == 200

            # kill -9: the websocket closes and the nameserver unregisters it at once.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            gone = wait_for(lambda: members() == {}, 10, "the killed broker's removal")
            print(f"killed broker removed {gone:.2f} s after kill -9")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
