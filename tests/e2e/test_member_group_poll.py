"""The member-group poll finds a new minimum by itself (reference §5.1, §3.7): a real control plane,
a classic master (id 0) and slave (id 1) in real broker processes with enableSlaveActingMaster, and a
MemberGroupTracker in this process with a websocket link of its own standing for the slave. The link
never registers (so no push can be addressed to it) and the tracker installs no push handler: when
the master stops (SIGTERM: it unregisters), the next polls alone report the slave as the minimum."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest

from brokers.config import BrokerConfig
from brokers.control.members import PUSH, MemberGroupTracker, MinBroker
from brokers.control.nameserver import LinkHooks, NameserverLink
from brokers.topics import TopicConfigManager
from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

CLUSTER, NAME = "acting", "broker-acting"
PERIOD_MS = 200


def test_the_poll_alone_finds_the_slave_as_minimum_after_the_master_stops(tmp_path):
    broker_token = ApiToken.issue("acting-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('acting-admin', 'admin')[1]}"}
    master_ports, slave_ports = BrokerPorts.reserve(), BrokerPorts.reserve()
    master_addr, slave_addr = f"127.0.0.1:{master_ports.listen}", f"127.0.0.1:{slave_ports.listen}"
    with uvicorn_server() as base:

        def conf(role: str, broker_id: int, ports: BrokerPorts):
            keys = broker_keys(
                NAME,
                tmp_path / role,
                ports,
                base,
                cluster=CLUSTER,
                token=broker_token,
                brokerId=broker_id,
                brokerRole="SLAVE" if broker_id else "ASYNC_MASTER",
                enableSlaveActingMaster=True,
                mappedFileSizeCommitLog=65536,
                brokerHeartbeatInterval=200,
            )
            return write_broker_conf(tmp_path / role / "broker.conf", keys)

        def members() -> dict:
            query = {"clusterName": CLUSTER, "brokerName": NAME}
            return httpx.get(f"{base}/api/v1/nameserver/brokers/member-group", params=query, headers=admin, timeout=5).json()[
                "brokerAddrs"
            ]

        master = start_broker(conf("master", 0, master_ports), "acting-master")
        slave = start_broker(conf("slave", 1, slave_ports), "acting-slave")
        try:
            wait_for(lambda: members() == {"0": master_addr, "1": slave_addr}, 30, "both brokers' registration")
            config = BrokerConfig(
                brokerName=NAME,
                brokerClusterName=CLUSTER,
                brokerId=1,
                brokerIP1="127.0.0.1",
                listenPort=slave_ports.listen,
                controlPlaneUrl=base,
                controlPlaneToken=broker_token,
                enableSlaveActingMaster=True,
                syncBrokerMemberGroupPeriod=PERIOD_MS,
            )
            asyncio.run(asyncio.wait_for(_scenario(config, tmp_path, master, master_addr, slave_addr), 90))
        finally:
            for proc in (master, slave):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)


async def _scenario(config: BrokerConfig, tmp_path, master, master_addr: str, slave_addr: str) -> None:
    # stands for the slave without registering: pushes go elsewhere
    link = NameserverLink(config, TopicConfigManager(tmp_path / "tracker" / "topics.json"), LinkHooks(may_register=lambda: False))
    changes: list[MinBroker] = []

    async def on_change(change: MinBroker) -> None:
        changes.append(change)

    tracker = MemberGroupTracker(config, link, on_change)
    assert PUSH not in link.on_push
    link.start()
    tracker.start()
    try:
        await asyncio.wait_for(link.connected.wait(), 30)
        await _until(lambda: tracker.current is not None, 10, "the first poll")
        assert tracker.current == MinBroker(0, master_addr, {0: master_addr, 1: slave_addr})
        assert tracker.alive_replicas == 2

        master.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(master.wait, 30) == 0  # a clean stop unregisters the master
        gone = time.monotonic()
        await _until(lambda: tracker.current.min_broker_id == 1, 10, "the slave as minimum")
        took = time.monotonic() - gone
        print(f"the poll found the new minimum {took:.2f} s after the master stopped (period {PERIOD_MS} ms)")
        assert took < 10 * PERIOD_MS / 1000, took  # a few periods, not a timeout
        assert [(c.min_broker_id, c.min_broker_addr, c.offline_addr) for c in changes] == [
            (0, master_addr, None),
            (1, slave_addr, master_addr),
        ]
        assert tracker.current.members == {1: slave_addr} and tracker.alive_replicas == 1
        assert link.min_broker is None  # no push reached this link: the poll alone found it
    finally:
        await tracker.stop()
        await link.stop(unregister=False)  # the real slave is still registered at this address


async def _until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
