"""Retention and the disk's guard on real brokers (issue 37), with 1 MiB commit-log files, our retention
key in milliseconds (``fileReservedTimeMillis``) and, for the disk ratios, a tmpfs:

- files are deleted on time; the queues' min offsets follow (GET_MIN_OFFSET answers it); a group behind
  the horizon goes on from the min offset with the official SimpleConsumer, and the broker reports a
  ``retention_skip`` to the audit's event store;
- under pressure: past diskSpaceWarningLevelRatio sends are refused (SERVICE_NOT_AVAILABLE's detail) and
  the route shows the broker's queues read-only; once an operator turns cleanFileForciblyEnable on
  (updateBrokerConfig, a dynamic key) the oldest files go, and the official Producer sends again;
- a slave killed for longer than the retention rejoins from the master's first file, and the two logs
  are then byte-identical from there;
- a static topic's sealed segment expires once its broker set deleted its data, and a move back
  reuses the expired queue (seed 003 tables 3 and 4).
"""

from __future__ import annotations

import signal
import time

import grpc
import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from audits import event_store
from controlplane.models import ApiToken
from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.headers import (
    GET_MAX_OFFSET_REQUEST,
    GET_MIN_OFFSET_REQUEST,
    QUERY_CONSUMER_OFFSET_REQUEST,
    UPDATE_CONSUMER_OFFSET_REQUEST,
)
from testkit.remoting import RemotingClient
from testkit.tmpfs import tmpfs
from tests.e2e.test_acting_master import broker_log
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_replication import Replica, send
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

MIB = 1 << 20
TOPIC, GROUP = "Replicated", "laggard"  # Replica's topic: 4 queues
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))  # deleteWhen: any hour (the retention is in ms here)
RETENTION = {
    "mappedFileSizeCommitLog": MIB,
    "deleteWhen": EVERY_HOUR,
    "cleanResourceInterval": 200,
    "brokerStatusReportInterval": 300,
}


def files(replica: Replica) -> list[int]:
    """The start offsets of a replica's commit-log files."""
    return sorted(int(p.name) for p in (replica.root / "commitlog").iterdir() if p.name.isdigit())


def log_span(replica: Replica) -> tuple[int, int]:
    """(min, max) offsets of a replica's commit log as its files are now ((0, 0) before any)."""
    d = replica.root / "commitlog"
    starts = files(replica) if d.is_dir() else []
    return (starts[0], starts[-1] + (d / f"{starts[-1]:020d}").stat().st_size) if starts else (0, 0)


def log_range(replica: Replica, lo: int, hi: int) -> bytes:
    """Bytes [lo, hi) of a replica's commit log, read from its files."""
    out = []
    for start in files(replica):
        data = (replica.root / "commitlog" / f"{start:020d}").read_bytes()
        a, b = max(lo, start), min(hi, start + len(data))
        if a < b:
            out.append(data[a - start : b - start])
    return b"".join(out)


def min_offset(port: int, queue_id: int) -> int:
    with RemotingClient(f"127.0.0.1:{port}") as c:
        reply = c.request(RequestCode.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": queue_id}, GET_MIN_OFFSET_REQUEST)
        return int(reply.ext_fields["offset"])


def max_offset(port: int, queue_id: int) -> int:
    with RemotingClient(f"127.0.0.1:{port}") as c:
        reply = c.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": queue_id}, GET_MAX_OFFSET_REQUEST)
        return int(reply.ext_fields["offset"])


def consumer(port: int) -> SimpleConsumer:
    c = SimpleConsumer(
        ClientConfiguration(f"127.0.0.1:{port}", Credentials()), GROUP, {TOPIC: FilterExpression()}, await_duration=1
    )
    c.startup()
    return c


def test_files_expire_and_a_group_behind_the_horizon_skips_forward_with_a_retention_skip(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_EVENTS_FLUSH_SECONDS", "3600")  # the test reads the audit's buffer
    token = ApiToken.issue("ret-broker", "broker")[1]
    with uvicorn_server() as base:
        master = Replica(tmp_path, "master", 0, "ASYNC_MASTER", base, token, fileReservedTimeMillis=1500, **RETENTION)
        master.start()
        try:
            assert send(master.grpc_port, 64) == {pb.Code.OK: 64}
            early = consumer(master.grpc_port)
            try:  # the group consumes what is there, then falls behind
                got = 0
                deadline = time.monotonic() + 60
                while got < 64 and time.monotonic() < deadline:
                    for m in early.receive(32, 30):
                        early.ack(m)
                        got += 1
            finally:
                early.shutdown()
            assert got == 64
            assert send(master.grpc_port, 5000, first=64) == {pb.Code.OK: 5000}  # about 5 MiB: 5 files or more

            wait_for(lambda: len(files(master)) == 1, 30, "every file but the one being written deleted on time")
            assert files(master)[0] > 0
            lows = [min_offset(master.listen_port, q) for q in range(4)]
            assert all(low > 16 for low in lows), lows  # past what the group committed (16 per queue)
            assert "deleted commit-log file 00000000000000000000" in broker_log(master)

            highs = [max_offset(master.listen_port, q) for q in range(4)]
            late = consumer(master.grpc_port)
            received = 0
            try:  # the group goes on from each queue's min offset: exactly what is kept comes
                deadline = time.monotonic() + 60
                while received < sum(highs) - sum(lows) and time.monotonic() < deadline:
                    for m in late.receive(32, 30):
                        late.ack(m)
                        received += 1
                assert late.receive(32, 30) == []
            finally:
                late.shutdown()
            assert received == sum(highs) - sum(lows)
            assert "were deleted by retention before it consumed them" in broker_log(master)

            def skips() -> dict[int, int]:
                return {
                    e.queue_id: e.offset
                    for _, batch in event_store.pending_batches()
                    for e in batch.events
                    if e.source == "retention_skip" and e.consumer_group == GROUP
                }

            wait_for(lambda: len(skips()) == 4, 15, "a retention_skip per queue reported")
            assert [skips()[q] for q in range(4)] == lows
            # a pull consumer's stale commit (written after the skip) does not move the group back
            with RemotingClient(f"127.0.0.1:{master.listen_port}") as c:
                query = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0}
                stale = c.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": 5}, UPDATE_CONSUMER_OFFSET_REQUEST
                )
                assert stale.code == ResponseCode.SUCCESS, stale.remark
                kept = c.request(RequestCode.QUERY_CONSUMER_OFFSET, query, QUERY_CONSUMER_OFFSET_REQUEST)
                assert int(kept.ext_fields["offset"]) >= lows[0]
        finally:
            master.stop()


def test_a_full_disk_refuses_sends_and_forced_cleaning_lets_them_in_again(tmp_path):
    token = ApiToken.issue("full-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('full-admin', 'admin')[1]}"}
    with uvicorn_server() as base, tmpfs(tmp_path / "disk", 12 * MIB) as disk:
        api = httpx.Client(base_url=f"{base}/api/v1", headers=admin, timeout=30)
        master = Replica(
            disk,
            "master",
            0,
            "ASYNC_MASTER",
            base,
            token,
            diskMaxUsedSpaceRatio=40,
            diskSpaceCleanForciblyRatio=50,
            diskSpaceWarningLevelRatio=60,
            cleanFileForciblyEnable="false",
            **RETENTION,
        )
        master.start()
        try:

            def perm() -> int | None:
                r = api.get(f"/nameserver/routes/{TOPIC}")
                return r.json()["queueDatas"][0]["perm"] if r.status_code == 200 else None

            wait_for(lambda: perm() == 6, 30, "the topic's route")
            codes: dict[int, int] = {}
            deadline = time.monotonic() + 60
            while pb.Code.INTERNAL_SERVER_ERROR not in codes and time.monotonic() < deadline:
                codes = send(master.grpc_port, 256)
            assert pb.Code.INTERNAL_SERVER_ERROR in codes, "the disk never filled"
            with grpc.insecure_channel(f"127.0.0.1:{master.grpc_port}") as channel:
                refused = rpc.MessagingServiceStub(channel).SendMessage(
                    spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=TOPIC), body=b"x")]), timeout=10
                )
            assert "the disk is full" in refused.status.message
            wait_for(lambda: perm() == 4, 15, "the route showing the broker's queues read-only")

            def store() -> dict:
                r = api.get("/nameserver/brokers/status", params={"brokerName": "group-a", "brokerId": 0})
                return r.json()["brokers"][0]["status"].get("store") or {} if r.status_code == 200 else {}

            wait_for(lambda: store().get("diskFull") is True, 15, "the status report saying the disk is full")
            figures = store()
            assert figures["diskUsedRatio"] > 60 and figures["diskSpaceWarningLevelRatio"] == 60
            assert figures["diskTotalBytes"] == 12 * MIB and figures["filesDeletedTotal"] == 0
            assert files(master)[0] == 0  # nothing expired, forced cleaning off: nothing deleted

            changed = api.post(
                "/operations/brokers/config",
                json={"brokerName": "group-a", "brokerId": 0, "updates": {"cleanFileForciblyEnable": "true"}},
            )
            assert changed.status_code == 200 and changed.json()["applied"], changed.text
            wait_for(lambda: perm() == 6, 30, "the route writable again once forced cleaning made room")
            assert files(master)[0] > 0  # the oldest files went
            producer = Producer(ClientConfiguration(f"127.0.0.1:{master.grpc_port}", Credentials()), (TOPIC,))
            producer.startup()
            try:
                msg = ClientMessage()
                msg.topic, msg.body = TOPIC, b"after the disk had room again"
                assert producer.send(msg).message_id
            finally:
                producer.shutdown()
        finally:
            master.stop()


def test_a_slave_away_longer_than_the_retention_rejoins_from_the_masters_first_file(tmp_path):
    token = ApiToken.issue("away-broker", "broker")[1]
    with uvicorn_server() as base:
        keys = {"fileReservedTimeMillis": 1500, **RETENTION}
        master = Replica(tmp_path, "master", 0, "ASYNC_MASTER", base, token, **keys)
        slave = Replica(tmp_path, "slave", 1, "SLAVE", base, token, haMasterAddress=f"127.0.0.1:{master.ha_port}", **keys)
        master.start()
        slave.start()
        try:
            assert send(master.grpc_port, 1500) == {pb.Code.OK: 1500}
            wait_for(lambda: log_span(slave)[1] == log_span(master)[1], 30, "the slave caught up")
            slave.stop(signal.SIGKILL)
            away_max = log_span(slave)[1]
            assert send(master.grpc_port, 4000, first=1500) == {pb.Code.OK: 4000}
            wait_for(lambda: log_span(master)[0] > away_max, 30, "the master deleted everything the slave has")

            slave.start()
            wait_for(lambda: "replica log restarts at the master's offset" in broker_log(slave), 30, "the slave's restart")
            assert send(master.grpc_port, 500, first=5500) == {pb.Code.OK: 500}
            wait_for(lambda: log_span(slave)[1] == log_span(master)[1], 30, "the slave caught up again")
            lo = max(log_span(master)[0], log_span(slave)[0])
            hi = log_span(master)[1]
            assert hi - lo > MIB // 2
            assert log_range(slave, lo, hi) == log_range(master, lo, hi)
        finally:
            slave.stop()
            master.stop()


def test_a_static_topics_segment_expires_with_its_data_and_a_move_back_reuses_its_queue(tmp_path):
    """Seed 003 tables 3 and 4 on real brokers: Ledger's one logical queue moves from set a to set b;
    set a goes on writing another topic, so its retention (1.5 s) deletes the files of the sealed
    segment; a's report of the queue's min offset makes the segment Expired; moving the queue back to
    a reuses a's physical queue 0, and the official Producer's messages land there."""
    from testkit.static_topics import create, mapping, migrate, routed, settled
    from tests.e2e.test_grpc_consume import send as client_send
    from tests.procs import create_topic

    token = ApiToken.issue("ret-static-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('ret-static-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        sets = {}
        for name in ("set-a", "set-b"):
            sets[name] = Replica(tmp_path, name, 0, "ASYNC_MASTER", base, token, fileReservedTimeMillis=1500, **RETENTION)
            sets[name].conf.write_text(sets[name].conf.read_text().replace("brokerName=group-a", f"brokerName={name}"))
            sets[name].start()
        try:
            wait_for(
                lambda: (
                    set(httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()["brokerAddrTable"])
                    == set(sets)
                ),
                30,
                "both broker sets",
            )
            create(base, admin, "Ledger", 1, ["set-a"])
            wait_for(lambda: routed(base, admin, "Ledger", 1), 20, "the static topic's route")
            producer = Producer(ClientConfiguration(f"127.0.0.1:{sets['set-b'].grpc_port}", Credentials()), ("Ledger",))
            producer.startup()
            try:
                for i in range(20):
                    client_send(producer, "Ledger", f"on-a-{i}".encode(), "a")
                migrate(base, admin, "Ledger", {"moves": [{"queueId": 0, "brokerName": "set-b"}]})
                wait_for(lambda: settled(base, admin, "Ledger"), 20, "the move decided (a's segment sealed)")
                # a writes another topic: its files roll, and retention deletes the sealed segment's
                create_topic(base, admin, "Filler", 1, brokerNames=["set-a"])
                wait_for(lambda: routed_plain(base, admin, "Filler"), 20, "Filler's route")
                assert send_to(sets["set-a"].grpc_port, "Filler", 3000) == {pb.Code.OK: 3000}

                def expired() -> bool:
                    return mapping(base, admin, "Ledger")["queues"][0]["segments"][0]["expired"]

                wait_for(expired, 30, "a's segment expired once its data was deleted")
                migrate(base, admin, "Ledger", {"moves": [{"queueId": 0, "brokerName": "set-a"}]})
                wait_for(lambda: settled(base, admin, "Ledger"), 20, "the move back decided")
                segments = mapping(base, admin, "Ledger")["queues"][0]["segments"]
                assert [(s["brokerName"], s["queueId"]) for s in segments] == [("set-b", 0), ("set-a", 0)]
                wait_for(lambda: routed(base, admin, "Ledger", 2), 20, "the route naming both sets")
                for i in range(5):
                    client_send(producer, "Ledger", f"back-on-a-{i}".encode(), "a")
            finally:
                producer.shutdown()
        finally:
            for s in sets.values():
                s.stop()


def routed_plain(base: str, admin: dict, topic: str) -> bool:
    return httpx.get(f"{base}/api/v1/nameserver/routes/{topic}", headers=admin, timeout=5).status_code == 200


def send_to(port: int, topic: str, count: int, batch: int = 32) -> dict[int, int]:
    """Batched SendMessage of 1 KiB messages to ``topic``; {gRPC code: messages}."""
    codes: dict[int, int] = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        for start in range(0, count, batch):
            req = spb.SendMessageRequest(
                messages=[
                    pb.Message(
                        topic=pb.Resource(name=topic),
                        body=b"f" * 1024,
                        system_properties=pb.SystemProperties(message_id=f"{n:032X}", message_type=pb.MessageType.NORMAL),
                    )
                    for n in range(start, min(count, start + batch))
                ]
            )
            code = stub.SendMessage(req, timeout=30).status.code
            codes[code] = codes.get(code, 0) + len(req.messages)
    return codes
