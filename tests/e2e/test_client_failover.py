"""Failover that the official Python client does not notice (issue 16): a Producer sending one
message at a time and a SimpleConsumer, both given every replica of a three-replica group (all-ack,
controller mode) as their access point. kill -9 of the master, and SIGSTOP of it for 12 s: no send
fails after the client's own retries (the retry goes to another replica, which forwards to the new
master), nothing acknowledged is lost, and the consumer receives every acknowledged message."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb

from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import controller_replicas, group_views
from tests.e2e.test_grpc_crash import received_by_a_new_consumer
from tests.e2e.test_replication import send, stop_all
from tests.procs import celery_worker_and_beat, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Replicated"


def test_kill_9_of_the_master_under_the_official_producer_fails_no_send(tmp_path):
    failures = run_through_a_fault(tmp_path, "cf16k", kill_9)
    assert failures == [], f"{len(failures)} sends failed after the client's retries: {failures[:3]}"


def test_sigstop_of_the_master_under_the_official_producer_fails_no_send(tmp_path):
    """The stopped master keeps its connections open and answers nothing. The Python client's routes
    name slaves only (service.queue_addrs): a send in flight at the stop is held by its slave until
    just before the client's deadline, and its retry, on the next queue, reaches the other slave,
    which holds it until the controller has elected a new master and forwards it there (or serves
    it, elected itself), while the old master is still stopped. Resumed, the old master is a slave."""
    failures = run_through_a_fault(tmp_path, "cf16s", sigstop_for_12_s)
    assert failures == [], f"{len(failures)} sends failed after the client's retries: {failures[:3]}"


def kill_9(master, elected) -> None:
    master.stop(signal.SIGKILL)
    elected()


def sigstop_for_12_s(master, elected) -> None:
    os.killpg(master.proc.pid, signal.SIGSTOP)
    try:
        elected()
    finally:
        time.sleep(max(0.0, 12 - 3))  # stopped 12 s in all (the election takes about 3 s)
        os.killpg(master.proc.pid, signal.SIGCONT)


def run_through_a_fault(tmp_path, name: str, fault) -> list[str]:
    """Sends one message at a time through ``fault``; every acknowledged one is received. Returns
    the sends that failed after the client's own retries."""
    token = ApiToken.issue(f"{name}-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue(f'{name}-admin', 'admin')[1]}"}
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

            def elected() -> None:
                wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
                settled = len(acked)
                wait_for(lambda: len(acked) >= settled + 20, 30, "sends acknowledged by the new master")

            sender = threading.Thread(target=send_loop, daemon=True)
            sender.start()
            try:
                wait_for(lambda: len(acked) >= 100, 30, "sends before the fault")
                fault(master, elected)
                settled = len(acked)
                wait_for(lambda: len(acked) >= settled + 200, 30, "sends after the fault")
            finally:
                stop.set()
                sender.join(timeout=30)
                producer.shutdown()

            received = received_by_a_new_consumer(access, name, TOPIC, acked, 90)
            assert acked <= received, f"{len(acked - received)} acknowledged messages not received"
        finally:
            stop_all(*replicas)
    return failures
