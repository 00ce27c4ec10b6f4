"""Consumers survive failover (seed 000, reference §5): real broker processes in controller mode
(all-ack), the official client consuming. After kill -9 of the master, the new master holds the
group's offsets and pop state as the old one had them up to its last record: nothing acknowledged
comes again, a message received but not yet acked can be acked on the new master with the receipt
handle the old one issued, and the persisted tables of both match; the old master rejoins as a
slave and holds the new master's table. A replica that joins after a topic was created gets that
topic from its master's log (no push needed)."""

from __future__ import annotations

import json
import signal
import time

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import group_views, start_in_sync, two_replicas
from tests.e2e.test_replication import Replica, send, stop_all
from tests.procs import celery_worker_and_beat, create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

GROUP, TOPIC = "billing", "Replicated"


def official_consumer(port: int) -> SimpleConsumer:
    consumer = SimpleConsumer(
        ClientConfiguration(f"127.0.0.1:{port}", Credentials()), GROUP, {TOPIC: FilterExpression()}, await_duration=1
    )
    consumer.startup()
    return consumer


def receive_ids(consumer: SimpleConsumer, count: int, *, ack: bool, invisible_s: int = 30, timeout_s: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.receive(min(16, count - len(got)), invisible_s):
            if ack:
                consumer.ack(m)
            got.append(m)
    return got


def ack_raw(port: int, messages: list) -> list[int]:
    """AckMessage on a broker of our choice with the receipt handles as they were issued."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        resp = stub.AckMessage(
            spb.AckMessageRequest(
                group=pb.Resource(name=GROUP),
                topic=pb.Resource(name=TOPIC),
                entries=[spb.AckMessageEntry(message_id=m.message_id, receipt_handle=m.receipt_handle) for m in messages],
            ),
            timeout=10,
        )
    return [e.status.code for e in resp.entries]


def consumer_tables(replica: Replica) -> dict:
    raw = json.loads((replica.root / "config" / "consumerOffset.json").read_text())
    return {"offsetTable": raw["offsetTable"], "popTable": raw.get("popTable", {}), "groups": raw.get("subscriptionGroups")}


REVIVE_AFTER_TAKEOVER_MS = 20_000  # the default is 5 s; the acks below must come before it is up


def in_flight_of(tables: dict) -> dict:
    """Per queue, its deliveries in flight without their deadlines: (offset, attempt, nonce)."""
    return {key: [(o, a, n) for o, _d, a, n in q.get("inFlight", ())] for key, q in tables["popTable"].items()}


def deadlines_of(tables: dict) -> list[int]:
    return [d for q in tables["popTable"].values() for _o, d, _a, _n in q.get("inFlight", ())]


def test_kill_9_of_the_master_keeps_offsets_and_pop_state_on_the_new_master(tmp_path):
    token = ApiToken.issue("cf-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('cf-admin', 'admin')[1]}"}
    with uvicorn_server() as base, celery_worker_and_beat():
        replicas = two_replicas(
            tmp_path,
            base,
            token,
            allAckInSyncStateSet="true",
            controllerHeartBeatTimeoutMills=3000,
            popReviveAfterTakeoverMillis=REVIVE_AFTER_TAKEOVER_MS,
        )
        info, master_of = group_views(base, admin, replicas)
        try:
            before, master, slave = start_in_sync(replicas, info, master_of)
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
            assert send(master.grpc_port, 399, first=1) == {pb.Code.OK: 399}

            consumer = official_consumer(master.grpc_port)
            try:
                acked = {m.message_id for m in receive_ids(consumer, 250, ack=True)}
                in_flight = receive_ids(consumer, 20, ack=False, invisible_s=60)
            finally:
                consumer.shutdown()
            assert len(acked) == 250 and len(in_flight) == 20
            time.sleep(1.5)  # both replicas persist their tables (every 0.5 s)
            old_tables = consumer_tables(master)
            assert old_tables["groups"] == [GROUP] and sum(old_tables["offsetTable"].values()) >= 250

            master.stop(signal.SIGKILL)
            killed_ms = time.time() * 1000
            epoch = before["masterEpoch"] + 1
            wait_for(lambda: master_of(info()) is slave and info()["masterEpoch"] == epoch, 30, "the election")
            wait_for(lambda: consumer_tables(slave)["offsetTable"] == old_tables["offsetTable"], 10, "the new master's table")
            wait_for(lambda: in_flight_of(consumer_tables(slave)) == in_flight_of(old_tables), 10, "the new master's pop table")
            # In flight: the same offsets, attempts and nonces; what the old master handed out is due
            # again within popReviveAfterTakeoverMillis of the takeover, not after its 60 s (the old
            # master may have recorded a receive whose answer never reached the client).
            wait_for(
                lambda: max(deadlines_of(consumer_tables(slave))) <= time.time() * 1000 + REVIVE_AFTER_TAKEOVER_MS,
                10,
                "the in-flight deadlines brought forward (persisted every 0.5 s)",
            )
            deadlines = deadlines_of(consumer_tables(slave))
            assert len(deadlines) == 20 and in_flight_of(consumer_tables(slave)) == in_flight_of(old_tables)
            assert min(deadlines) >= killed_ms  # brought forward, not expired at once

            # The old master's receipt handles are good on the new master (pop state replicated).
            assert ack_raw(slave.grpc_port, in_flight[:10]) == [pb.Code.OK] * 10
            consumer = official_consumer(slave.grpc_port)
            try:
                rest = receive_ids(consumer, 140, ack=True, timeout_s=60)
                nothing = consumer.receive(16, 30)
            finally:
                consumer.shutdown()
            again = {m.message_id for m in rest} & acked
            assert again == set(), f"{len(again)} acknowledged messages delivered again"
            # Everything else arrives: 400 - 250 acked - 10 acked in flight = 130 never delivered,
            # and the 10 in flight that were never acked, delivered again after the takeover.
            assert len(rest) == 140 and not nothing
            rest_ids = {m.message_id for m in rest}
            assert rest_ids >= {m.message_id for m in in_flight[10:]} and not rest_ids & {m.message_id for m in in_flight[:10]}

            # The deposed master rejoins as a slave and takes the new master's state (epoch 2 > 1).
            master.start()
            wait_for(lambda: len(info().get("syncStateSet", [])) == 2, 60, "the old master back in sync")
            time.sleep(1)  # the new master persists every 0.5 s
            wait_for(
                lambda: consumer_tables(master)["offsetTable"] == consumer_tables(slave)["offsetTable"],
                30,
                "the rejoined replica holding the new master's offsets",
            )
            assert consumer_tables(master)["popTable"] == consumer_tables(slave)["popTable"]
        finally:
            stop_all(*replicas)


def test_a_replica_that_joins_after_a_topic_was_created_gets_it_from_the_log(tmp_path):
    token = ApiToken.issue("cf-join-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('cf-join-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        master = Replica(tmp_path, "master", 0, "SYNC_MASTER", base, token)
        late = Replica(tmp_path, "late", 1, "SLAVE", base, token)
        try:
            master.start()
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
            create_topic(base, admin, "Invoices", 2, brokerNames=["group-a"])
            late.start()  # no push reaches it: the topic was created before it registered

            def late_topics() -> dict:
                path = late.root / "config" / "topics.json"
                return json.loads(path.read_text())["topicConfigTable"] if path.exists() else {}

            wait_for(lambda: "Invoices" in late_topics(), 30, "the topic on the late replica")
            assert late_topics()["Invoices"]["writeQueueNums"] == 2
        finally:
            stop_all(master, late)
