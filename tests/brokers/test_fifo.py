"""FIFO messages (brokers/core/fifo.py): message groups are checked as the proxy checks them and each goes
to one queue, stably and spread; a FIFO consumer group's orderly pop hands a queue out one batch at a
time, the next only once every delivery of the last is acked or past its invisible time, hands the
unacked ones out again in place and in order (attempt + 1, no retry topic), gives a message up to
the DLQ after retryMaxTimes + 1 deliveries, and decides the same on any replica that replayed the
master's records (a new master, an acting master). Received messages carry their group."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb

from brokers.consuming import ConsumeService
from brokers.core.fifo import (
    BLOCKED,
    MAX_GROUP_LENGTH,
    SHARDING_KEY,
    IllegalGroup,
    OrderlyPop,
    attempts_spent,
    check_group,
    due_again,
    is_orderly,
    max_attempts,
    plan_orderly_pop,
    queue_of_group,
    still_invisible,
)
from brokers.core.pop import InFlight, QueueState, ReceiptHandle
from brokers.grpc.consumer import SYSTEM_KEYS, ReceivingHandler
from brokers.grpc.settings import client_settings
from brokers.meta import ConsumerMeta
from brokers.metalog import MetaMode
from brokers.pop import PopState
from brokers.static import StaticQueues
from brokers.store.message import Message
from brokers.store.store import PutMessageStatus
from brokers.topics import TopicConfig, TopicConfigManager
from mqrules.topic_attributes import TopicMessageType

pytestmark = pytest.mark.unit

NOW = 1_000_000


# --- message groups -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "group",
    ["order-1", "a", "x" * MAX_GROUP_LENGTH, "订单 17", "user@example.com"],
    ids=["plain", "one-char", "64-chars", "unicode-and-space", "punctuation"],
)
def test_a_message_group_the_proxy_accepts_passes(group):
    check_group(group)


@pytest.mark.parametrize(
    "group, why",
    [
        ("", "blank"),
        ("   ", "blank"),
        ("x" * (MAX_GROUP_LENGTH + 1), "65 characters"),
        ("a\x00b", "control character"),
        ("tab\there", "control character"),
        ("line\n", "control character"),
        ("del\x7f", "control character"),
    ],
    ids=["empty", "spaces", "65-chars", "nul", "tab", "newline", "del"],
)
def test_a_message_group_the_proxy_refuses_is_illegal(group, why):
    with pytest.raises(IllegalGroup, match=why):
        check_group(group)


def test_a_group_always_goes_to_the_same_queue():
    groups = [f"order-{i}" for i in range(200)]
    first = [queue_of_group(g, 8) for g in groups]
    assert [queue_of_group(g, 8) for g in groups] == first
    assert all(0 <= q < 8 for q in first)
    assert {queue_of_group(g, 1) for g in groups} == {0}


def test_groups_spread_over_every_queue():
    counts = Counter(queue_of_group(f"user-{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8))
    assert all(800 <= n <= 1200 for n in counts.values()), counts


def test_adding_a_queue_moves_only_groups_to_the_new_queue():
    groups = [f"g{i}" for i in range(4000)]
    moved = [(queue_of_group(g, 8), queue_of_group(g, 9)) for g in groups if queue_of_group(g, 8) != queue_of_group(g, 9)]
    assert all(new == 8 for _, new in moved)  # jump consistent hash: a moved group lands on the new queue
    assert 300 <= len(moved) <= 600  # about 1/9 of them


# --- which receives are orderly; the settings a consumer gets ------------------------------------


@pytest.mark.parametrize("topic_type", list(TopicMessageType))
def test_only_a_fifo_topics_receives_are_orderly(topic_type):
    assert is_orderly(topic_type) is (topic_type is TopicMessageType.FIFO)


def consumer_settings(client_type, *topics: str) -> pb.Settings:
    return pb.Settings(
        client_type=client_type,
        subscription=pb.Subscription(
            group=pb.Resource(name="billing"),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=t)) for t in topics],
        ),
    )


@pytest.mark.parametrize(
    "client_type, topics, fifo",
    [
        (pb.ClientType.SIMPLE_CONSUMER, ("Orders",), True),
        (pb.ClientType.SIMPLE_CONSUMER, ("Audit", "Orders"), True),
        (pb.ClientType.SIMPLE_CONSUMER, ("Audit",), False),
        (pb.ClientType.SIMPLE_CONSUMER, (), False),
        # told fifo, the Python push consumer sends a failed message to the DLQ itself
        # (ForwardMessageToDeadLetterQueue, not served here)
        (pb.ClientType.PUSH_CONSUMER, ("Orders",), False),
    ],
    ids=["simple-fifo", "simple-one-of-two", "simple-normal", "simple-none", "push-fifo"],
)
def test_a_simple_consumer_subscribed_to_a_fifo_topic_is_told_fifo(client_type, topics, fifo):
    got = client_settings(consumer_settings(client_type, *topics), retry_max_times=16, fifo_topics={"Orders"})
    assert got.subscription.fifo is fifo
    assert got.backoff_policy.max_attempts == max_attempts(16) == 17  # the DLQ comes after these


def test_without_fifo_topics_no_consumer_is_told_fifo():
    assert not client_settings(consumer_settings(pb.ClientType.SIMPLE_CONSUMER, "Orders"), 16).subscription.fifo


# --- the orderly pop: pure rules ------------------------------------------------------------------


def queue(pop_offset: int, acked_below: int, in_flight=(), done=(), redeliver=None) -> QueueState:
    """``in_flight``: (offset, deadline, attempt)."""
    q = QueueState(pop_offset, acked_below)
    q.in_flight = {o: InFlight(deadline, attempt, f"n{o}") for o, deadline, attempt in in_flight}
    q.done = set(done)
    q.redeliver = dict(redeliver or {})
    return q


LATER, EARLIER = NOW + 5_000, NOW - 1


@pytest.mark.parametrize(
    "state, count, attempts, want",
    [
        (queue(0, 0), 32, 17, OrderlyPop(new=32)),
        (queue(10, 10), 4, 17, OrderlyPop(new=4)),
        # checkBlock: one delivery still invisible blocks the queue, whatever else is due
        (queue(3, 0, [(0, LATER, 1), (1, LATER, 1), (2, LATER, 1)]), 32, 17, BLOCKED),
        (queue(3, 0, [(0, EARLIER, 1), (2, LATER, 1)], done=[1]), 32, 17, BLOCKED),
        (queue(3, 0, [(0, NOW + 1, 1)]), 32, 17, BLOCKED),
        # the invisible time is over at its deadline (as pop.expired)
        (queue(1, 0, [(0, NOW, 1)]), 32, 17, OrderlyPop(again=((0, 2),), new=31)),
        # in place, in order, attempt + 1; the acked one (1) is not handed out again
        (queue(3, 0, [(2, EARLIER, 1), (0, EARLIER, 1)], done=[1]), 32, 17, OrderlyPop(again=((0, 2), (2, 2)), new=30)),
        (queue(8, 5, [(5, EARLIER, 4)]), 1, 17, OrderlyPop(again=((5, 5),))),
        # more due than the batch: the first ones, nothing new (the rest follow once these are done)
        (
            queue(4, 0, [(0, EARLIER, 1), (1, EARLIER, 1), (2, EARLIER, 1), (3, EARLIER, 1)]),
            2,
            17,
            OrderlyPop(again=((0, 2), (1, 2))),
        ),
        (queue(2, 0, [(0, EARLIER, 1), (1, EARLIER, 1)]), 2, 17, OrderlyPop(again=((0, 2), (1, 2)))),
        # attempts spent: to the DLQ (with the last attempt delivered) and the queue moves on
        (queue(6, 5, [(5, EARLIER, 17)]), 32, 17, OrderlyPop(dead=((5, 17),), new=32)),
        (queue(7, 5, [(5, EARLIER, 17), (6, EARLIER, 3)]), 32, 17, OrderlyPop(dead=((5, 17),), again=((6, 4),), new=31)),
        (queue(6, 5, [(5, EARLIER, 16)]), 32, 17, OrderlyPop(again=((5, 17),), new=31)),
        (queue(6, 5, [(5, EARLIER, 1)]), 32, 0, OrderlyPop(dead=((5, 1),), new=32)),  # retryMaxTimes=-1: once
        # an acting master cannot write a DLQ: it hands the message out again, however often
        (queue(6, 5, [(5, EARLIER, 40)]), 32, None, OrderlyPop(again=((5, 41),), new=31)),
        # revived in place by an acting master (pop.py redeliver holds the next attempt), merged in order
        (queue(9, 5, [(7, EARLIER, 2)], done=[6, 8], redeliver={5: 3}), 32, 17, OrderlyPop(again=((5, 3), (7, 3)), new=30)),
        (queue(9, 5, [(7, LATER, 2)], redeliver={5: 3}), 32, 17, BLOCKED),
    ],
    ids=[
        "fresh-queue",
        "from-the-committed-offset",
        "batch-in-flight",
        "one-invisible-one-expired",
        "invisible-one-ms-more",
        "deadline-reached",
        "again-in-order-without-the-acked",
        "again-attempt-counts",
        "more-due-than-the-batch",
        "due-exactly-the-batch",
        "spent-to-the-dlq",
        "spent-then-again",
        "last-attempt-still-delivered",
        "no-retries",
        "acting-master-no-dlq",
        "acting-revived-merged",
        "acting-revived-blocked",
    ],
)
def test_orderly_pop(state, count, attempts, want):
    assert plan_orderly_pop(state, NOW, count, attempts) == want


def test_the_blocking_and_due_rules_agree():
    q = queue(4, 0, [(0, EARLIER, 1), (3, EARLIER, 2)], done=[1], redeliver={2: 5})
    assert not still_invisible(q, NOW) and due_again(q, NOW) == [(0, 2), (2, 5), (3, 3)]
    assert still_invisible(q, EARLIER - 1) and due_again(q, EARLIER - 1) == [(2, 5)]


@pytest.mark.parametrize(
    "attempt, attempts, spent",
    [(1, 17, False), (17, 17, False), (18, 17, True), (1, 1, False), (2, 1, True), (10**6, None, False)],
)
def test_a_message_is_given_up_after_max_attempts_deliveries(attempt, attempts, spent):
    assert attempts_spent(attempt, attempts) is spent


def test_max_attempts_is_the_backoff_policys():
    assert [max_attempts(n) for n in (0, 3, 16)] == [1, 4, 17]


# --- the orderly pop run against a PopState: the FIFO invariant -----------------------------------


class OrderlyConsumer:
    """A PopState and one queue of ``size`` messages, popped as consumer.py pops an orderly queue
    (plan, DLQ, hand out, record in the state); the test plays the client and the clock."""

    def __init__(self, size: int, attempts: int | None):
        self.state = PopState()
        self.size, self.attempts = size, attempts
        self.dead: list[int] = []

    def pop(self, count: int) -> list[tuple[ReceiptHandle, int]]:
        q = self.state.peek("g", "T", 0)
        plan = plan_orderly_pop(q, NOW, count, self.attempts)
        if plan.blocked:
            return []
        for offset, _ in plan.dead:
            self.dead.append(offset)
            self.state.queue("g", "T", 0).finish(offset)
        start = self.state.peek("g", "T", 0).pop_offset
        due = list(plan.again) + [(o, 1) for o in range(start, min(self.size, start + plan.new))]
        if not due:
            return []
        handles = self.state.pop("g", "T", 0, [o for o, _ in due], [a for _, a in due], 60_000)
        return list(zip(handles, [a for _, a in due], strict=True))

    def expire(self, handle: ReceiptHandle) -> None:
        self.state.queue("g", "T", 0).in_flight[handle.offset].deadline_ms = NOW


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 40), attempts=st.sampled_from([1, 3, None]))
def test_an_orderly_queue_hands_each_message_out_only_once_all_before_it_are_done(seed, size, attempts):
    """Random batch sizes; the client acks a prefix of each batch (in order, as a FIFO consumer
    must) and lets the rest expire. Every batch is in offset order, starts at the first offset not
    yet done, every offset below it is acked or given up; each redelivery is the next attempt; in
    the end every message is acked or in the DLQ after exactly ``attempts`` deliveries."""
    rnd = random.Random(seed)
    c = OrderlyConsumer(size, attempts)
    acked: set[int] = set()
    delivered: Counter[int] = Counter()
    for _ in range(size * 20):
        batch = c.pop(rnd.randint(1, 6))
        if not batch:
            if c.state.peek("g", "T", 0).acked_below >= size:
                break
            continue
        offsets = [h.offset for h, _ in batch]
        assert offsets == sorted(offsets)
        finished = acked | set(c.dead)
        assert all(o in finished for o in range(offsets[0])), f"{offsets[0]} handed out before an earlier one was done"
        assert offsets == [o for o in range(offsets[0], offsets[-1] + 1) if o not in finished]
        for h, attempt in batch:
            delivered[h.offset] += 1
            assert attempt == delivered[h.offset]
        # a second pop now finds the queue blocked
        assert c.pop(6) == []
        keep = rnd.randint(0, len(batch)) if rnd.random() < 0.7 else len(batch)
        for h, _ in batch[:keep]:
            assert c.state.ack(h)
            acked.add(h.offset)
        for h, _ in batch[keep:]:
            c.expire(h)
    assert acked | set(c.dead) == set(range(size))
    assert not acked & set(c.dead)
    if attempts is not None:
        assert all(delivered[o] == attempts for o in c.dead)


def test_a_changed_invisible_time_blocks_the_queue_until_it_passes():
    c = OrderlyConsumer(4, 17)
    (first, _), (second, _), (third, _) = c.pop(3)
    assert c.state.ack(first)
    longer = c.state.change_invisible(second, 60_000)
    c.expire(third)
    assert c.pop(3) == []  # 1 is invisible for a minute more
    c.expire(longer)  # (ChangeInvisibleDuration to 0, or the minute passed)
    assert [(h.offset, a) for h, a in c.pop(3)] == [(1, 2), (2, 2), (3, 1)]


# --- replicated: a new master or an acting master decides as the old master did -----------------


def replica(tmp_path, name: str) -> ConsumerMeta:
    root = tmp_path / name
    return ConsumerMeta(root / "consumerOffset.json", TopicConfigManager(root / "topics.json"))


def test_a_replica_that_replayed_the_records_keeps_the_queue_blocked_then_hands_out_in_place(tmp_path):
    """The old master handed out 0-2 (pop record) and recorded the ack of 1 (finish record); a
    replica that replayed both, or only the snapshot, hands out nothing until 0 and 2 are visible
    again, then 0 and 2 (attempt 2), then the rest: never 3 while 0 or 2 is in flight."""
    master = replica(tmp_path, "master")
    deadline = NOW + 30_000
    records = [
        master.record("group", group="g"),
        master.record("pop", group="g", topic="T", queueId=0, entries=[[o, deadline, 1, f"n{o}"] for o in range(3)], skipped=[]),
        master.record("finish", group="g", topic="T", queueId=0, offsets=[1]),
    ]
    follower, late = replica(tmp_path, "follower"), replica(tmp_path, "late")
    for r in records:
        follower.apply(r)
    master.groups.add("g")
    master.apply(records[1])
    master.apply(records[2])
    late.apply(master.snapshot())
    for meta in (follower, late):
        q = meta.pop.peek("g", "T", 0)
        assert plan_orderly_pop(q, NOW, 32, 17) is BLOCKED
        assert plan_orderly_pop(q, NOW, 32, None) is BLOCKED  # an acting master too
        assert plan_orderly_pop(q, deadline, 32, 17) == OrderlyPop(again=((0, 2), (2, 2)), new=30)
        assert q.pop_offset == 3  # new messages start after the in-flight ones


def test_a_takeover_brings_the_in_flight_batch_back_sooner_but_keeps_it_in_place(tmp_path):
    meta = replica(tmp_path, "new-master")
    meta.apply(meta.record("group", group="g"))
    meta.apply(meta.record("pop", group="g", topic="T", queueId=2, entries=[[7, NOW + 90_000, 3, "n7"]], skipped=[]))
    meta.pop.cap_deadlines(NOW + 5_000)  # popReviveAfterTakeoverMillis
    q = meta.pop.peek("g", "T", 2)
    assert plan_orderly_pop(q, NOW + 4_999, 8, 17) is BLOCKED
    assert plan_orderly_pop(q, NOW + 5_000, 8, 17) == OrderlyPop(again=((7, 4),), new=7)


def test_an_acting_masters_in_place_revive_keeps_the_order_and_the_attempt(tmp_path):
    state = PopState()
    state.pop("g", "T", 0, [4, 5, 6], [2, 1, 1], 60_000)
    q = state.queue("g", "T", 0)
    q.in_flight[5].deadline_ms = q.in_flight[6].deadline_ms = NOW
    state.revive_in_place("g", "T", 0, 6, 1)  # the acting master's revive loop; 4 is still invisible
    assert plan_orderly_pop(q, NOW, 8, None) is BLOCKED
    q.in_flight[4].deadline_ms = NOW
    assert plan_orderly_pop(q, NOW, 8, None) == OrderlyPop(again=((4, 3), (5, 2), (6, 2)), new=5)
    again = PopState.from_wire(state.to_wire(), {}).queue("g", "T", 0)  # what pre-online pulls back
    assert plan_orderly_pop(again, NOW, 8, 17) == OrderlyPop(again=((4, 3), (5, 2), (6, 2)), new=5)


# --- the queue's lock: an ack never changes what a pop is deciding on ----------------------------


class SlowStore:
    """A queue ``T``/0 of ``size`` messages whose reads take a turn of the event loop."""

    def __init__(self, size: int):
        self.messages = [
            Message("T", 0, b"m", {SHARDING_KEY: "g"}, born_timestamp=NOW, store_timestamp=NOW, queue_offset=o)
            for o in range(size)
        ]

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        return len(self.messages)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return 0

    async def get_messages(self, topic: str, queue_id: int, offset: int, count: int) -> list[Message]:
        await asyncio.sleep(0)
        return self.messages[offset : offset + count]


def serving_master(tmp_path, size: int) -> ReceivingHandler:
    """The receiving side of a master (records stored after a turn of the loop) with one FIFO topic."""
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.update(TopicConfig("T", 1, 1, attributes={"message.type": "FIFO"}))

    async def write(record: dict, min_acks: int = 0):
        await asyncio.sleep(0)
        return SimpleNamespace(status=PutMessageStatus.PUT_OK, detail="")

    config = SimpleNamespace(retryMaxTimes=16, broker_addr="127.0.0.1:10911", lockInStrictMode=False, totalReplicas=1)
    store = SlowStore(size)
    static = StaticQueues("broker-a", store.max_queue_offset)
    meta = ConsumerMeta(tmp_path / "consumerOffset.json", topics)
    consuming = ConsumeService(config, store, topics, meta, SimpleNamespace(mode=MetaMode.WRITER, write=write), static)
    return ReceivingHandler(config, consuming, topics, static, hops=None, to_master=None)


def test_an_ack_waits_for_the_pop_that_hands_its_message_out_again(tmp_path):
    """0 and 1 were handed out and their invisible time is over; a pop hands them out again while an
    ack with 0's old handle comes in. The ack waits for the pop (RocketMQ's ackOrderly waits for the
    queue lock): the handle is no longer valid, and what the pop handed out is in flight as handed out."""
    side = serving_master(tmp_path, 3)

    async def scenario():
        first = await side.consuming.pop_orderly("g", "T", 0, 2, 30_000, lambda tags: True)
        assert [m.queue_offset for m, _, _ in first] == [0, 1]
        for flight in side.consuming.pop.queue("g", "T", 0).in_flight.values():
            flight.deadline_ms = 0
        old_handle = first[0][1]
        pop = asyncio.ensure_future(side.consuming.pop_orderly("g", "T", 0, 2, 30_000, lambda tags: True))
        await asyncio.sleep(0)  # the pop holds the lock and reads
        acked = await side.ack_queue(("g", "T", 0), [old_handle])
        return await pop, acked

    again, acked = asyncio.run(scenario())
    assert [(m.queue_offset, attempt) for m, _, attempt in again] == [(0, 2), (1, 2)]
    assert [status.code for status in acked] == [pb.Code.INVALID_RECEIPT_HANDLE]
    assert all(side.consuming.pop.ack(handle) for _, handle, _ in again)  # every handle handed out is good


def test_a_change_of_invisible_time_waits_for_the_pop_too(tmp_path):
    side = serving_master(tmp_path, 2)

    async def scenario():
        (m, handle, _), _ = await side.consuming.pop_orderly("g", "T", 0, 2, 30_000, lambda tags: True)
        side.consuming.pop.queue("g", "T", 0).in_flight[0].deadline_ms = 0
        side.consuming.pop.queue("g", "T", 0).in_flight[1].deadline_ms = 0
        pop = asyncio.ensure_future(side.consuming.pop_orderly("g", "T", 0, 2, 30_000, lambda tags: True))
        await asyncio.sleep(0)
        request = SimpleNamespace(receipt_handle=handle.encode(), invisible_duration=SimpleNamespace(seconds=60, nanos=0))
        answer = await side.ChangeInvisibleDuration(request, None)
        return await pop, answer

    again, answer = asyncio.run(scenario())
    assert [m.queue_offset for m, _, _ in again] == [0, 1]
    assert answer.status.code == pb.Code.INVALID_RECEIPT_HANDLE


# --- what a consumer receives -------------------------------------------------------------------


def test_a_received_fifo_message_carries_its_group_and_type_and_no_sharding_key_property():
    side = ReceivingHandler(SimpleNamespace(broker_addr="127.0.0.1:10911"), None, None, None, None, None)
    props = {"UNIQ_KEY": "id-1", SHARDING_KEY: "order-17", "color": "red"}
    m = Message("Orders", 2, b"x", props, born_timestamp=NOW, store_timestamp=NOW, queue_offset=5)
    got = side.client_message(m, ReceiptHandle("g", "Orders", 2, 5, "n"), 2, 30_000, 2)
    sp = got.system_properties
    assert (sp.message_group, sp.message_type, sp.delivery_attempt) == ("order-17", pb.MessageType.FIFO, 2)
    assert dict(got.user_properties) == {"color": "red"} and SHARDING_KEY in SYSTEM_KEYS
    plain = Message("Orders", 2, b"x", {"UNIQ_KEY": "id-2"}, born_timestamp=NOW, store_timestamp=NOW, queue_offset=6)
    sp = side.client_message(plain, ReceiptHandle("g", "Orders", 2, 6, "n"), 1, 30_000, 2).system_properties
    assert (sp.message_group, sp.message_type) == ("", pb.MessageType.NORMAL)
