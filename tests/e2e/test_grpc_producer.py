"""The official RocketMQ 5 Python Producer against two real broker processes and the real control
plane: routes come from the nameserver (each broker's gRPC endpoint), sends spread over both
brokers, and every acknowledged message is in exactly one broker's store, once."""

from __future__ import annotations

import asyncio
import os
import signal

import grpc
import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from brokers.store.message import Message
from brokers.store.store import MessageStore, StoreConfig
from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]
MESSAGES = 2000


def stored_messages(root) -> list[Message]:
    async def read():
        store = MessageStore(StoreConfig(root, mapped_file_size_commit_log=1 << 20))
        await store.start()
        out = []
        for q in range(4):
            out += await store.get_messages("Orders", q, 0, 10**6)
        await store.shutdown()
        return out

    return asyncio.run(read())


def test_official_producer_sends_to_two_brokers_and_every_ack_is_stored_once(tmp_path):
    broker_token = ApiToken.issue("grpc-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('grpc-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        procs, grpc_ports, roots = [], [], []
        try:
            for name in ("broker-a", "broker-b"):
                ports = BrokerPorts.reserve()
                grpc_port = ports.grpc
                root = tmp_path / name
                conf = write_broker_conf(
                    tmp_path / f"{name}.conf",
                    broker_keys(
                        name,
                        root,
                        ports,
                        base,
                        cluster="grpc",
                        token=broker_token,
                        brokerId=0,
                        mappedFileSizeCommitLog=1048576,
                        flushDiskType="SYNC_FLUSH",
                    ),
                )
                procs.append(start_broker(conf, name))
                grpc_ports.append(grpc_port)
                roots.append(root)

            def both_registered():
                info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
                return set(info["brokerAddrTable"]) == {"broker-a", "broker-b"}

            wait_for(both_registered, 30, "both brokers")
            create_topic(base, admin, "Orders", 4, clusterName="grpc")
            wait_for(
                lambda: (
                    len(httpx.get(f"{base}/api/v1/nameserver/routes/Orders", headers=admin, timeout=5).json()["brokerDatas"]) == 2
                ),
                10,
                "the route on both brokers",
            )

            with grpc.insecure_channel(f"127.0.0.1:{grpc_ports[0]}") as channel:
                stub = rpc.MessagingServiceStub(channel)
                # Push consumers' assignment: every readable queue of both brokers, with their endpoints.
                assignment = stub.QueryAssignment(spb.QueryAssignmentRequest(topic=pb.Resource(name="Orders")), timeout=5)
                assert assignment.status.code == pb.Code.OK
                assert sorted((a.message_queue.broker.name, a.message_queue.id) for a in assignment.assignments) == [
                    (b, q) for b in ("broker-a", "broker-b") for q in range(4)
                ]
                assert {a.message_queue.broker.endpoints.addresses[0].port for a in assignment.assignments} == set(grpc_ports)
                # An unsupported call answers a proper gRPC status, not a crash.
                with pytest.raises(grpc.RpcError) as e:
                    stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(), timeout=5)
                assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
                # QueryOffset (min / max / by time) answers in RocketMQ's codes; an unknown topic is TOPIC_NOT_FOUND.
                assert stub.QueryOffset(spb.QueryOffsetRequest(), timeout=5).status.code == pb.Code.TOPIC_NOT_FOUND
                # Telemetry: a settings command is answered with the settings the broker enforces.
                publishing = pb.Settings(
                    client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="Orders")])
                )
                answers = list(stub.Telemetry(iter([spb.TelemetryCommand(settings=publishing)]), timeout=5))
                assert len(answers) == 1 and answers[0].status.code == pb.Code.OK
                assert answers[0].settings.publishing.max_body_size == 4 * 1024 * 1024
                assert [t.name for t in answers[0].settings.publishing.topics] == ["Orders"]

                # Bad sends answer the proxy's codes and store nothing: a batch is refused whole on its first
                # bad message (the stored count below is exactly MESSAGES).
                def message(topic="Orders", body=b"x", n=0, props=None):
                    return pb.Message(
                        topic=pb.Resource(name=topic),
                        body=body,
                        user_properties=props or {},
                        system_properties=pb.SystemProperties(
                            message_id=f"BAD{n:029X}", body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
                        ),
                    )

                refused = {
                    pb.Code.BAD_REQUEST: [],
                    pb.Code.TOPIC_NOT_FOUND: [message(), message("NoSuchTopic", n=1)],
                    pb.Code.MESSAGE_BODY_EMPTY: [message(), message(body=b"", n=1), message(n=2)],
                    pb.Code.MESSAGE_BODY_TOO_LARGE: [message(body=b"x" * (4 * 1024 * 1024 + 1))],
                    # a value that the record's reader would split into a DELAY property of the sender's choosing
                    pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY: [message(), message(n=1, props={"note": "x\x02DELAY\x013"})],
                }
                for code, batch in refused.items():
                    resp = stub.SendMessage(spb.SendMessageRequest(messages=batch), timeout=10)
                    assert resp.status.code == code, (pb.Code.Name(code), resp.status)
                    assert not resp.entries

            producer = Producer(ClientConfiguration(f"127.0.0.1:{grpc_ports[0]}", Credentials()), ("Orders",))
            producer.startup()
            acked: dict[str, tuple[str, int]] = {}
            try:
                for i in range(MESSAGES):
                    msg = ClientMessage()
                    msg.topic = "Orders"
                    msg.body = f"order-{i}".encode()
                    msg.tag = "created"
                    msg.keys = f"k{i}"
                    receipt = producer.send(msg)
                    acked[receipt.message_id] = (f"order-{i}", receipt.offset)
            finally:
                producer.shutdown()
            assert len(acked) == MESSAGES
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=30)

    per_broker = [stored_messages(root) for root in roots]
    assert all(len(msgs) > MESSAGES // 4 for msgs in per_broker), [len(m) for m in per_broker]  # both got sends
    stored = [m for msgs in per_broker for m in msgs]
    ids = [m.properties["UNIQ_KEY"] for m in stored]
    assert len(ids) == len(set(ids)) == MESSAGES  # none lost, none twice
    by_id = {m.properties["UNIQ_KEY"]: m for m in stored}
    for message_id, (body, offset) in acked.items():
        m = by_id[message_id]
        assert m.body == body.encode() and m.queue_offset == offset and m.properties["TAGS"] == "created"
    print(f"{MESSAGES} sends acknowledged; stored {[len(m) for m in per_broker]} on the two brokers")
