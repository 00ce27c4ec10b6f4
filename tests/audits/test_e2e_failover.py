"""End to end: a replica group whose slave holds stale consumer offsets fails over; the
brokers report their commits over the websocket, an audit started through the REST API runs on
Celery and Spark, and it reports that rollback: cause failover_stale_replica at the new epoch, the
election's transition, and the number of messages that come again (which the new master then really
hands out again). Real brokers, control plane, Celery, Spark, Postgres, Redis.

Consumer offsets replicate with the log (brokers/meta.py), so a slave is stale only when it did not
get its master's latest records: with RocketMQ's defaults (allAckInSyncStateSet=false, inSyncReplicas=1)
an ack is answered by the master alone. The slave's HA link runs through a fault proxy that drops
everything while the group commits on the master; then the master is killed and the slave, still in
the SyncStateSet, is elected."""

from __future__ import annotations

import signal
import time

import grpc
import httpx
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from audits import event_store
from controlplane.controller.models import Transition
from controlplane.models import ApiToken
from testkit.faultproxy import FaultProxy
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import group_views
from tests.e2e.test_replication import Replica, send, stop_all
from tests.procs import celery_worker_and_beat, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

GROUP, TOPIC, QUEUE = "audit-group", "Replicated", 0
STALE, COMMITTED = 10, 70  # the offsets both replicas start with, and what the consumer reaches on the first master


def consume(port: int, count: int) -> list[int]:
    """Receive and ack ``count`` messages of queue 0; their queue offsets."""
    offsets: list[int] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        deadline = time.monotonic() + 30
        while len(offsets) < count and time.monotonic() < deadline:
            req = spb.ReceiveMessageRequest(
                group=pb.Resource(name=GROUP),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=QUEUE),
                filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                batch_size=min(16, count - len(offsets)),
                invisible_duration=Duration(seconds=60),
                long_polling_timeout=Duration(seconds=2),
            )
            got = [r.message for r in stub.ReceiveMessage(req, timeout=10) if r.HasField("message")]
            if got:
                stub.AckMessage(
                    spb.AckMessageRequest(
                        group=pb.Resource(name=GROUP),
                        topic=pb.Resource(name=TOPIC),
                        entries=[
                            spb.AckMessageEntry(
                                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
                            )
                            for m in got
                        ],
                    ),
                    timeout=10,
                )
                offsets += [m.system_properties.queue_offset for m in got]
    return offsets


def reported(broker_id: int, offset: int, source: str) -> bool:
    return any(
        b.broker_id == broker_id
        and any(e.queue_id == QUEUE and e.consumer_group == GROUP and e.offset == offset and e.source == source for e in b.events)
        for _, b in event_store.pending_batches()
    )


def test_a_failover_onto_stale_offsets_is_reported_with_its_cause_and_size(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_EVENTS_URI", str(tmp_path / "offset-events"))
    monkeypatch.setenv("AUDIT_EVENTS_FLUSH_SECONDS", "3600")  # the audit run flushes; the test reads the buffer
    monkeypatch.setenv("AUDIT_SPARK_MASTER", "local[2]")
    token = ApiToken.issue("audit-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('audit-admin', 'admin')[1]}"}
    with uvicorn_server() as base, celery_worker_and_beat():
        settings = dict(
            enableControllerMode="true",
            brokerHeartbeatInterval=500,
            controllerHeartBeatTimeoutMills=3000,
            checkSyncStateSetPeriod=1000,
            syncBrokerMetadataPeriod=1000,
        )
        first = Replica(tmp_path, "a", 0, "SYNC_MASTER", base, token, **settings)
        proxy = FaultProxy(("127.0.0.1", first.ha_port)).start()
        # The slave reaches the master's HA port through the proxy only.
        second = Replica(tmp_path, "b", 0, "SYNC_MASTER", base, token, haMasterAddress=proxy.addr, **settings)
        replicas = [first, second]
        info, master_of = group_views(base, admin, replicas)

        try:
            first.start()
            wait_for(lambda: master_of(info()) is first, 60, "the first replica elected")
            second.start()
            wait_for(lambda: len(info().get("syncStateSet", [])) == 2, 60, "a master with both replicas in sync")
            before = info()
            master, slave = first, second
            slave_id = next(i for i in before["syncStateSet"] if i != before["masterBrokerId"])
            wait_for(lambda: send(master.grpc_port, 4) == {pb.Code.OK: 4}, 30, "the master taking writes")
            assert send(master.grpc_port, 396, first=4) == {pb.Code.OK: 396}  # 100 per queue
            assert consume(master.grpc_port, STALE) == list(range(STALE))
            wait_for(lambda: reported(slave_id, STALE, "slave_sync"), 30, "the slave following the commit")
            proxy.drop()  # the slave gets nothing more
            assert consume(master.grpc_port, COMMITTED - STALE) == list(range(STALE, COMMITTED))
            wait_for(lambda: reported(before["masterBrokerId"], COMMITTED, "client_commit"), 30, "the master's commit reported")
            master.stop(signal.SIGKILL)
            wait_for(lambda: master_of(info()) is slave, 60, "the slave elected")
            after = info()
            assert after["masterEpoch"] == before["masterEpoch"] + 1
            wait_for(
                lambda: reported(after["masterBrokerId"], STALE, "master_takeover"), 30, "the new master's takeover reported"
            )

            started = httpx.post(f"{base}/api/v1/audits/runs", headers=admin, timeout=10)
            assert started.status_code == 202, started.text
            run_url = f"{base}/api/v1/audits/runs/{started.json()['id']}"
            run: dict = {}

            def finished() -> bool:
                nonlocal run
                run = httpx.get(run_url, headers=admin, timeout=5).json()
                return run["status"] in ("succeeded", "failed")

            wait_for(finished, 240, "the audit run")
            assert run["status"] == "succeeded", run["error"]
            findings = httpx.get(f"{base}/api/v1/audits/findings", params={"run": run["id"]}, headers=admin, timeout=5).json()[
                "findings"
            ]
            # The new master really hands out the rolled-back messages again: from the stale offset on.
            assert consume(slave.grpc_port, 1) == [STALE]
        finally:
            stop_all(*replicas)
            proxy.stop()

    election = Transition.objects.get(broker_name="group-a", kind="elect", new_master_epoch=after["masterEpoch"])
    assert [f for f in findings if f["kind"] == "beyond_max_offset"] == []
    assert [
        (
            f["kind"],
            f["cause"],
            f["consumerGroup"],
            f["topic"],
            f["brokerName"],
            f["queueId"],
            f["masterEpoch"],
            f["previousOffset"],
            f["offset"],
            f["messagesAgain"],
            f["transitionId"],
            f["brokerId"],
            f["previousBrokerId"],
        )
        for f in findings
        if f["kind"] == "rollback"
    ] == [
        (
            "rollback",
            "failover_stale_replica",
            GROUP,
            TOPIC,
            "group-a",
            QUEUE,
            after["masterEpoch"],
            COMMITTED,
            STALE,
            COMMITTED - STALE,
            election.pk,
            after["masterBrokerId"],
            before["masterBrokerId"],
        )
    ]
    assert run["rollbacks"] == 1 and run["messagesAgain"] == COMMITTED - STALE
