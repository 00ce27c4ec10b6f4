"""A message its consumers never ack goes to the group's dead-letter queue after ``retryMaxTimes + 1``
delivery attempts (RocketMQ's proxy: maxAttempts), stops being delivered to the group, and can be read
from ``%DLQ%{group}``, which the broker registers with the nameserver (official RocketMQ 5 Python
clients, a real broker process, the real control plane)."""

from __future__ import annotations

import os
import signal
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
MAX_TIMES = 3


def receive_one(consumer: SimpleConsumer, invisible_s: int, within_s: float) -> list:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = consumer.receive(1, invisible_s)
        if got:
            return got
    return []


def test_unacked_message_goes_to_the_dlq_after_retry_max_times(tmp_path):
    broker_token = ApiToken.issue("dlq-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('dlq-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        ports = BrokerPorts.reserve()
        grpc_port = ports.grpc
        conf = write_broker_conf(
            tmp_path / "broker.conf",
            broker_keys(
                "broker-a",
                tmp_path / "store",
                ports,
                base,
                cluster="dlq",
                token=broker_token,
                brokerId=0,
                mappedFileSizeCommitLog=1048576,
                retryMaxTimes=MAX_TIMES,
            ),
        )
        proc = start_broker(conf, "dlq")
        try:

            def route(topic: str) -> dict:
                return httpx.get(f"{base}/api/v1/nameserver/routes/{topic}", headers=admin, timeout=5).json()

            wait_for(
                lambda: (
                    "broker-a"
                    in httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()["brokerAddrTable"]
                ),
                30,
                "the broker",
            )
            create_topic(base, admin, "Payments", 2, clusterName="dlq")
            wait_for(lambda: len(route("Payments").get("brokerDatas", [])) == 1, 10, "the route of Payments")

            config = ClientConfiguration(f"127.0.0.1:{grpc_port}", Credentials())
            producer = Producer(config, ("Payments",))
            producer.startup()
            try:
                msg = ClientMessage()
                msg.topic, msg.body, msg.tag, msg.keys = "Payments", b"poison", "card", "order-17"
                poison_id = producer.send(msg).message_id
            finally:
                producer.shutdown()

            consumer = SimpleConsumer(config, "billing", {"Payments": FilterExpression()}, await_duration=1)
            consumer.startup()
            try:
                for attempt in range(1, MAX_TIMES + 2):  # maxAttempts = retryMaxTimes + 1 deliveries, never acked
                    got = receive_one(consumer, 1, 30)
                    assert [m.message_id for m in got] == [poison_id], f"attempt {attempt}"
                    assert got[0].delivery_attempt == attempt and got[0].body == b"poison"
                # Now in the DLQ: the group is not offered it again.
                assert receive_one(consumer, 1, 5) == []
            finally:
                consumer.shutdown()

            dlq = "%DLQ%billing"
            wait_for(lambda: len(route(dlq).get("brokerDatas", [])) == 1, 10, "the DLQ's route")
            queue = route(dlq)["queueDatas"][0]
            assert (queue["readQueueNums"], queue["writeQueueNums"], queue["perm"]) == (1, 1, 6)
            reader = SimpleConsumer(config, "dlq-audit", {dlq: FilterExpression()}, await_duration=1)
            reader.startup()
            try:
                dead = receive_one(reader, 30, 30)
                assert [m.message_id for m in dead] == [poison_id]
                assert dead[0].body == b"poison" and dead[0].tag == "card" and set(dead[0].keys) == {"order-17"}
                assert dead[0].topic == "Payments"  # the original topic, as the client reports it
                reader.ack(dead[0])
            finally:
                reader.shutdown()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
