"""The lock quorum of RIP-32 (``lockInStrictMode``, reference §5.5) for FIFO consumption: a queue of a
FIFO topic is handed out only once its pop record (the queue's lock: what is in flight, brokers/core/fifo.py)
is on totalReplicas / 2 + 1 replicas, so that a new master never hands out a queue the old one had
handed out. Three replicas in controller mode that answer sends with one copy (inSyncReplicas=1, no
all-ack): with both slaves stopped, a normal send is still acknowledged but no FIFO queue is handed
out; resumed, the queue comes out in order."""

from __future__ import annotations

import os
import signal
import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from brokers.topics import TopicConfig
from tests.e2e.test_failover import three_replicas
from tests.e2e.test_replication import send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Ordered"
FIFO = TopicConfig(TOPIC, 1, 1, 6, attributes={"message.type": "FIFO"})


def receive(port: int, group: str) -> spb.ReceiveMessageResponse | list[pb.Message]:
    """One receive (invisible 2 s, acked): the messages, or the status when it was refused."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=2),
        long_polling_timeout=Duration(seconds=1),
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        answers = list(stub.ReceiveMessage(request, timeout=30))
        got = [a.message for a in answers if a.HasField("message")]
        if got:
            entries = [
                spb.AckMessageEntry(message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
                for m in got
            ]
            stub.AckMessage(
                spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=TOPIC), entries=entries), timeout=30
            )
            return got
        return answers[0]


def test_a_fifo_queue_is_handed_out_only_with_a_quorum_of_the_group(tmp_path):
    with three_replicas(
        tmp_path, "lq", topics=(FIFO,), lockInStrictMode="true", allAckInSyncStateSet="false", inSyncReplicas=1, totalReplicas=3
    ) as (replicas, master, _, _):
        producer = Producer(ClientConfiguration(f"127.0.0.1:{master.grpc_port}", Credentials()), (TOPIC,))
        producer.startup()
        try:
            sent = []
            for i in range(10):
                msg = ClientMessage()
                msg.topic, msg.body, msg.message_group = TOPIC, f"m{i}".encode(), "g1"
                sent.append(producer.send(msg).message_id)
        finally:
            producer.shutdown()
        slaves = [r for r in replicas if r is not master]
        for s in slaves:
            os.killpg(s.proc.pid, signal.SIGSTOP)
        try:
            assert send(master.grpc_port, 1, first=50_000) == {pb.Code.OK: 1}  # one copy is enough for a send
            refused = receive(master.grpc_port, "lq-group")
            assert isinstance(refused, spb.ReceiveMessageResponse), "a FIFO queue was handed out without a quorum"
            assert refused.status.code != pb.Code.OK and "pop not recorded" in refused.status.message, refused.status
        finally:
            for s in slaves:
                os.killpg(s.proc.pid, signal.SIGCONT)
        got: list[pb.Message] = []
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            answer = receive(master.grpc_port, "lq-group")
            if isinstance(answer, list):
                got += answer
        assert [m.system_properties.message_id for m in got] == sent  # in order, each once
