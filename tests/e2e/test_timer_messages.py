"""Timer (delay) messages with the official Python client (issue 17) on three all-ack replicas in
controller mode: a message sent with a delivery time arrives at that time and not before, carrying
its delivery time; timers due after a kill -9 of the master arrive from the new master, each once;
a delivery time in the past is delivered at once (as RocketMQ); one beyond timerMaxDelaySec is
refused with ILLEGAL_DELIVERY_TIME and nothing is stored; 4.x delay levels go through the same
wheel, and a bad level is refused."""

from __future__ import annotations

import signal
import time

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.v5.exception import BadRequestException

from brokers.topics import TopicConfig
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import iter_messages, three_replicas

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Delayed"
DELAY_TOPIC = TopicConfig(TOPIC, 4, 4, 6, attributes={"message.type": "DELAY"})
LEVELS = "Leveled"  # a NORMAL topic: the official client sends a message with a DELAY property as NORMAL


def access_of(replicas) -> str:
    return ";".join(f"127.0.0.1:{r.grpc_port}" for r in replicas)


def send_timers(producer: Producer, count: int, deliver_s: int, tag: str) -> set[str]:
    """``count`` messages due at ``deliver_s`` (epoch seconds: the client's unit); their ids."""
    ids = set()
    for i in range(count):
        msg = ClientMessage()
        msg.topic, msg.body, msg.delivery_timestamp = TOPIC, f"{tag}-{i}".encode(), deliver_s
        ids.add(producer.send(msg).message_id)
    return ids


def receive(
    access: str, group: str, wanted: set[str], timeout_s: float, topic: str = TOPIC
) -> dict[str, list[tuple[float, int | None]]]:
    """Receive and ack until every id in ``wanted`` came or ``timeout_s`` passed: per id, each
    delivery's (time received, delivery timestamp in ms the broker gave)."""
    consumer = SimpleConsumer(ClientConfiguration(access, Credentials()), group, {topic: FilterExpression()}, await_duration=1)
    consumer.startup()
    got: dict[str, list[tuple[float, int | None]]] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while not wanted <= got.keys() and time.monotonic() < deadline:
            for m in consumer.receive(32, 30):
                got.setdefault(m.message_id, []).append((time.time(), m.delivery_timestamp))
                consumer.ack(m)
    finally:
        consumer.shutdown()
    return got


def timers_sent(access: str, count: int, deliver_s: int, tag: str) -> set[str]:
    """An official Producer sends ``count`` messages due at ``deliver_s``; their ids."""
    producer = Producer(ClientConfiguration(access, Credentials()), (TOPIC,))
    producer.startup()
    try:
        return send_timers(producer, count, deliver_s, tag)
    finally:
        producer.shutdown()


def test_a_delayed_message_arrives_at_its_time_and_not_before(tmp_path):
    with three_replicas(tmp_path, "tm-a", topics=(DELAY_TOPIC,)) as (replicas, _, _, _):
        access = access_of(replicas)
        deliver_s = int(time.time()) + 4
        ids = timers_sent(access, 20, deliver_s, "a")
        got = receive(access, "tm-a", ids, 60)
        assert got.keys() == ids
        for deliveries in got.values():
            assert len(deliveries) == 1
            received_at, delivery_ms = deliveries[0]
            assert received_at >= deliver_s, f"received {deliver_s - received_at:.3f} s before its time"
            assert delivery_ms == deliver_s * 1000  # the consumer sees the time it was due


def test_timers_due_after_a_kill_9_of_the_master_come_from_the_new_master_once(tmp_path):
    with three_replicas(tmp_path, "tm-b", topics=(DELAY_TOPIC,)) as (replicas, master, info, master_of):
        access = access_of(replicas)
        deliver_s = int(time.time()) + 8
        ids = timers_sent(access, 30, deliver_s, "b")
        master.stop(signal.SIGKILL)  # before they are due: the new master's wheel has them
        wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
        assert time.time() < deliver_s, "the election came after the timers were due: nothing was shown"
        survivors = access_of([r for r in replicas if r is not master])
        got = receive(survivors, "tm-b", ids, 60)
        assert got.keys() == ids, f"{len(ids - got.keys())} timers lost"
        assert all(len(d) == 1 for d in got.values()), "a timer was delivered twice"
        assert all(at >= deliver_s for d in got.values() for at, _ in d)


def test_a_delivery_time_beyond_the_maximum_is_refused_and_nothing_stored(tmp_path):
    with three_replicas(tmp_path, "tm-c", topics=(DELAY_TOPIC,)) as (replicas, _, _, _):
        access = access_of(replicas)
        with pytest.raises(BadRequestException) as refused:
            timers_sent(access, 1, int(time.time()) + 4 * 86_400, "bad")
        assert refused.value.code == pb.Code.ILLEGAL_DELIVERY_TIME
        ok = timers_sent(access, 1, int(time.time()), "now")  # due now: at once
        got = receive(access, "tm-c", ok, 30)
        assert got.keys() == ok
    for r in replicas:  # stopped: the refused message is in no replica's log, in no topic
        bodies = {m.body for m in iter_messages(r)}
        assert b"now-0" in bodies and b"bad-0" not in bodies


def test_a_delivery_time_in_the_past_is_delivered_at_once(tmp_path):
    """As RocketMQ: a timer due 10 s ago (a producer's clock behind the broker's, a retry across a
    failover of a timer already due) goes to its topic at once, never through the wheel, and the
    consumer sees the delivery time it was given."""
    with three_replicas(tmp_path, "tm-p", topics=(DELAY_TOPIC,)) as (replicas, _, _, _):
        access = access_of(replicas)
        deliver_s = int(time.time()) - 10
        ids = timers_sent(access, 5, deliver_s, "past")
        got = receive(access, "tm-p", ids, 30)
        assert got.keys() == ids
        assert all(len(d) == 1 and d[0][1] == deliver_s * 1000 for d in got.values())
    for r in replicas:
        stored = [m for m in iter_messages(r) if m.body.startswith(b"past-")]
        assert len(stored) == 5 and {m.topic for m in stored} == {TOPIC}  # its topic, not the timer wheel's


def test_delay_levels_go_through_the_wheel_and_a_bad_level_is_refused(tmp_path):
    """useDelayLevel: a delivery time 2-3 s ahead is rounded up to level 2 (5 s); a DELAY property of
    level 1 is due 1 s after it is stored; ``DELAY=soon`` is refused with ILLEGAL_MESSAGE_PROPERTY_KEY
    and nothing is stored."""
    topics = (DELAY_TOPIC, TopicConfig(LEVELS, 4, 4, 6))
    with three_replicas(tmp_path, "tm-d", topics=topics, useDelayLevel="true") as (replicas, _, _, _):
        access = access_of(replicas)
        producer = Producer(ClientConfiguration(access, Credentials()), (TOPIC, LEVELS))
        producer.startup()
        try:
            warm = ClientMessage()  # the first send fetches routes: on a busy machine that can take a second
            warm.topic, warm.body = LEVELS, b"warm"
            warm_id = producer.send(warm).message_id
            sent_at = time.time()
            rounded = send_timers(producer, 5, int(sent_at) + 3, "rounded")  # 2-3 s ahead: level 2
            leveled = set()
            for i in range(5):
                msg = ClientMessage()
                msg.topic, msg.body = LEVELS, f"level1-{i}".encode()
                msg.add_property("DELAY", "1")
                leveled.add(producer.send(msg).message_id)
            bad = ClientMessage()
            bad.topic, bad.body = LEVELS, b"bad-level"
            bad.add_property("DELAY", "soon")
            with pytest.raises(BadRequestException) as refused:
                producer.send(bad)
            assert refused.value.code == pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY
        finally:
            producer.shutdown()
        got = receive(access, "tm-d", rounded, 60)
        assert got.keys() == rounded
        for [(received_at, delivery_ms)] in got.values():
            assert received_at >= sent_at + 5, "delivered before its level's 5 s"
            assert sent_at * 1000 + 5000 <= delivery_ms <= time.time() * 1000  # the level's time, not the asked one
        got = receive(access, "tm-d", leveled, 60, topic=LEVELS)
        assert got.keys() - {warm_id} == leveled
        assert all(received_at >= sent_at + 1 for [(received_at, _)] in got.values())
    for r in replicas:
        bodies = {m.body for m in iter_messages(r)}
        assert b"level1-0" in bodies and b"bad-level" not in bodies
