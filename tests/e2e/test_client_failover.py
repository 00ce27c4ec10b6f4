"""Failover that the official Python client does not notice (issue 16): a Producer sending one
message at a time and a SimpleConsumer, both given every replica of a three-replica group (all-ack,
controller mode) as their access point. kill -9 of the master: no send fails after the client's own
retries (its channel moves to a live replica, which forwards to the new master), nothing
acknowledged is lost, and the consumer receives every acknowledged message."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb

from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import controller_replicas, group_views
from tests.e2e.test_grpc_crash import receive_until
from tests.e2e.test_replication import send, stop_all
from tests.procs import celery_worker_and_beat, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Replicated"


def test_kill_9_of_the_master_under_the_official_producer_fails_no_send(tmp_path):
    token = ApiToken.issue("cf16-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('cf16-admin', 'admin')[1]}"}
    with uvicorn_server() as base, celery_worker_and_beat():
        replicas = controller_replicas(
            tmp_path, base, token, ("a", "b", "c"), allAckInSyncStateSet="true", controllerHeartBeatTimeoutMills=3000
        )
        info, master_of = group_views(base, admin, replicas)
        access = ";".join(f"127.0.0.1:{r.grpc_port}" for r in replicas)
        try:
            for r in replicas:
                r.start()
            wait_for(lambda: len(info().get("syncStateSet", [])) == 3, 60, "a master with all three replicas in sync")
            master = master_of(info())
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")

            producer = Producer(ClientConfiguration(access, Credentials()), (TOPIC,))
            producer.startup()
            acked: set[str] = set()
            failures: list[str] = []
            stop = threading.Event()

            def send_loop() -> None:
                i = 0
                while not stop.is_set():
                    msg = ClientMessage()
                    msg.topic, msg.body = TOPIC, f"m-{i}".encode()
                    i += 1
                    try:
                        acked.add(producer.send(msg).message_id)
                    except Exception as exc:  # the client's own retries are spent
                        failures.append(repr(exc))
                    time.sleep(0.01)

            sender = threading.Thread(target=send_loop, daemon=True)
            sender.start()
            try:
                wait_for(lambda: len(acked) >= 100, 30, "sends before the fault")
                master.stop(signal.SIGKILL)
                wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
                settled = len(acked)
                wait_for(lambda: len(acked) >= settled + 200, 30, "sends after the failover")
            finally:
                stop.set()
                sender.join(timeout=30)
                producer.shutdown()
            assert failures == [], f"{len(failures)} sends failed after the client's retries: {failures[:3]}"

            consumer = SimpleConsumer(
                ClientConfiguration(access, Credentials()), "cf16", {TOPIC: FilterExpression()}, await_duration=1
            )
            consumer.startup()
            try:
                received = receive_until(consumer, acked, 90)
            finally:
                consumer.shutdown()
            assert acked <= received, f"{len(acked - received)} acknowledged messages not received"
        finally:
            stop_all(*replicas)
