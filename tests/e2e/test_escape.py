"""Escape (RIP-32, seed 000; brokers/grpc/escape.py) with real broker processes: group-a is a classic
master and slave with enableSlaveActingMaster and enableRemoteEscape, group-b a second master of the
cluster; both carry the topic.

- Timers stored on group-a's master, killed before they are due: the slave acts for it, and its
  wheel sends them, when due and not before, to group-b's master, where the official client receives
  each once. The returning master takes the acting slave's timer checkpoint back at pre-online and
  does not deliver them again.
- Half messages stored on group-a's master, killed before they are committed: the acting slave takes
  the commits and sends the messages to group-b's master (a rollback sends nothing). The returning
  master takes the resolutions back at pre-online: its checks never ask a producer about them again,
  and nothing is committed twice."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import httpx
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer, TransactionChecker
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from brokers.topics import TopicConfig, TopicConfigManager
from controlplane.models import ApiToken
from tests.e2e.test_acting_master import acting_pair, broker_log
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_replication import Replica, send, stop_all
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Delayed"
TXN_TOPIC = "Payments"
ESCAPE = {"enableRemoteEscape": "true"}


def send_raw(port: int, topic: str, system_properties: list[pb.SystemProperties]) -> spb.SendMessageResponse:
    """One SendMessage to one broker, a message per ``system_properties`` (all accepted)."""
    request = spb.SendMessageRequest(
        messages=[
            pb.Message(topic=pb.Resource(name=topic), body=f"{sp.message_id}-body".encode(), system_properties=sp)
            for sp in system_properties
        ]
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        response = rpc.MessagingServiceStub(channel).SendMessage(request, timeout=30)
    assert response.status.code == pb.Code.OK, response.status
    return response


def send_timers(port: int, count: int, deliver_ms: int) -> set[str]:
    """``count`` timer messages due at ``deliver_ms``; their ids."""
    at = Timestamp()
    at.FromMilliseconds(deliver_ms)
    ids = [f"ESCAPE{deliver_ms}{i:06d}" for i in range(count)]
    delay = pb.MessageType.DELAY
    send_raw(port, TOPIC, [pb.SystemProperties(message_id=m, message_type=delay, delivery_timestamp=at) for m in ids])
    return set(ids)


def consumer_of(port: int, group: str, topic: str) -> SimpleConsumer:
    consumer = SimpleConsumer(
        ClientConfiguration(f"127.0.0.1:{port}", Credentials()), group, {topic: FilterExpression()}, await_duration=1
    )
    consumer.startup()
    return consumer


@contextmanager
def two_groups(tmp_path, tag: str, *topics: TopicConfig, **extra) -> Iterator[tuple[Replica, Replica, Replica]]:
    """group-a (master, slave: acting master with escape) and group-b (a master), each with
    ``topics``, taking writes: (group-a's master, its slave, group-b's master); all stopped after."""
    token = ApiToken.issue(f"{tag}-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue(f'{tag}-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        r = httpx.patch(f"{base}/api/v1/nameserver/config", headers=admin, timeout=5, json={"supportActingMaster": True})
        assert r.status_code == 200, r.text
        master, slave = acting_pair(tmp_path, base, token, **ESCAPE, **extra)
        other = Replica(tmp_path, "b0", 0, "ASYNC_MASTER", base, token, brokerName="group-b")
        for replica in (master, slave, other):
            for topic in topics:
                TopicConfigManager(replica.root / "config" / "topics.json").update(topic)
        try:
            for replica in (master, slave, other):
                replica.start()
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 60, "group-a's master taking writes with its slave")
            wait_for(lambda: send(other.grpc_port, 1) == {pb.Code.OK: 1}, 60, "group-b's master taking writes")
            yield master, slave, other
        finally:
            stop_all(master, slave, other)


def kill_and_wait_for_the_acting_slave(master: Replica, slave: Replica) -> None:
    """Kill -9 the master; return once its slave acts for it. (A slave that registered before its
    master acted for it at start-up already: only a new "-> ACTING" line counts.)"""
    before = broker_log(slave).count("-> ACTING")
    master.stop(signal.SIGKILL)
    wait_for(lambda: broker_log(slave).count("-> ACTING") > before, 30, "the slave acting for its master")


def receive(consumer: SimpleConsumer, seconds: float, until: set[str] | None = None) -> dict[str, list[tuple[float, int]]]:
    got: dict[str, list[tuple[float, int]]] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until is not None and until <= got.keys()):
        for m in consumer.receive(32, 30):
            got.setdefault(m.message_id, []).append((time.time(), m.delivery_timestamp))
            consumer.ack(m)
    return got


def test_a_timer_due_while_its_master_is_down_escapes_to_another_master_once(tmp_path):
    delayed = TopicConfig(TOPIC, 4, 4, 6, attributes={"message.type": "DELAY"})
    with two_groups(tmp_path, "escape-t", delayed) as (master, slave, other):
        deliver_ms = int(time.time() * 1000) + 8000
        ids = send_timers(master.grpc_port, 20, deliver_ms)  # on every replica of group-a (inSyncReplicas=2)
        kill_and_wait_for_the_acting_slave(master, slave)
        assert time.time() * 1000 < deliver_ms, "the slave acted only after the timers were due"
        consumer = consumer_of(other.grpc_port, "escape-group", TOPIC)
        try:
            got = receive(consumer, 60, until=ids)
            assert got.keys() == ids, f"{len(ids - got.keys())} timers not delivered while their master was down"
            assert all(len(d) == 1 for d in got.values()), "a timer escaped twice"
            assert all(at * 1000 >= deliver_ms and shown == deliver_ms for d in got.values() for at, shown in d)

            master.start()  # pre-online takes the acting slave's timer checkpoint back
            wait_for(lambda: "pre-online done" in broker_log(master), 60, "the master back online")
            wait_for(lambda: "taking the acting master's checkpoint" in broker_log(master), 30, "the master's wheel")
            again = receive(consumer, 5)
            assert not (again.keys() & ids), "the returning master delivered escaped timers again"
        finally:
            consumer.shutdown()


class CommitAll(TransactionChecker):
    def __init__(self):
        self.asked: list[str] = []

    def check(self, message) -> int:
        self.asked.append(message.message_id)
        return TransactionResolution.COMMIT


def send_halves(port: int, count: int) -> dict[str, str]:
    """``count`` half messages: message id -> transaction id."""
    txn = pb.MessageType.TRANSACTION
    response = send_raw(port, TXN_TOPIC, [pb.SystemProperties(message_id=f"HALF{i:06d}", message_type=txn) for i in range(count)])
    return {e.message_id: e.transaction_id for e in response.entries}


def end_transactions(port: int, halves: dict[str, str], resolution: int) -> list[int]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        return [
            stub.EndTransaction(
                spb.EndTransactionRequest(
                    topic=pb.Resource(name=TXN_TOPIC),
                    message_id=message_id,
                    transaction_id=transaction_id,
                    resolution=resolution,
                    source=pb.TransactionSource.SOURCE_CLIENT,
                ),
                timeout=30,
            ).status.code
            for message_id, transaction_id in halves.items()
        ]


def test_a_transaction_committed_while_its_master_is_down_escapes_once_and_is_never_checked_again(tmp_path):
    payments = TopicConfig(TXN_TOPIC, 4, 4, 6, attributes={"message.type": "TRANSACTION"})
    with two_groups(tmp_path, "escape-x", payments, transactionTimeOut=1000, transactionCheckInterval=1000) as (
        master,
        slave,
        other,
    ):
        halves = send_halves(master.grpc_port, 20)
        commit = dict(list(halves.items())[:10])
        rollback = dict(list(halves.items())[10:])
        kill_and_wait_for_the_acting_slave(master, slave)
        wait_for(
            lambda: set(end_transactions(slave.grpc_port, commit, pb.TransactionResolution.COMMIT)) == {pb.Code.OK},
            30,
            "the acting slave's commits",
        )
        assert set(end_transactions(slave.grpc_port, rollback, pb.TransactionResolution.ROLLBACK)) == {pb.Code.OK}
        consumer = consumer_of(other.grpc_port, "escape-txn", TXN_TOPIC)
        checker = CommitAll()
        producer = None
        try:
            got = receive(consumer, 60, until=set(commit))
            assert got.keys() == set(commit), (
                "committed while the master was down and not delivered, or rolled back and delivered"
            )
            assert all(len(d) == 1 for d in got.values())

            master.start()  # pre-online takes the resolutions back
            wait_for(lambda: "pre-online done" in broker_log(master), 60, "the master back online")
            producer = Producer(ClientConfiguration(f"127.0.0.1:{master.grpc_port}", Credentials()), (TXN_TOPIC,), checker)
            producer.startup()  # a producer of the group that would commit anything it is asked about
            time.sleep(5)  # several check runs of the returning master
            again = receive(consumer, 3)
            assert not (again.keys() & set(halves)), "a transaction the acting master resolved was committed again"
            assert not set(checker.asked) & set(halves), "the returning master checked a resolved transaction"
            assert "took back 20 transactions the acting master resolved" in broker_log(master)
        finally:
            consumer.shutdown()
            if producer is not None:
                producer.shutdown()
