"""kill -9 of a broker during SYNC_FLUSH sends from the official Producer: after a restart, every
message whose send was acknowledged is received by the official SimpleConsumer."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage

from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_kill_9_during_sync_flush_sends_loses_no_acknowledged_message(tmp_path):
    broker_token = ApiToken.issue("crash-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('crash-admin', 'admin')[1]}"}
    ports = BrokerPorts.reserve()
    grpc_port = ports.grpc
    with uvicorn_server() as base:
        conf = write_broker_conf(
            tmp_path / "broker.conf",
            broker_keys(
                "broker-a",
                tmp_path / "store",
                ports,
                base,
                cluster="crash",
                token=broker_token,
                brokerId=0,
                mappedFileSizeCommitLog=1048576,
                flushDiskType="SYNC_FLUSH",
                brokerHeartbeatInterval=200,
            ),
        )

        def registered():
            info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
            return "broker-a" in info["brokerAddrTable"]

        proc = start_broker(conf, "crash-1")
        try:
            wait_for(registered, 30, "the broker")
            create_topic(base, admin, "Payments", 4, brokerNames=["broker-a"])
            config = ClientConfiguration(f"127.0.0.1:{grpc_port}", Credentials())
            producer = Producer(config, ("Payments",))
            producer.startup()
            acked: set[str] = set()
            failed = 0
            stop = threading.Event()

            def send_loop():
                nonlocal failed
                i = 0
                while not stop.is_set():
                    msg = ClientMessage()
                    msg.topic, msg.body = "Payments", f"payment-{i}".encode()
                    i += 1
                    try:
                        acked.add(producer.send(msg).message_id)
                    except Exception:
                        failed += 1
                        time.sleep(0.05)

            sender = threading.Thread(target=send_loop, daemon=True)
            sender.start()
            wait_for(lambda: len(acked) >= 500, 60, "500 acknowledged sends")
            os.killpg(proc.pid, signal.SIGKILL)  # mid-stream, with sends in flight
            proc.wait(timeout=10)
            acked_at_kill = len(acked)
            time.sleep(1.0)
            proc = start_broker(conf, "crash-2")
            wait_for(registered, 30, "the restarted broker")
            wait_for(lambda: len(acked) >= acked_at_kill + 200, 60, "sends acknowledged after the restart")
            stop.set()
            sender.join(timeout=30)
            producer.shutdown()

            consumer = SimpleConsumer(config, "ledger", {"Payments": FilterExpression()}, await_duration=1)
            consumer.startup()
            try:
                received = receive_until(consumer, acked, 120)
            finally:
                consumer.shutdown()
            missing = acked - received
            assert not missing, f"{len(missing)} acknowledged messages lost"
            print(
                f"{len(acked)} acknowledged ({acked_at_kill} before kill -9), {failed} sends failed while the broker "
                f"was down, {len(received)} received"
            )
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)


def receive_until(consumer: SimpleConsumer, wanted: set[str], timeout_s: float) -> set[str]:
    """Receive and ack until every id in ``wanted`` came (or ``timeout_s`` passed); the ids received."""
    received: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while not wanted <= received and time.monotonic() < deadline:
        for m in consumer.receive(32, 30):
            received.add(m.message_id)
            consumer.ack(m)
    return received


def received_by_a_new_consumer(access: str, group: str, topic: str, wanted: set[str], timeout_s: float) -> set[str]:
    """An official SimpleConsumer of ``group`` (long polling 1 s) receives and acks until every id
    in ``wanted`` came or ``timeout_s`` passed; the ids received."""
    consumer = SimpleConsumer(ClientConfiguration(access, Credentials()), group, {topic: FilterExpression()}, await_duration=1)
    consumer.startup()
    try:
        return receive_until(consumer, wanted, timeout_s)
    finally:
        consumer.shutdown()
