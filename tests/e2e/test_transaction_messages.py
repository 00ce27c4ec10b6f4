"""Transactional messages with the official Python client (issue 17) on three all-ack replicas in
controller mode: a committed transaction's message arrives and a rolled-back one's never does; a
transaction whose producer vanished is checked with another producer of the group (a Telemetry
RecoverOrphanedTransactionCommand) and committed by its answer; half messages survive a kill -9 of
the master and commit once on the new master; an EndTransaction for an unknown transaction, or for
one of another topic, is refused with INVALID_TRANSACTION_ID and changes nothing."""

from __future__ import annotations

import signal
import time

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer, TransactionChecker
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from brokers.topics import TopicConfig
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import three_replicas

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Payments"
TXN_TOPIC = TopicConfig(TOPIC, 4, 4, 6, attributes={"message.type": "TRANSACTION"})


class Answer(TransactionChecker):
    """A producer's answer to every check, and the message ids it was asked about."""

    def __init__(self, resolution: int):
        self.resolution = resolution
        self.asked: list[str] = []

    def check(self, message) -> int:
        self.asked.append(message.message_id)
        return self.resolution


def access_of(replicas) -> str:
    return ";".join(f"127.0.0.1:{r.grpc_port}" for r in replicas)


def producer_of(access: str, checker: Answer) -> Producer:
    producer = Producer(ClientConfiguration(access, Credentials()), (TOPIC,), checker)
    producer.startup()
    return producer


def send_half(producer: Producer, body: str):
    """A half message: (its transaction, its send receipt)."""
    transaction = producer.begin_transaction()
    msg = ClientMessage()
    msg.topic, msg.body = TOPIC, body.encode()
    return transaction, producer.send(msg, transaction)


def receive(access: str, group: str, wanted: set[str], timeout_s: float, linger_s: float = 2.0) -> dict[str, int]:
    """Receive and ack until every id in ``wanted`` came (then ``linger_s`` more, to see what else
    comes) or ``timeout_s`` passed: deliveries per message id."""
    consumer = SimpleConsumer(ClientConfiguration(access, Credentials()), group, {TOPIC: FilterExpression()}, await_duration=1)
    consumer.startup()
    got: dict[str, int] = {}
    try:
        deadline, until = time.monotonic() + timeout_s, None
        while time.monotonic() < (until or deadline):
            for m in consumer.receive(32, 30):
                got[m.message_id] = got.get(m.message_id, 0) + 1
                consumer.ack(m)
            if until is None and wanted <= got.keys():
                until = time.monotonic() + linger_s
    finally:
        consumer.shutdown()
    return got


def test_a_committed_transaction_arrives_and_a_rolled_back_one_never_does(tmp_path):
    with three_replicas(tmp_path, "tx-a", topics=(TXN_TOPIC,)) as (replicas, _, _, _):
        access = access_of(replicas)
        producer = producer_of(access, Answer(TransactionResolution.ROLLBACK))
        committed, rolled_back = set(), set()
        try:
            for i in range(10):
                transaction, receipt = send_half(producer, f"commit-{i}")
                assert receipt.transaction_id == receipt.message_id
                transaction.commit()
                committed.add(receipt.message_id)
                transaction, receipt = send_half(producer, f"rollback-{i}")
                transaction.rollback()
                rolled_back.add(receipt.message_id)
        finally:
            producer.shutdown()
        got = receive(access, "tx-a", committed, 60)
        assert got == {m: 1 for m in committed}, f"rolled back and received: {rolled_back & got.keys()}"


def test_a_vanished_producers_transaction_is_checked_with_another_producer_and_committed(tmp_path):
    with three_replicas(tmp_path, "tx-b", topics=(TXN_TOPIC,), transactionTimeOut=1000, transactionCheckInterval=1000) as (
        replicas,
        _,
        _,
        _,
    ):
        access = access_of(replicas)
        first = producer_of(access, Answer(TransactionResolution.ROLLBACK))
        try:
            _, receipt = send_half(first, "orphan")
        finally:
            first.shutdown()  # gone without resolving it
        checker = Answer(TransactionResolution.COMMIT)
        second = producer_of(access, checker)
        try:
            got = receive(access, "tx-b", {receipt.message_id}, 60)
            assert got == {receipt.message_id: 1}
            assert receipt.message_id in checker.asked
        finally:
            second.shutdown()


def test_half_messages_survive_a_kill_9_of_the_master_and_commit_once(tmp_path):
    with three_replicas(tmp_path, "tx-c", topics=(TXN_TOPIC,)) as (replicas, master, info, master_of):
        access = access_of(replicas)
        producer = producer_of(access, Answer(TransactionResolution.ROLLBACK))
        try:
            halves = [send_half(producer, f"half-{i}") for i in range(10)]
            master.stop(signal.SIGKILL)
            wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
            for transaction, _ in halves:  # through a surviving replica, to the new master
                transaction.commit()
        finally:
            producer.shutdown()
        survivors = access_of([r for r in replicas if r is not master])
        ids = {receipt.message_id for _, receipt in halves}
        assert receive(survivors, "tx-c", ids, 60) == {m: 1 for m in ids}


def test_an_end_transaction_for_an_unknown_or_foreign_transaction_is_refused(tmp_path):
    with three_replicas(tmp_path, "tx-d", topics=(TXN_TOPIC,)) as (replicas, master, _, _):
        access = access_of(replicas)
        producer = producer_of(access, Answer(TransactionResolution.ROLLBACK))
        try:
            transaction, receipt = send_half(producer, "mine")
            with grpc.insecure_channel(f"127.0.0.1:{master.grpc_port}") as channel:
                stub = rpc.MessagingServiceStub(channel)

                def end(topic: str, transaction_id: str) -> int:
                    request = spb.EndTransactionRequest(
                        topic=pb.Resource(name=topic),
                        message_id=receipt.message_id,
                        transaction_id=transaction_id,
                        resolution=pb.TransactionResolution.COMMIT,
                        source=pb.TransactionSource.SOURCE_CLIENT,
                    )
                    return stub.EndTransaction(request, timeout=10).status.code

                assert end(TOPIC, "no-such-transaction") == pb.Code.INVALID_TRANSACTION_ID
                assert end(TOPIC, " ") == pb.Code.INVALID_TRANSACTION_ID
                assert end("Replicated", receipt.transaction_id) == pb.Code.INVALID_TRANSACTION_ID  # another topic's
            transaction.rollback()  # still unresolved: its own producer decides
        finally:
            producer.shutdown()
        assert receive(access, "tx-d", set(), 10, linger_s=3) == {}  # nothing was committed
