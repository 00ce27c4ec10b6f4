"""Slave-acting-master with real broker processes (classic master/slave, enableSlaveActingMaster;
RIP-32, reference §5.1 and §5.3) and the official client: while the master is down the slave serves
the group from the offsets and pop state it followed (nothing acknowledged comes again) and revives
expired pops; its member-group poll finds the master gone with the nameserver's min-broker-id push
off (its default); the returning master stays pre-online, refusing sends and unregistered, until it
has pulled the acting slave's state back, then serves from it."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_consumer_failover import official_consumer, receive_ids
from tests.e2e.test_replication import Replica, send, stop_all
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

ACTING = dict(
    enableSlaveActingMaster="true", totalReplicas=2, brokerNotActiveTimeoutMillis=10000, syncBrokerMemberGroupPeriod=500
)


def acting_pair(tmp_path, base: str, token: str, **extra) -> tuple[Replica, Replica]:
    """group-a's master and slave in classic mode with slave-acting-master (not started)."""
    master = Replica(tmp_path, "master", 0, "SYNC_MASTER", base, token, inSyncReplicas=2, **ACTING, **extra)
    slave = Replica(tmp_path, "slave", 1, "SLAVE", base, token, **ACTING, **extra)
    return master, slave


def test_the_acting_master_serves_the_group_and_the_returning_master_takes_its_state_back(tmp_path):
    token = ApiToken.issue("acting-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('acting-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        master, slave = acting_pair(tmp_path, base, token)

        def route_master_grpc() -> str | None:
            r = httpx.get(f"{base}/api/v1/nameserver/routes/Replicated", headers=admin, timeout=5)
            if r.status_code != 200:
                return None
            return r.json()["brokerDatas"][0].get("brokerGrpcAddrs", {}).get("0")

        r = httpx.patch(f"{base}/api/v1/nameserver/config", headers=admin, timeout=5, json={"supportActingMaster": True})
        assert r.status_code == 200, r.text
        try:
            master.start()
            slave.start()
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 60, "the master taking writes with its slave")
            assert send(master.grpc_port, 299, first=1) == {pb.Code.OK: 299}
            consumer = official_consumer(master.grpc_port)
            try:
                acked = {m.message_id for m in receive_ids(consumer, 100, ack=True)}
            finally:
                consumer.shutdown()
            assert len(acked) == 100

            acting_before = broker_log(slave).count("-> ACTING")
            master.stop()  # unregisters: the slave is the group's smallest id
            wait_for(lambda: route_master_grpc() == f"127.0.0.1:{slave.grpc_port}", 30, "the slave routed as acting master")
            # No push (notifyMinBrokerIdChanged is off): the slave's member-group poll finds it is the minimum.
            wait_for(lambda: broker_log(slave).count("-> ACTING") > acting_before, 10, "the slave acting as master")
            consumer = official_consumer(slave.grpc_port)
            try:
                served = receive_ids(consumer, 100, ack=True)
                assert {m.message_id for m in served}.isdisjoint(acked), "acknowledged messages delivered again"
                acked |= {m.message_id for m in served}
                expiring = receive_ids(consumer, 5, ack=False, invisible_s=2)
                assert len(expiring) == 5
                want = {m.message_id for m in expiring}
                again: list = []
                deadline = time.monotonic() + 30
                while {m.message_id for m in again} != want and time.monotonic() < deadline:
                    for m in consumer.receive(16, 30):
                        if m.message_id in want:
                            again.append(m)
                        consumer.ack(m)
                        acked.add(m.message_id)
                assert {m.message_id for m in again} == want, "the acting master did not revive expired pops"
                assert all(m.delivery_attempt == 2 for m in again)
            finally:
                consumer.shutdown()
            assert send(slave.grpc_port, 1, first=90_000) != {pb.Code.OK: 1}  # read-only: sends go elsewhere

            # The master returns while its slave cannot answer: pre-online waits, refusing sends.
            os.killpg(slave.proc.pid, signal.SIGSTOP)
            try:
                master.start()
                time.sleep(4)
                assert send(master.grpc_port, 1, first=91_000) != {pb.Code.OK: 1}
                assert route_master_grpc() != f"127.0.0.1:{master.grpc_port}"  # not registered yet
            finally:
                os.killpg(slave.proc.pid, signal.SIGCONT)
            wait_for(lambda: route_master_grpc() == f"127.0.0.1:{master.grpc_port}", 60, "the master back online")
            assert "pre-online: took back the consumer state" in broker_log(master)

            consumer = official_consumer(master.grpc_port)
            left = 300 - len(acked)
            try:
                rest = receive_ids(consumer, left, ack=True, timeout_s=60)
                extra = consumer.receive(16, 30)
            finally:
                consumer.shutdown()
            redelivered = {m.message_id for m in rest} & acked
            assert not redelivered, f"{len(redelivered)} acknowledged messages delivered again by the returning master"
            assert len(rest) == left and not extra
        finally:
            stop_all(master, slave)


def broker_log(replica: Replica) -> str:
    from testkit.procs import ARTIFACTS

    logs = sorted(ARTIFACTS.glob(f"broker-{replica.name}-{os.getpid()}-*.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1].read_text() if logs else ""
