"""Official RocketMQ 5 Python clients against two real broker processes: a Producer sends 10,000
messages, a SimpleConsumer receives and acks every one (none lost, none delivered twice unless its
invisible time expired), and a message left un-acked comes back after its invisible time."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage
from rocketmq.v5.exception import BadRequestException

from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]
MESSAGES = 10_000


def send(producer: Producer, topic: str, body: bytes, tag: str) -> str:
    msg = ClientMessage()
    msg.topic, msg.body, msg.tag = topic, body, tag
    return producer.send(msg).message_id


def test_produce_and_consume_with_the_official_clients(tmp_path):
    broker_token = ApiToken.issue("consume-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('consume-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        procs, grpc_ports = [], []
        try:
            for name in ("broker-a", "broker-b"):
                ports = BrokerPorts.reserve()
                grpc_port = ports.grpc
                conf = write_broker_conf(
                    tmp_path / f"{name}.conf",
                    broker_keys(
                        name,
                        tmp_path / name,
                        ports,
                        base,
                        cluster="consume",
                        token=broker_token,
                        brokerId=0,
                        mappedFileSizeCommitLog=4194304,
                    ),
                )
                procs.append(start_broker(conf, name))
                grpc_ports.append(grpc_port)

            def registered():
                info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
                return set(info["brokerAddrTable"]) == {"broker-a", "broker-b"}

            wait_for(registered, 30, "both brokers")
            for topic in ("Orders", "Late"):
                create_topic(base, admin, topic, 4, clusterName="consume")
            for topic in ("Orders", "Late"):
                wait_for(
                    lambda t=topic: (
                        len(httpx.get(f"{base}/api/v1/nameserver/routes/{t}", headers=admin, timeout=5).json()["brokerDatas"])
                        == 2
                    ),
                    10,
                    f"the route of {topic}",
                )

            config = ClientConfiguration(f"127.0.0.1:{grpc_ports[0]}", Credentials())
            producer = Producer(config, ("Orders", "Late"))
            producer.startup()
            try:
                sent = {send(producer, "Orders", f"order-{i}".encode(), "created") for i in range(MESSAGES)}
                late_id = send(producer, "Late", b"late", "late")
            finally:
                producer.shutdown()
            assert len(sent) == MESSAGES

            consumer = SimpleConsumer(config, "billing", {"Orders": FilterExpression()}, await_duration=1)
            consumer.startup()
            received: dict[str, int] = {}
            first_attempt_twice = 0
            try:
                deadline = time.monotonic() + 240
                while len(received) < MESSAGES and time.monotonic() < deadline:
                    for m in consumer.receive(32, 30):
                        if m.message_id in received and m.delivery_attempt == 1:
                            first_attempt_twice += 1
                        received[m.message_id] = received.get(m.message_id, 0) + 1
                        consumer.ack(m)
                extra = consumer.receive(32, 30)  # nothing is left, nothing comes back
            finally:
                consumer.shutdown()
            assert set(received) == sent, f"{len(sent - set(received))} sent messages never received"
            assert first_attempt_twice == 0 and extra == []
            duplicates = sum(n - 1 for n in received.values())
            print(f"{MESSAGES} sent, {len(received)} received, {duplicates} redelivered (invisible time expired)")

            # A message left un-acked comes back after its invisible time, as delivery attempt 2.
            late = SimpleConsumer(config, "auditing", {"Late": FilterExpression()}, await_duration=1)
            late.startup()
            try:
                first = []
                deadline = time.monotonic() + 30
                while not first and time.monotonic() < deadline:
                    first = late.receive(1, 2)  # invisible for 2 s; not acked
                assert [m.message_id for m in first] == [late_id] and first[0].delivery_attempt == 1
                again = []
                deadline = time.monotonic() + 30
                while not again and time.monotonic() < deadline:
                    again = late.receive(1, 30)
                assert [m.message_id for m in again] == [late_id] and again[0].delivery_attempt == 2
                assert again[0].body == b"late"
                late.ack(again[0])
                with pytest.raises(BadRequestException, match="40013"):  # the first handle is no longer valid
                    late.ack(first[0])
            finally:
                late.shutdown()
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=30)
