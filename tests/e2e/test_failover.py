"""Controller mode with real broker processes, a real control plane and Celery (reference §2.1-2.3,
seed 004): ids and roles come from the controller; kill -9 of the master elects the slave, which
takes writes at once (its route changes in the nameserver immediately); with allAckInSyncStateSet
no acknowledged message is lost; the old master returns as a slave, cuts its divergent tail and
catches up byte for byte."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from brokers.topics import TopicConfig, TopicConfigManager
from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_replication import Replica, send, stop_all
from tests.procs import ROOT, celery_worker_and_beat, child_env, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_kill_9_of_the_master_fails_over_without_losing_an_acknowledged_message(tmp_path):
    token = ApiToken.issue("failover-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('failover-admin', 'admin')[1]}"}
    with uvicorn_server() as base, celery_worker_and_beat():
        replicas = two_replicas(tmp_path, base, token, allAckInSyncStateSet="true", controllerHeartBeatTimeoutMills=3000)
        info, master_of = group_views(base, admin, replicas)
        try:
            before, master, slave = start_in_sync(replicas, info, master_of)
            assert master is not None and before["masterEpoch"] >= 1
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
            acked = 1 + send(master.grpc_port, 2000, first=1)[pb.Code.OK]
            assert slave.log_size() == master.log_size()  # all-ack: acknowledged only once the slave had it

            master.stop(signal.SIGKILL)
            killed = time.monotonic()
            wait_for(lambda: send(slave.grpc_port, 1, first=10_000).get(pb.Code.OK) == 1, 30, "the new master")
            rto = time.monotonic() - killed
            after = info()
            assert master_of(after) is slave and after["masterEpoch"] == before["masterEpoch"] + 1
            route = httpx.get(f"{base}/api/v1/nameserver/routes/Replicated", headers=admin, timeout=5).json()
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{slave.listen_port}"}
            print(f"group RTO after kill -9: {rto:.2f} s")
            acked += 1 + send(slave.grpc_port, 500, first=20_000)[pb.Code.OK]
            assert slave.log_size() > 0

            master.start()  # the old master returns: a slave now, it catches up with the new master
            wait_for(
                lambda: len(info().get("syncStateSet", [])) == 2 and master.log_bytes() == slave.log_bytes(),
                60,
                "the old master back in the SyncStateSet",
            )
            assert master_of(info()) is slave
            levels = httpx.get(
                f"{base}/api/v1/nameserver/water-levels", params={"clusterName": "repl"}, headers=admin, timeout=5
            ).json()["waterLevels"]
            roles = {w["brokerId"]: w["role"] for w in levels}
            assert sorted(roles.values()) == ["SLAVE", "SYNC_MASTER"]
            # The slave first: a master stopped first would have its slave elected, and a new master
            # records its consumer state (a snapshot record) in its log.
            stop_all(master, slave)
        finally:
            stop_all(*replicas)
        assert master.log_bytes() == slave.log_bytes()
        stored = sum(1 for _ in iter_messages(slave))
        assert stored >= acked == 2502
        check = subprocess.run(
            [sys.executable, "manage.py", "check_controller_invariants"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=child_env(),
        )
        assert check.returncode == 0, check.stdout + check.stderr


def two_replicas(tmp_path, base: str, token: str, **extra) -> list[Replica]:
    """Two brokers of group-a in controller mode (not started)."""
    return controller_replicas(tmp_path, base, token, ("a", "b"), **extra)


def controller_replicas(tmp_path, base: str, token: str, names: tuple[str, ...], **extra) -> list[Replica]:
    """Brokers of group-a in controller mode (not started), one per name."""
    settings = dict(
        enableControllerMode="true",
        brokerHeartbeatInterval=500,
        checkSyncStateSetPeriod=1000,
        syncBrokerMetadataPeriod=1000,
        **extra,
    )
    return [Replica(tmp_path, name, 0, "SYNC_MASTER", base, token, **settings) for name in names]


@dataclass
class Group:
    """A running group-a: the control plane's URL, an admin token's headers, the replicas, the master
    when it was first in sync, and the controller's view (``info()``, ``master_of(state)``)."""

    base: str
    admin: dict[str, str]
    replicas: list[Replica]
    master: Replica
    info: Callable[[], dict]
    master_of: Callable[[dict], Replica | None]


@contextmanager
def in_sync_group(
    tmp_path: Path, tag: str, topics: tuple[TopicConfig, ...] = (), env: dict[str, str] | None = None, **extra
) -> Iterator[Group]:
    """A control plane, Celery (both with ``env`` besides the test's) and three all-ack replicas of
    group-a (with ``topics`` besides the test kit's; ``extra`` broker keys over these) in sync with a
    master taking writes. Everything is stopped on the way out."""
    token = ApiToken.issue(f"{tag}-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue(f'{tag}-admin', 'admin')[1]}"}
    env = env or {}
    with uvicorn_server(**env) as base, celery_worker_and_beat(**env):
        settings = {"allAckInSyncStateSet": "true", "controllerHeartBeatTimeoutMills": 3000} | extra
        replicas = controller_replicas(tmp_path, base, token, ("a", "b", "c"), **settings)
        for r in replicas:
            for topic in topics:
                TopicConfigManager(r.root / "config" / "topics.json").update(topic)
        info, master_of = group_views(base, admin, replicas)
        try:
            for r in replicas:
                r.start()
            wait_for(lambda: len(info().get("syncStateSet", [])) == 3, 60, "a master with all three replicas in sync")
            master = master_of(info())
            assert master is not None
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
            yield Group(base, admin, replicas, master, info, master_of)
        finally:
            stop_all(*replicas)


@contextmanager
def three_replicas(
    tmp_path: Path, tag: str, topics: tuple[TopicConfig, ...] = (), **extra
) -> Iterator[tuple[list[Replica], Replica, object, object]]:
    """``in_sync_group`` as (replicas, master, info, master_of)."""
    with in_sync_group(tmp_path, tag, topics, **extra) as g:
        yield g.replicas, g.master, g.info, g.master_of


def start_in_sync(replicas: list[Replica], info, master_of) -> tuple[dict, Replica, Replica]:
    """Start the replicas and wait for a master with both in its SyncStateSet: (state, master, slave)."""
    for x in replicas:
        x.start()
    wait_for(lambda: len(info().get("syncStateSet", [])) == 2, 60, "a master with both replicas in sync")
    before = info()
    master = master_of(before)
    return before, master, next(x for x in replicas if x is not master)


def group_views(base: str, admin: dict, replicas: list[Replica]):
    """The controller's view of group-a over REST, and the replica that is its master."""

    def info() -> dict:
        resp = httpx.get(f"{base}/api/v1/controller/groups/group-a/replica-info", headers=admin, timeout=5)
        return resp.json() if resp.status_code == 200 else {}

    def master_of(state: dict) -> Replica | None:
        addr = state.get("masterAddress")
        return next((x for x in replicas if addr and addr.endswith(f":{x.listen_port}")), None)

    return info, master_of


def iter_messages(replica: Replica):
    from brokers.store.commitlog import CommitLog
    from brokers.store.message import Message

    log = CommitLog(replica.root / "commitlog", 8 * 1024 * 1024)
    try:
        for _, record, _ in log.iter_records():
            if isinstance(record, Message):
                yield record
    finally:
        log.close()


def test_a_stopped_master_is_replaced_and_rejoins_as_a_slave_cutting_its_divergent_tail(tmp_path):
    """SIGSTOP of the master longer than its heartbeat timeout: the controller's inactive-master scan
    elects the slave. Availability first (the defaults: nobody waits for the slave), so the old master
    may hold messages the new one never got; back with SIGCONT it must become a slave, cut them (seed
    004 case 1-3/2-3) and copy the new master's log."""
    token = ApiToken.issue("stop-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('stop-admin', 'admin')[1]}"}
    with uvicorn_server() as base, celery_worker_and_beat():
        replicas = two_replicas(tmp_path, base, token, controllerHeartBeatTimeoutMills=2000)
        fast = httpx.patch(
            f"{base}/api/v1/controller/config",
            headers=admin,
            timeout=5,  # docs/failover.md
            json={"scanInactiveMasterInterval": 500, "scanNotActiveBrokerInterval": 500},
        )
        assert fast.status_code == 200, fast.text

        info, master_of = group_views(base, admin, replicas)
        try:
            before, old, new = start_in_sync(replicas, info, master_of)
            wait_for(lambda: send(old.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
            send(old.grpc_port, 500, first=1)
            wait_for(lambda: new.log_size() == old.log_size(), 30, "the slave caught up")
            import os

            os.killpg(old.proc.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                wait_for(lambda: master_of(info()) is new, 30, "the election of the slave")
                wait_for(lambda: send(new.grpc_port, 1, first=10_000).get(pb.Code.OK) == 1, 30, "the new master's writes")
                rto = time.monotonic() - stopped
                send(new.grpc_port, 300, first=20_000)
            finally:
                os.killpg(old.proc.pid, signal.SIGCONT)
            print(f"group RTO after SIGSTOP (heartbeat timeout 2 s): {rto:.2f} s")
            wait_for(
                lambda: old.log_bytes() == new.log_bytes() and len(info().get("syncStateSet", [])) == 2,
                60,
                "the old master following the new one",
            )
            assert master_of(info()) is new and info()["masterEpoch"] == before["masterEpoch"] + 1
            # A slave now: a send it gets is served through the new master (it forwards it).
            before_send = new.log_size()
            assert send(old.grpc_port, 1, first=30_000) == {pb.Code.OK: 1}
            assert new.log_size() > before_send
            wait_for(lambda: old.log_bytes() == new.log_bytes(), 30, "the forwarded send copied back to the slave")
            stop_all(old, new)  # the slave first (see the test above)
        finally:
            stop_all(*replicas)
        assert old.log_bytes() == new.log_bytes()
