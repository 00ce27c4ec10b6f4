"""Topic message types end to end: an operator creates a DELAY topic over the REST API, the broker
(a real process) stores the type and its routes say DELAY; the official Python Producer refuses to
send a NORMAL message there (it checks the route's accept_message_types) and sends a DELAY one; a
raw SendMessage of a NORMAL or untyped message is refused by the broker with 40014
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, nothing stored; turned MIXED, the topic takes NORMAL sends."""

from __future__ import annotations

import json
import os
import signal
import time

import grpc
import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc
from rocketmq.v5.exception import IllegalArgumentException

from controlplane.models import ApiToken
from nameserver import route_cache
from nameserver.models import BrokerGroup, TopicQueue
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

CLUSTER, BROKER = "types", "broker-t"
T = pb.MessageType
QUEUES = 2


def raw_message(n: int, message_type: int, topic: str = "Delayed") -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=b"typed",
        system_properties=pb.SystemProperties(
            message_id=f"TYPE{n:028X}", body_encoding=pb.Encoding.IDENTITY, message_type=message_type
        ),
    )


def client_message(**fields) -> ClientMessage:
    msg = ClientMessage()
    msg.topic, msg.body = "Delayed", b"typed"
    for key, value in fields.items():
        setattr(msg, key, value)
    return msg


def test_a_delay_topic_routes_delay_queues_and_refuses_other_sends(tmp_path):
    broker_token = ApiToken.issue("types-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('types-admin', 'admin')[1]}"}
    ports = BrokerPorts.reserve()
    store = tmp_path / "store"
    with uvicorn_server() as base:
        keys = broker_keys(
            BROKER, store, ports, base, cluster=CLUSTER, token=broker_token, brokerId=0, mappedFileSizeCommitLog=1 << 20
        )
        proc = start_broker(write_broker_conf(tmp_path / "broker.conf", keys), "types")
        try:

            def registered():
                info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
                return BROKER in info["brokerAddrTable"]

            wait_for(registered, 30, "the broker's registration")
            create_topic(base, admin, "Delayed", QUEUES, clusterName=CLUSTER, attributes={"message.type": "DELAY"})
            create_topic(base, admin, "Plain", QUEUES, clusterName=CLUSTER)
            # A route the nameserver has for a topic this broker never heard of: its queues are NORMAL.
            group = BrokerGroup.objects.get(broker_name=BROKER)
            TopicQueue.objects.create(topic="NameserverOnly", group=group, read_queue_nums=1, write_queue_nums=1, perm=6)
            route_cache.registry_changed()

            with grpc.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel:
                stub = rpc.MessagingServiceStub(channel)

                def accepts(topic: str) -> set[tuple[int, ...]]:
                    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=5)
                    assert route.status.code == pb.Code.OK, route.status
                    return {tuple(q.accept_message_types) for q in route.message_queues}

                wait_for(lambda: accepts("Delayed") == {(T.DELAY,)}, 10, "the broker's route of the DELAY topic")
                assert accepts("Plain") == accepts("NameserverOnly") == {(T.NORMAL,)}
                topics_json = json.loads((store / "config" / "topics.json").read_text())["topicConfigTable"]
                assert topics_json["Delayed"]["attributes"] == {"message.type": "DELAY"}
                # the broker's registrations since the push keep the type the operator set
                route = httpx.get(f"{base}/api/v1/nameserver/routes/Delayed", headers=admin, timeout=5).json()
                assert [q["attributes"] for q in route["queueDatas"]] == [{"message.type": "DELAY"}]

                # The official client checks the route before it sends: a NORMAL message never leaves it.
                producer = Producer(ClientConfiguration(f"127.0.0.1:{ports.grpc}", Credentials()), ("Delayed",))
                producer.startup()
                try:
                    with pytest.raises(IllegalArgumentException, match="accept message types"):
                        producer.send(client_message())
                    # a minute ahead: whether or not a timer holds it, nothing reaches the queues below meanwhile
                    receipt = producer.send(client_message(delivery_timestamp=int(time.time()) + 60))
                    assert receipt.message_id
                finally:
                    producer.shutdown()

                def end_offsets() -> list[int]:
                    out = []
                    for q in range(QUEUES):
                        mq = pb.MessageQueue(topic=pb.Resource(name="Delayed"), id=q, broker=pb.Broker(name=BROKER))
                        request = spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.QueryOffsetPolicy.END)
                        out.append(stub.QueryOffset(request, timeout=5).offset)
                    return out

                # The broker refuses what a client sends without that check, the whole batch, nothing stored.
                before = end_offsets()
                for batch in (
                    [raw_message(1, T.NORMAL)],
                    [raw_message(2, T.MESSAGE_TYPE_UNSPECIFIED)],  # no type: a NORMAL message
                    [raw_message(3, T.DELAY), raw_message(4, T.FIFO)],
                ):
                    resp = stub.SendMessage(spb.SendMessageRequest(messages=batch), timeout=10)
                    assert resp.status.code == pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE == 40014, resp.status
                    assert "topic Delayed is a DELAY topic" in resp.status.message and not resp.entries
                assert end_offsets() == before
                resp = stub.SendMessage(spb.SendMessageRequest(messages=[raw_message(5, T.NORMAL, "Plain")]), timeout=10)
                assert resp.status.code == pb.Code.OK  # a NORMAL topic takes it

                # message.type is changeable (as in RocketMQ): MIXED takes the four types.
                create_topic(base, admin, "Delayed", QUEUES, clusterName=CLUSTER, attributes={"+message.type": "MIXED"})
                mixed = (T.NORMAL, T.FIFO, T.DELAY, T.TRANSACTION)
                wait_for(lambda: accepts("Delayed") == {mixed}, 10, "the broker's route of the MIXED topic")
                resp = stub.SendMessage(spb.SendMessageRequest(messages=[raw_message(6, T.NORMAL)]), timeout=10)
                assert resp.status.code == pb.Code.OK, resp.status
                assert sum(end_offsets()) == sum(before) + 1
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
