"""OFFSET_OVERFLOW (RocketMQ corrects a consumer offset beyond its queue's end): a broker that takes
over with a committed offset beyond the queue's end — what an unclean election, or a persisted table
ahead of a log that was cut, leaves — starts the group again at the end at once, says so in its log
and reports the corrected offset (source ``offset_corrected``), so the messages produced afterwards
are all delivered, none skipped. A real broker process; its persisted table is made to say 201 for
a queue whose log ends at 153; the report reaches the control plane's offset-event buffer."""

from __future__ import annotations

import json
import os
import signal
import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from audits import event_store
from brokers.topics import TopicConfig, TopicConfigManager
from chaos.workload import read_back
from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_acting_master import broker_log
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

GROUP, TOPIC = "ledger", "Single"


class Broker:
    """One broker process: started, stopped (SIGTERM), its log read by ``broker_log``."""

    name = "overflow"

    def __init__(self, conf):
        self.conf, self.proc = conf, None

    def start(self) -> None:
        self.proc = start_broker(self.conf, self.name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)


def send(port: int, first: int, count: int) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = rpc.MessagingServiceStub(channel)
        for n in range(first, first + count):
            msg = pb.Message(
                topic=pb.Resource(name=TOPIC),
                body=f"m{n}".encode(),
                system_properties=pb.SystemProperties(message_id=f"{n:032X}", message_type=pb.MessageType.NORMAL),
            )
            assert stub.SendMessage(spb.SendMessageRequest(messages=[msg]), timeout=30).status.code == pb.Code.OK


def receive_all(port: int) -> list[int]:
    """Every message the group gets now, received and acked: their queue offsets."""
    return [r.queue_offset for r in read_back(f"127.0.0.1:{port}", TOPIC, 1, group=GROUP)]


def corrected_reported() -> bool:
    return any(
        e.source == "offset_corrected" and e.offset == 153 and e.consumer_group == GROUP
        for _, batch in event_store.pending_batches()
        for e in batch.events
    )


def test_an_offset_beyond_the_queue_end_is_corrected_and_no_new_message_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_EVENTS_FLUSH_SECONDS", "3600")  # the test reads the buffer
    token = ApiToken.issue("overflow-broker", "broker")[1]
    with uvicorn_server() as base:
        run_scenario(tmp_path, base, token)


def run_scenario(tmp_path, base: str, token: str) -> None:
    root = tmp_path / "broker"
    TopicConfigManager(root / "config" / "topics.json").update(TopicConfig(TOPIC, 1, 1, 6))
    ports = BrokerPorts.reserve()
    conf = write_broker_conf(root / "broker.conf", broker_keys("group-o", root, ports, base, cluster="ovf", token=token))
    broker = Broker(conf)
    broker.start()
    try:
        send(ports.grpc, 0, 153)
        assert receive_all(ports.grpc) == list(range(153))
    finally:
        broker.stop()
    # What an unclean election leaves: the group's table says 201, the queue ends at 153.
    path = root / "config" / "consumerOffset.json"
    table = json.loads(path.read_text())
    key = f"{GROUP}@{TOPIC}@0"
    table["offsetTable"][key] = 201
    table["popTable"][key] = {"popOffset": 201, "ackedBelow": 201, "inFlight": [], "done": [], "redeliver": []}
    path.write_text(json.dumps(table))

    broker.start()
    try:
        deadline = time.monotonic() + 30
        while "OFFSET_OVERFLOW" not in broker_log(broker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "(201) is beyond the queue's end (153): corrected to 153 (OFFSET_OVERFLOW)" in broker_log(broker)
        send(ports.grpc, 153, 98)
        assert receive_all(ports.grpc) == list(range(153, 251))  # none of the 98 skipped
        wait_for(corrected_reported, 30, "the corrected offset reported to the audit")
    finally:
        broker.stop()
    persisted = json.loads(path.read_text())
    assert persisted["offsetTable"][key] == 251
