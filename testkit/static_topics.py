"""Static topics from outside (tests and bench/logical_queues.py): the mapping over REST, and logical
queues read over plain gRPC, offsets included (the official Python client does not show them)."""

from __future__ import annotations

import threading
import time

import grpc
import httpx
from google.protobuf.duration_pb2 import Duration
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

API = "/api/v1/nameserver/static-topics"


def create(base: str, admin: dict, topic: str, queues: int, brokers: list[str]) -> dict:
    r = httpx.post(
        f"{base}{API}", headers=admin, timeout=10, json={"topicName": topic, "queueNums": queues, "brokerNames": brokers}
    )
    assert r.status_code == 200, r.text
    return r.json()


def mapping(base: str, admin: dict, topic: str) -> dict:
    r = httpx.get(f"{base}{API}/{topic}", headers=admin, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def settled(base: str, admin: dict, topic: str) -> bool:
    """Every move decided: no segment without a logical start."""
    return all(s["logicStart"] is not None for q in mapping(base, admin, topic)["queues"] for s in q["segments"])


def migrate(base: str, admin: dict, topic: str, body: dict) -> dict:
    r = httpx.post(f"{base}{API}/{topic}/migrations", headers=admin, timeout=10, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def routed(base: str, admin: dict, topic: str, broker_sets: int) -> bool:
    r = httpx.get(f"{base}/api/v1/nameserver/routes/{topic}", headers=admin, timeout=5)
    return r.status_code == 200 and "logicQueueMapping" in r.json() and len(r.json()["brokerDatas"]) == broker_sets


def _queue(topic: str, lid: int) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=lid)


def query_offset(port: int, topic: str, lid: int, policy: int, at_s: float | None = None) -> int:
    """QueryOffset of a logical queue (``at_s``: the time, in seconds, of a TIMESTAMP query)."""
    request = spb.QueryOffsetRequest(message_queue=_queue(topic, lid), query_offset_policy=policy)
    if at_s is not None:
        request.timestamp.FromMilliseconds(int(at_s * 1000))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        r = rpc.MessagingServiceStub(channel).QueryOffset(request, timeout=10)
    assert r.status.code == pb.Code.OK, r.status
    return r.offset


def read_queue(port: int, topic: str, group: str, lid: int, end: int, timeout_s: float = 90) -> list[tuple[int, bytes]]:
    """Logical queue ``lid`` up to logical offset ``end`` as ``group`` receives it over plain gRPC
    (each batch acked): (logical offset, body) in the order received."""
    got: list[tuple[int, bytes]] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 256 << 20)]) as channel:
        stub = rpc.MessagingServiceStub(channel)
        deadline = time.monotonic() + timeout_s
        while len(got) < end and time.monotonic() < deadline:
            request = spb.ReceiveMessageRequest(
                group=pb.Resource(name=group),
                message_queue=_queue(topic, lid),
                filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                batch_size=64,
                invisible_duration=Duration(seconds=30),
                long_polling_timeout=Duration(seconds=1),
            )
            batch = [r.message for r in stub.ReceiveMessage(request, timeout=10) if r.HasField("message")]
            for m in batch:
                assert m.system_properties.queue_id == lid, (m.system_properties.queue_id, lid)
                got.append((m.system_properties.queue_offset, m.body))
            if batch:
                entries = [
                    spb.AckMessageEntry(
                        message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
                    )
                    for m in batch
                ]
                acked = stub.AckMessage(
                    spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=entries),
                    timeout=10,
                )
                assert acked.status.code == pb.Code.OK, acked.status
    return got


def order_violations(offsets: list[int]) -> int:
    """Places where a queue's offsets, in the order received, do not go up by exactly one."""
    return sum(1 for a, b in zip(offsets, offsets[1:], strict=False) if b != a + 1)


class ProducerLoad:
    """The official Python Producer sending ``m-<i>`` bodies to ``topic`` one after another (a 2 ms
    pause after each answer) in a thread, until stopped: ``acked`` (time, message id, body) per
    acknowledged send, ``errors`` per send the client gave up on (not acknowledged)."""

    def __init__(self, access: str, topic: str):
        self.producer = Producer(ClientConfiguration(access, Credentials()), (topic,))
        self.topic = topic
        self.acked: list[tuple[float, str, bytes]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def sent(self) -> dict[str, bytes]:
        return {message_id: body for _, message_id, body in list(self.acked)}

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            msg = ClientMessage()
            msg.topic, msg.body = self.topic, f"m-{i}".encode()
            try:
                self.acked.append((time.time(), self.producer.send(msg).message_id, msg.body))
            except Exception as exc:  # counted: not acknowledged
                self.errors.append(repr(exc))
            i += 1
            time.sleep(0.002)

    def start(self) -> ProducerLoad:
        self.producer.startup()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops sending (idempotent); the producer is shut down by ``close``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def close(self) -> None:
        self.stop()
        self.producer.shutdown()

    def __enter__(self) -> ProducerLoad:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
