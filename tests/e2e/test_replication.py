"""Replication between real broker processes over real sockets (the RIP-44 link, quorum write):
three replicas converge byte for byte after 100 MB, a SYNC_MASTER waits for its slave and answers
SLAVE_PERSISTENCE_TIMEOUT (FLUSH_SLAVE_TIMEOUT) without it, enableAutoInSyncReplicas downgrades and
upgrades, and a fault-injecting proxy on the HA link (delay, black hole, cuts) leaves no gap and no
duplicate. Water levels are checked through the control plane's REST API."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from brokers.topics import TopicConfig, TopicConfigManager
from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from testkit.faultproxy import FaultProxy
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.e2e]
SEGMENT = 8 * 1024 * 1024
BODY = b"r" * 1024


class Replica:
    def __init__(self, root: Path, name: str, broker_id: int, role: str, control_plane: str, token: str, **extra):
        self.root, self.name = root / name, name
        ports = BrokerPorts.reserve()
        self.grpc_port, self.ha_port, self.listen_port = ports.grpc, ports.ha, ports.listen
        TopicConfigManager(self.root / "config" / "topics.json").update(TopicConfig("Replicated", 4, 4, 6))
        keys = broker_keys(
            "group-a",
            self.root,
            ports,
            control_plane,
            cluster="repl",
            token=token,
            brokerId=broker_id,
            brokerRole=role,
            mappedFileSizeCommitLog=SEGMENT,
            brokerHeartbeatInterval=300,
            haSendHeartbeatInterval=500,
            haHousekeepingInterval=3000,
        )
        self.conf = write_broker_conf(self.root / "broker.conf", keys | extra)
        self.proc = None

    def start(self) -> Replica:
        self.proc = start_broker(self.conf, self.name)
        return self

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def log_bytes(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((self.root / "commitlog").iterdir())}

    def log_size(self) -> int:
        d = self.root / "commitlog"
        return sum(p.stat().st_size for p in d.iterdir()) if d.is_dir() else 0

    def queue_files(self) -> dict[str, bytes]:
        d = self.root / "consumequeue"
        return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def send(port: int, count: int, batch: int = 32, first: int = 0) -> dict[int, int]:
    """Batched SendMessage to a broker; returns {gRPC code: messages}."""
    codes: dict[int, int] = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = rpc.MessagingServiceStub(channel)
        for start in range(first, first + count, batch):
            req = spb.SendMessageRequest(
                messages=[
                    pb.Message(
                        topic=pb.Resource(name="Replicated"),
                        body=BODY,
                        system_properties=pb.SystemProperties(
                            message_id=f"{n:032X}", body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
                        ),
                    )
                    for n in range(start, min(first + count, start + batch))
                ]
            )
            resp = stub.SendMessage(req, timeout=60)
            codes[resp.status.code] = codes.get(resp.status.code, 0) + len(req.messages)
    return codes


def stop_all(*replicas: Replica) -> None:
    for r in replicas:
        r.stop()


@pytest.mark.django_db(transaction=True)
def test_three_replicas_converge_byte_for_byte_after_100_mb_and_report_water_levels(tmp_path):
    token = ApiToken.issue("repl-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('repl-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        quorum = dict(inSyncReplicas=2, totalReplicas=3)
        master = Replica(tmp_path, "master", 0, "SYNC_MASTER", base, token, **quorum)
        # No haMasterAddress: the slaves learn the master's HA address from the nameserver (§2.3).
        slaves = [Replica(tmp_path, f"slave-{i}", i, "SLAVE", base, token) for i in (1, 2)]
        try:
            master.start()
            for s in slaves:
                s.start()

            def levels() -> dict:
                r = httpx.get(f"{base}/api/v1/nameserver/water-levels", params={"clusterName": "repl"}, headers=admin, timeout=5)
                assert r.status_code == 200, r.text
                return {w["brokerId"]: w for w in r.json()["waterLevels"]}

            wait_for(lambda: len(levels().get(0, {}).get("slaves", [])) == 2, 60, "both slaves connected to the master")
            codes = send(master.grpc_port, 100 * 1024)  # 100 MiB of bodies
            assert codes == {pb.Code.OK: 100 * 1024}, codes
            end = master.log_size()
            wait_for(lambda: all(s.log_size() == end for s in slaves), 60, "both slaves at the master's end")

            def settled() -> bool:
                w = levels()
                return (
                    w[0]["maxOffset"] == w[1]["maxOffset"] == w[2]["maxOffset"]
                    and all(s["lagBytes"] == 0 for s in w[0]["slaves"])
                    and w[1]["confirmOffset"] == w[2]["confirmOffset"] == w[0]["maxOffset"]
                )

            wait_for(settled, 30, "water levels showing no lag")
            w = levels()
            assert w[0]["role"] == "SYNC_MASTER" and w[1]["role"] == w[2]["role"] == "SLAVE"
            assert sorted(s["brokerId"] for s in w[0]["slaves"]) == [1, 2]
            assert all(s["ackOffset"] == w[0]["maxOffset"] and s["lastCaughtUpMs"] > 0 for s in w[0]["slaves"])
        finally:
            stop_all(*slaves, master)
        assert w[0]["maxOffset"] > 100 * 1024 * 1024
        reference = master.log_bytes()
        assert len(reference) >= 13 and all(s.log_bytes() == reference for s in slaves)
        assert all(s.queue_files() == master.queue_files() for s in slaves)


UNREACHABLE = "http://127.0.0.1:9"  # no control plane: the link needs none (the brokers keep retrying it)


def test_sync_master_answers_slave_persistence_timeout_while_its_slave_is_stopped(tmp_path):
    master = Replica(
        tmp_path, "master", 0, "SYNC_MASTER", UNREACHABLE, "unused", inSyncReplicas=2, totalReplicas=2, slaveTimeout=1000
    )
    slave = Replica(tmp_path, "slave", 1, "SLAVE", UNREACHABLE, "unused", haMasterAddress=f"127.0.0.1:{master.ha_port}")
    try:
        master.start()
        slave.start()
        wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 60, "a send the slave acknowledged")
        assert send(master.grpc_port, 64) == {pb.Code.OK: 64}
        assert slave.log_size() == master.log_size()  # acknowledged only once the slave had it
        os.killpg(slave.proc.pid, signal.SIGSTOP)  # stopped: the connection stays, acks stop
        try:
            assert send(master.grpc_port, 1) == {pb.Code.SLAVE_PERSISTENCE_TIMEOUT: 1}
        finally:
            os.killpg(slave.proc.pid, signal.SIGCONT)
        wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "acks again after SIGCONT")
        slave.stop(signal.SIGKILL)
        assert send(master.grpc_port, 1) == {pb.Code.SLAVE_PERSISTENCE_TIMEOUT: 1}  # 5.x: a timeout, not a refusal
    finally:
        stop_all(slave, master)
    # What the master stored while the slave was gone is still there, and a restarted slave gets it.
    slave.start()
    try:
        master.start()
        # (the master records its consumer state when the slave's link starts: wait for every byte)
        wait_for(lambda: slave.log_bytes() == master.log_bytes(), 60, "the slave catching up after a restart")
    finally:
        stop_all(slave, master)
    assert slave.log_bytes() == master.log_bytes()


def test_auto_in_sync_replicas_downgrade_when_the_slave_dies_and_come_back_with_it(tmp_path):
    quorum = dict(
        inSyncReplicas=2,
        minInSyncReplicas=1,
        totalReplicas=2,
        enableSlaveActingMaster="true",
        skipPreOnline="true",  # no control plane here: pre-online would wait for the member group
        enableAutoInSyncReplicas="true",
        slaveTimeout=30000,
    )
    master = Replica(tmp_path, "master", 0, "SYNC_MASTER", UNREACHABLE, "unused", **quorum)
    slave = Replica(tmp_path, "slave", 1, "SLAVE", UNREACHABLE, "unused", haMasterAddress=f"127.0.0.1:{master.ha_port}")
    try:
        master.start()
        slave.start()
        wait_for(
            lambda: (
                slave.log_size() == master.log_size()
                and send(master.grpc_port, 1) == {pb.Code.OK: 1}
                and slave.log_size() == master.log_size()
            ),
            60,
            "two replicas in sync",
        )
        assert send(master.grpc_port, 32) == {pb.Code.OK: 32} and slave.log_size() == master.log_size()
        slave.stop(signal.SIGKILL)
        started = time.monotonic()
        assert send(master.grpc_port, 32) == {pb.Code.OK: 32}  # downgraded to minInSyncReplicas=1: no wait
        assert time.monotonic() - started < 20  # far below the 30 s slaveTimeout a wait would take
        alone = master.log_size()
        assert slave.log_size() < alone
        slave.start()
        # (the master records its consumer state when the slave's link starts: its log grows by that)
        wait_for(lambda: slave.log_size() == master.log_size() >= alone, 60, "the slave back in sync")
        assert send(master.grpc_port, 32) == {pb.Code.OK: 32} and slave.log_size() == master.log_size()
    finally:
        stop_all(slave, master)


def test_the_link_recovers_through_delays_black_holes_and_cuts_with_no_gap_and_no_duplicate(tmp_path):
    master = Replica(tmp_path, "master", 0, "ASYNC_MASTER", UNREACHABLE, "unused")
    with FaultProxy(target=("127.0.0.1", master.ha_port)) as proxy:
        slave = Replica(tmp_path, "slave", 1, "SLAVE", UNREACHABLE, "unused", haMasterAddress=proxy.addr)
        sent = {"n": 0}
        errors: list[BaseException] = []
        stop = threading.Event()

        def producer() -> None:
            try:
                while not stop.is_set():
                    codes = send(master.grpc_port, 320, first=sent["n"])
                    assert codes == {pb.Code.OK: 320}, codes
                    sent["n"] += 320
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        try:
            master.start()
            slave.start()
            wait_for(lambda: proxy.connections_accepted >= 1 and slave.log_size() == master.log_size(), 60, "the link")
            thread = threading.Thread(target=producer)
            thread.start()
            try:
                time.sleep(1)
                proxy.delay(0.05)
                time.sleep(2)
                proxy.delay(0)
                proxy.drop(True)  # a black hole: the slave's housekeeping timeout must notice
                time.sleep(1.5)
                proxy.drop(False)
                for _ in range(3):
                    time.sleep(1)
                    proxy.cut()
                time.sleep(1)
            finally:
                stop.set()
                thread.join(timeout=120)
            assert not errors, errors
            assert proxy.connections_accepted >= 4 and proxy.cuts == 3  # it really reconnected
            wait_for(lambda: slave.log_bytes() == master.log_bytes(), 60, "the slave after the faults")
            time.sleep(1.5)  # heartbeats carry the last confirm offset; consume queues are flushed at shutdown
        finally:
            stop_all(slave, master)
    assert sent["n"] >= 320
    assert slave.log_bytes() == master.log_bytes()
    assert slave.queue_files() == master.queue_files()  # every message dispatched once, none missing
