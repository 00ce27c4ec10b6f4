"""FIFO messages with the official Python client (issue 17) on three all-ack replicas in controller
mode: a FIFO topic, 10 message groups x 30 messages sent in order with ``message_group``, received by
a SimpleConsumer. Every group's messages arrive in send order, each carrying its group; a message
the consumer does not ack comes again when its invisible time is over, with the next delivery
attempt, before any later message of its queue; and a kill -9 of the master in the middle of the
consumption breaks no group's order (the new master holds the old one's in-flight state), and
neither does a slave acting for its stopped master (classic mode, RIP-32): the batch the master had
in flight comes again from the slave, in place, before anything later of its queue. A message
group the proxy would refuse is refused with ILLEGAL_MESSAGE_GROUP, and a FIFO message sent to a
NORMAL topic with MESSAGE_PROPERTY_CONFLICT_WITH_TYPE; a SimpleConsumer of the FIFO topic is told
``subscription.fifo`` in its settings."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc
from rocketmq.v5.exception import BadRequestException

from brokers.core.fifo import queue_of_group
from brokers.topics import TopicConfig, TopicConfigManager
from controlplane.models import ApiToken
from tests.e2e.test_acting_master import acting_pair, broker_log
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import iter_messages, three_replicas
from tests.e2e.test_replication import send, stop_all
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Ordered"
QUEUES = 4
FIFO_TOPIC = TopicConfig(TOPIC, QUEUES, QUEUES, 6, attributes={"message.type": "FIFO"})
GROUPS = [f"group-{g}" for g in range(10)]
PER_GROUP = 30
INVISIBLE_S = 3


def access_of(replicas) -> str:
    return ";".join(f"127.0.0.1:{r.grpc_port}" for r in replicas)


def send_in_order(access: str) -> None:
    """Every group's messages, one at a time, the groups interleaved: body ``group:seq:index``
    (``index``: the place in the send order, which is the order within a queue)."""
    producer = Producer(ClientConfiguration(access, Credentials()), (TOPIC,))
    producer.startup()
    try:
        index = 0
        for seq in range(PER_GROUP):
            for group in GROUPS:
                msg = ClientMessage()
                msg.topic, msg.body, msg.message_group = TOPIC, f"{group}:{seq}:{index}".encode(), group
                producer.send(msg)
                index += 1
    finally:
        producer.shutdown()


@dataclass(frozen=True)
class Delivery:
    batch: int
    group: str
    seq: int
    index: int
    attempt: int

    @property
    def queue(self) -> int:
        return queue_of_group(self.group, QUEUES)


@dataclass
class FifoLog:
    """What the consumer saw, and the order rule of the issue: a message received after a later one
    of its group is a violation, unless it is a delivery again of one received before and nothing
    later of its group had been acked."""

    deliveries: list[Delivery] = field(default_factory=list)
    acked: dict[str, set[int]] = field(default_factory=lambda: {g: set() for g in GROUPS})
    unsure: dict[str, set[int]] = field(default_factory=lambda: {g: set() for g in GROUPS})  # the ack raised
    violations: list[str] = field(default_factory=list)
    batches: int = 0

    def received(self, messages: list) -> list[Delivery]:
        self.batches += 1
        out = []
        for m in messages:
            group, seq, index = m.body.decode().split(":")
            d = Delivery(self.batches, group, int(seq), int(index), m.delivery_attempt)
            assert m.message_group == group, f"message {m.body} carries group {m.message_group!r}"
            before = [x.seq for x in self.deliveries if x.group == group]
            later = [s for s in before if s > d.seq]
            if later and (d.seq not in before or any(s > d.seq for s in self.acked[group])):
                self.violations.append(f"{group}: {d.seq} (attempt {d.attempt}) received after {max(later)}")
            self.deliveries.append(d)
            out.append(d)
        return out

    def missing(self) -> dict[str, set[int]]:
        """Per group, what was not acked (nor maybe acked: the ack raised)."""
        left = {g: set(range(PER_GROUP)) - self.acked[g] - self.unsure[g] for g in GROUPS}
        return {g: seqs for g, seqs in left.items() if seqs}

    def done(self) -> bool:
        return not self.missing()

    def came_again_first(self, d: Delivery) -> Delivery:
        """``d``'s next delivery, asserting that it is the next attempt and that no later message
        of its queue came in between."""
        again = next(x for x in self.deliveries if x.batch > d.batch and (x.group, x.seq) == (d.group, d.seq))
        assert again.attempt == d.attempt + 1, again
        between = [x for x in self.deliveries if d.batch < x.batch < again.batch and x.queue == d.queue and x.index > d.index]
        assert between == [], f"{d}: later messages of its queue came first: {between}"
        first = next(x for x in self.deliveries if x.batch == again.batch and x.queue == d.queue)
        assert first.index <= again.index, f"{d}: {first} came first in the batch"
        return again

    def acked_count(self) -> int:
        return sum(len(a) for a in self.acked.values())


def consume(
    consumer: SimpleConsumer,
    seen: FifoLog,
    skip: Callable[[Delivery], bool],
    timeout_s: float,
    after_batch: Callable[[], None] = lambda: None,
    until: Callable[[], bool] | None = None,
) -> None:
    """Receive and ack as a FIFO consumer must: in order; a message not acked (``skip``, or its ack
    failed) stops the acks of its group for the rest of the batch (they come again after it).
    Until everything is acked (or ``until``)."""
    until = until or seen.done
    deadline = time.monotonic() + timeout_s
    while not until() and time.monotonic() < deadline:
        try:
            messages = consumer.receive(32, INVISIBLE_S)
        except Exception:  # the client's own retries are spent (a failover): ask again
            time.sleep(0.5)
            continue
        stopped: set[str] = set()
        for m, d in zip(messages, seen.received(messages), strict=True):
            if d.group in stopped or skip(d):
                stopped.add(d.group)
                continue
            try:
                consumer.ack(m)
            except Exception:
                seen.unsure[d.group].add(d.seq)
                stopped.add(d.group)
                continue
            seen.acked[d.group].add(d.seq)
        after_batch()


def simple_consumer(access: str, group: str) -> SimpleConsumer:
    consumer = SimpleConsumer(ClientConfiguration(access, Credentials()), group, {TOPIC: FilterExpression()}, await_duration=1)
    consumer.startup()
    return consumer


def test_each_group_is_received_in_order_and_an_unacked_message_comes_again_in_place(tmp_path):
    # (group, seq) -> the attempts that are not acked; group-5's 15th twice: it comes a third time
    not_acked = {("group-0", 3): {1}, ("group-1", 10): {1}, ("group-4", 10): {1}, ("group-2", 0): {1}}
    not_acked |= {("group-7", 29): {1}, ("group-5", 15): {1, 2}}
    with three_replicas(tmp_path, "fifo-a", topics=(FIFO_TOPIC,)) as (replicas, master, _, _):
        access = access_of(replicas)
        send_in_order(access)
        seen = FifoLog()
        consumer = simple_consumer(access, "fifo-a")
        try:
            consume(consumer, seen, lambda d: d.attempt in not_acked.get((d.group, d.seq), ()), 120)
        finally:
            consumer.shutdown()
        assert seen.missing() == {}
        assert seen.violations == []
        assert not any(seen.unsure.values()), f"acks failed: {seen.unsure}"

        times: dict[tuple[str, int], int] = {}
        for d in seen.deliveries:  # every delivery says which attempt it is
            times[(d.group, d.seq)] = times.get((d.group, d.seq), 0) + 1
            assert d.attempt == times[(d.group, d.seq)], d
        for key, attempts in not_acked.items():
            assert times[key] == max(attempts) + 1, f"{key} delivered {times[key]} times"

        # Strictly: a group's messages in a batch start at its first message not acked, and follow
        # one another (nothing of the group is skipped, nothing comes before its predecessors).
        acked: dict[str, set[int]] = {g: set() for g in GROUPS}
        for batch in range(1, seen.batches + 1):
            got = [d for d in seen.deliveries if d.batch == batch]
            for g in GROUPS:
                seqs = [d.seq for d in got if d.group == g]
                first = min(set(range(PER_GROUP)) - acked[g], default=PER_GROUP)
                assert seqs == list(range(first, first + len(seqs))), f"batch {batch}, {g}: {seqs} (first not acked {first})"
            stopped: set[str] = set()
            for d in got:  # replay the consumer's acks
                if d.group in stopped or d.attempt in not_acked.get((d.group, d.seq), ()):
                    stopped.add(d.group)
                else:
                    acked[d.group].add(d.seq)

        # A message not acked comes again (next attempt) before any later message of its queue.
        for key, attempts in not_acked.items():
            for attempt in attempts:
                seen.came_again_first(next(d for d in seen.deliveries if (d.group, d.seq) == key and d.attempt == attempt))

        # ILLEGAL_MESSAGE_GROUP for a group the proxy refuses; 40014 for a FIFO message to a NORMAL topic.
        producer = Producer(ClientConfiguration(access, Credentials()), (TOPIC,))
        producer.startup()
        try:
            msg = ClientMessage()
            msg.topic, msg.body, msg.message_group = TOPIC, b"bad-group", "g" * 65
            with pytest.raises(BadRequestException) as refused:
                producer.send(msg)
            assert refused.value.code == pb.Code.ILLEGAL_MESSAGE_GROUP
        finally:
            producer.shutdown()
        with grpc.insecure_channel(f"127.0.0.1:{master.grpc_port}") as channel:
            sp = pb.SystemProperties(
                message_id="F1F0" * 8, body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.FIFO, message_group="g"
            )
            request = spb.SendMessageRequest(
                messages=[pb.Message(topic=pb.Resource(name="Replicated"), body=b"f", system_properties=sp)]
            )
            answer = rpc.MessagingServiceStub(channel).SendMessage(request, timeout=10)
            assert answer.status.code == pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            # A SimpleConsumer subscribed to the FIFO topic is told fifo in its settings; one that is not, is not.
            assert [telemetry_fifo(channel, topic) for topic in (TOPIC, "Replicated")] == [True, False]
    assert b"bad-group" not in {m.body for m in iter_messages(replicas[0])}


def telemetry_fifo(channel: grpc.Channel, topic: str) -> bool:
    """``subscription.fifo`` in the settings a SimpleConsumer of ``topic`` gets back."""
    asked = pb.Settings(
        client_type=pb.ClientType.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name="fifo-a"), subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=topic))]
        ),
    )
    answers = rpc.MessagingServiceStub(channel).Telemetry(iter([spb.TelemetryCommand(settings=asked)]), timeout=10)
    return next(a for a in answers if a.HasField("settings")).settings.subscription.fifo


def test_a_kill_9_of_the_master_mid_consumption_breaks_no_groups_order(tmp_path):
    with three_replicas(tmp_path, "fifo-b", topics=(FIFO_TOPIC,)) as (replicas, master, info, master_of):
        access = access_of(replicas)
        send_in_order(access)
        seen = FifoLog()
        killed: list[int] = []  # the acks before the kill

        def kill_the_master_a_third_in() -> None:
            if not killed and seen.acked_count() >= len(GROUPS) * PER_GROUP // 3:
                master.stop(signal.SIGKILL)
                killed.append(seen.acked_count())

        # a few messages are not acked the first time, before and after the kill
        skip = {("group-3", 2), ("group-8", 20), ("group-6", 25)}
        consumer = simple_consumer(access, "fifo-b")
        try:
            consume(consumer, seen, lambda d: d.attempt == 1 and (d.group, d.seq) in skip, 180, kill_the_master_a_third_in)
        finally:
            consumer.shutdown()
        assert killed, "the master was never killed"
        wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
        assert seen.violations == [], seen.violations
        assert seen.missing() == {}
        assert seen.acked_count() > killed[0] + 100, "the consumption did not go on on the new master"
        for group, seq in skip:  # not acked the first time: it came again, before or after the kill
            assert any(d.attempt > 1 for d in seen.deliveries if (d.group, d.seq) == (group, seq)), (group, seq)


def test_a_slave_acting_for_its_stopped_master_hands_the_in_flight_batch_out_again_in_place(tmp_path):
    token = ApiToken.issue("fifo-acting-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('fifo-acting-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        master, slave = acting_pair(tmp_path, base, token)
        for r in (master, slave):
            TopicConfigManager(r.root / "config" / "topics.json").update(FIFO_TOPIC)
        r = httpx.patch(f"{base}/api/v1/nameserver/config", headers=admin, timeout=5, json={"supportActingMaster": True})
        assert r.status_code == 200, r.text
        try:
            master.start()
            slave.start()
            access = f"127.0.0.1:{master.grpc_port}"
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 60, "the master taking writes with its slave")
            send_in_order(access)
            seen = FifoLog()
            consumer = simple_consumer(access, "fifo-c")
            try:
                consume(consumer, seen, lambda d: False, 60, until=lambda: seen.acked_count() >= 100)
                # one batch more, never acked: in flight on the master, recorded for the slave
                in_flight = seen.received(_receive_some(consumer, 60))
            finally:
                consumer.shutdown()
            assert in_flight

            acting_before = broker_log(slave).count("-> ACTING")
            master.stop()  # unregisters: the slave is the group's smallest id
            wait_for(lambda: broker_log(slave).count("-> ACTING") > acting_before, 30, "the slave acting as master")
            consumer = simple_consumer(f"127.0.0.1:{slave.grpc_port}", "fifo-c")
            try:
                consume(consumer, seen, lambda d: False, 120)
            finally:
                consumer.shutdown()
        finally:
            stop_all(master, slave)
    assert seen.violations == [], seen.violations
    assert seen.missing() == {}
    for d in in_flight:  # each came again, attempt 2, before any later message of its queue
        seen.came_again_first(d)


def _receive_some(consumer: SimpleConsumer, timeout_s: float) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := consumer.receive(32, 60):
            return got
    return []
