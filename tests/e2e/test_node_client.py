"""The official RocketMQ Node.js client (npm rocketmq-client-nodejs 1.0.8, clients/nodejs) against a
three-replica group in controller mode (issue 16: every official client, not one): its Producer and
SimpleConsumer start on our Telemetry settings and routes, produce and consume; a kill -9 of the
master loses nothing acknowledged; and it shares a topic with the official Python client.

The Node client asks for queue 0 of each broker only (docs/failover.md has the line references); a
receive pops every readable queue of the topic, the one asked first (as RocketMQ's proxy pops every
queue of the broker), so its SimpleConsumer reads the whole four-queue topic here.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb

from chaos.node_client import node_client_process
from chaos.official_client import EventLog
from testkit.procs import Process
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import three_replicas
from tests.e2e.test_grpc_crash import received_by_a_new_consumer
from tests.e2e.test_replication import send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

FOUR_QUEUES = "Replicated"  # testkit's topic (4 queues), as the other client tests use


@contextmanager
def running(process: Process) -> Iterator[Process]:
    process.start()
    try:
        yield process
    finally:
        process.stop()


def node(role: str, name: str, tmp_path: Path, access: str, topic: str, *options: str) -> tuple[Process, EventLog]:
    out = tmp_path / f"{name}.jsonl"
    proc = node_client_process(role, name, tmp_path, "--access", access, "--topic", topic, "--out", str(out), *options)
    return proc, EventLog(out)


def ids(log: EventLog, kind: str) -> set[str]:
    return {e["id"] for e in log.of(kind)}


def alive_and(process: Process, predicate) -> bool:
    return process.check_alive() and predicate()


def test_the_node_producer_and_simple_consumer_produce_and_consume(tmp_path):
    with three_replicas(tmp_path, "node-a") as (replicas, master, _, _):
        access = f"127.0.0.1:{master.grpc_port}"
        producer, sent = node("produce", "node-producer", tmp_path, access, FOUR_QUEUES, "--interval-ms", "5")
        with running(producer):
            wait_for(lambda: alive_and(producer, lambda: len(sent.of("ack")) >= 300), 60, "300 sends acknowledged")
        assert sent.of("fail") == [], sent.of("fail")[:3]
        assert [e["kind"] for e in sent.of("started", "stopped")] == ["started", "stopped"]
        acked = ids(sent, "ack")

        consumer, got = node("consume", "node-consumer", tmp_path, access, FOUR_QUEUES, "--group", "node-a")
        with running(consumer):
            wait_for(lambda: alive_and(consumer, lambda: acked <= ids(got, "delivery")), 60, "every acknowledged message")
        assert got.of("receive_fail", "ack_fail") == [], got.of("receive_fail", "ack_fail")[:3]
        # the ids the client gave its sends are the ids it receives
        assert {e["msg_id"] for e in sent.of("ack")} <= {e["msg_id"] for e in got.of("delivery")}


def test_kill_9_of_the_master_under_the_node_producer_loses_nothing_acknowledged(tmp_path):
    """kill -9 of the master while the Node producer sends one message at a time (every 10 ms).

    What the Node client (1.0.8) does in the gap, from its source: its Producer builds the publishing
    route of a topic once, at the first send, and never again (the 30-s route refresh updates only
    the base client's cache; Producer does not override ``onTopicRouteDataUpdate``). Our routes give
    the Node client its group's master only (it cannot use a multi-address target), so every send
    goes to the killed master's address: connection refused, retried at once on the same broker up
    to the settings' three attempts, then failed. Those failures are unavoidable with this client,
    and it never moves to the new master by itself. It carries on when that address answers again:
    here the killed broker is restarted, comes back as a slave and forwards sends to the new master.
    So: no send fails outside the window from the kill to the first acknowledgement after the
    restart, a send still fails after the new master took writes (the client's doing, not the
    group's), the producer acknowledges sends again once the old address answers, and nothing
    acknowledged is lost (all-ack: each was on every in-sync replica)."""
    with three_replicas(tmp_path, "node-b") as (replicas, master, info, master_of):
        survivor = next(r for r in replicas if r is not master)  # the access point: routes stay reachable
        access = f"127.0.0.1:{survivor.grpc_port}"
        producer, sent = node("produce", "node-producer", tmp_path, access, FOUR_QUEUES, "--interval-ms", "10")
        with running(producer):
            wait_for(lambda: alive_and(producer, lambda: len(sent.of("ack")) >= 100), 60, "sends before the fault")
            master.stop(signal.SIGKILL)
            killed = sent.of("ack")[-1]["t"]
            wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
            elected = master_of(info())
            wait_for(lambda: send(elected.grpc_port, 1, first=10_000) == {pb.Code.OK: 1}, 30, "the new master's writes")
            taking_writes = time.time()
            # The client's doing, not the group's: it still sends to the dead address only.
            wait_for(lambda: any(f["sent"] > taking_writes for f in sent.of("fail")), 30, "a send failing after that")
            restarted = time.time()
            master.start()  # the same addresses: a slave now, it forwards the producer's sends
            wait_for(lambda: len(info().get("syncStateSet", [])) == 3, 90, "the old master back in sync")
            resumed = len(sent.of("ack"))
            wait_for(lambda: alive_and(producer, lambda: len(sent.of("ack")) >= resumed + 200), 90, "sends after the failover")
        acks, fails = sent.of("ack"), sent.of("fail")
        back = next(e["sent"] for e in acks if e["t"] > restarted)  # the first send acknowledged again
        outside = [f for f in fails if not killed <= f["sent"] < back]
        assert outside == [], f"sends failed outside the failover gap: {outside[:3]}"
        print(f"node producer: {len(acks)} acknowledged, {len(fails)} failed in the gap")

        assert master_of(info()) is elected
        reader = f"127.0.0.1:{elected.grpc_port}"
        consumer, got = node("consume", "node-consumer", tmp_path, reader, FOUR_QUEUES, "--group", "node-b")
        acked = ids(sent, "ack")
        with running(consumer):
            wait_for(lambda: alive_and(consumer, lambda: acked <= ids(got, "delivery")), 90, "every acknowledged message")


def test_the_node_and_python_clients_share_topics(tmp_path):
    """The same Settings and route answers satisfy both clients: a Node producer's messages on the
    four-queue topic reach a Python SimpleConsumer, and a Python producer's reach a Node
    SimpleConsumer (which asks for queue 0 only and is given every queue)."""
    with three_replicas(tmp_path, "node-c") as (replicas, master, _, _):
        access = f"127.0.0.1:{master.grpc_port}"
        every = ";".join(f"127.0.0.1:{r.grpc_port}" for r in replicas)
        producer, sent = node("produce", "node-producer", tmp_path, access, FOUR_QUEUES, "--interval-ms", "5")
        with running(producer):
            wait_for(lambda: alive_and(producer, lambda: len(sent.of("ack")) >= 200), 60, "Node sends acknowledged")
        assert sent.of("fail") == [], sent.of("fail")[:3]
        from_node = {e["msg_id"] for e in sent.of("ack")}

        received = received_by_a_new_consumer(every, "node-c-py", FOUR_QUEUES, from_node, 60)
        assert from_node <= received, f"{len(from_node - received)} Node messages not received by the Python consumer"

        python_producer = Producer(ClientConfiguration(every, Credentials()), (FOUR_QUEUES,))
        python_producer.startup()
        try:
            from_python: set[str] = set()
            for i in range(200):
                msg = ClientMessage()
                msg.topic, msg.body = FOUR_QUEUES, f"py-{i}".encode()
                python_producer.send(msg)
                from_python.add(f"py-{i}")
        finally:
            python_producer.shutdown()
        consumer, got = node("consume", "node-consumer", tmp_path, access, FOUR_QUEUES, "--group", "node-c")
        with running(consumer):
            wait_for(lambda: alive_and(consumer, lambda: from_python <= ids(got, "delivery")), 60, "every Python message")
        assert got.of("receive_fail", "ack_fail") == [], got.of("receive_fail", "ack_fail")[:3]
