"""Timer messages (brokers/timer.py; its rules in brokers/core/timer.py): the rules table-tested
(accepting a delivery time, the rewrite into and out of the timer queue, the wheel that never
delivers early, the checkpoint rule a new master rebuilds from), then the service on a real store:
due messages reach their topic at their time, and a second service reading the same log (a new
master) delivers the rest and nothing twice."""

from __future__ import annotations

import asyncio
import time

import pytest

from brokers.core.timer import (
    REAL_QID,
    REAL_TOPIC,
    TIMER_DEQUEUE_MS,
    TIMER_OUT_MS,
    Checkpoint,
    TimerRefused,
    Wheel,
    delivery_due,
    still_pending,
)
from brokers.store.message import Message
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig
from brokers.timer import (
    CHECKPOINT_QUEUE,
    TIMER_TOPIC,
    WHEEL_QUEUE,
    TimerService,
    due_of,
    into_wheel,
    now_ms,
    out_of_wheel,
)

pytestmark = pytest.mark.unit

NOW, DAY = 1_700_000_000_000, 86_400_000


@pytest.mark.parametrize(
    "deliver, want",
    [
        (NOW + 5_000, NOW + 5_000),  # later: kept until then
        (NOW + DAY, NOW + DAY),  # the maximum itself
        (NOW, None),  # now: to its topic at once
        (NOW - 999, None),  # within the client's one-second resolution
        (NOW - 10_000, None),  # due 10 s ago (a producer's clock behind the broker's): at once, as RocketMQ
        (NOW - 30 * DAY, None),  # however long ago
    ],
)
def test_a_delivery_time_is_due_later_or_now(deliver, want):
    assert delivery_due(deliver, NOW, DAY) == want


@pytest.mark.parametrize(
    "deliver, why",
    [
        (NOW + DAY + 1, "beyond the maximum"),
        (NOW * 1000, "beyond the maximum"),  # milliseconds given as seconds
    ],
)
def test_only_a_delivery_time_too_far_ahead_is_refused(deliver, why):
    with pytest.raises(TimerRefused, match=why):
        delivery_due(deliver, NOW, DAY)


def test_a_timer_message_keeps_its_topic_queue_and_due_time_and_gets_them_back():
    msg = Message("Orders", 3, b"body", {"UNIQ_KEY": "id-1", "TAGS": "t"}, born_timestamp=7)
    kept = into_wheel(msg, NOW + 10)
    assert (kept.topic, kept.queue_id) == (TIMER_TOPIC, WHEEL_QUEUE)
    assert kept.properties[REAL_TOPIC] == "Orders" and kept.properties[REAL_QID] == "3"
    assert due_of(kept) == NOW + 10 and due_of(msg) is None
    back = out_of_wheel(kept, NOW, NOW + 10)
    assert (back.topic, back.queue_id, back.body, back.born_timestamp) == ("Orders", 3, b"body", 7)
    assert REAL_TOPIC not in back.properties and back.properties[TIMER_OUT_MS] == str(NOW + 10)
    assert back.properties[TIMER_DEQUEUE_MS] == str(NOW + 10) and back.properties["UNIQ_KEY"] == "id-1"
    assert due_of(back) is None  # never a timer message again


def test_the_wheel_gives_what_is_due_by_due_time_and_never_early():
    wheel = Wheel(100)
    for offset, due in [(0, 1_250), (1, 1_050), (2, 1_260), (3, 900), (4, 5_000)]:
        wheel.add(offset, due)
    assert wheel.take_due(899) == [] and wheel.next_due() == 900
    assert wheel.take_due(1_255) == [(900, 3), (1_050, 1), (1_250, 0)]  # 1_260 is in the slot, not due
    assert wheel.low(5) == 2
    assert wheel.take_due(1_260) == [(1_260, 2)]
    assert wheel.size == 1 and wheel.low(5) == 4 and wheel.next_due() == 5_000
    assert wheel.take_due(10_000) == [(5_000, 4)] and wheel.low(5) == 5 and wheel.next_due() is None


def test_an_entry_put_back_after_a_failed_write_counts_once_in_the_low_water_mark():
    wheel = Wheel(100)
    wheel.add(7, 100)
    wheel.add(8, 5_000)
    assert wheel.take_due(200) == [(100, 7)]
    wheel.add(7, 100)  # the write failed: due again
    assert wheel.low(9) == 7
    assert wheel.take_due(200) == [(100, 7)]
    assert wheel.low(9) == 8


@pytest.mark.parametrize(
    "offset, due, pending",
    [
        (4, NOW + DAY, False),  # below low: delivered
        (5, NOW - 1, False),  # read before the checkpoint and due by then: delivered
        (5, NOW, False),
        (6, NOW + 1, True),  # read, not due by then
        (10, NOW - 1, True),  # not read into the wheel before the checkpoint
    ],
)
def test_a_new_master_rebuilds_the_wheel_from_the_last_checkpoint(offset, due, pending):
    assert still_pending(Checkpoint(low=5, next=10, read_ms=NOW), offset, due) is pending


@pytest.mark.parametrize("body", [b"{}", b"not json", b'{"low":5,"next":4,"readMs":0}', b'{"low":-1,"next":4,"readMs":0}'])
def test_a_bad_checkpoint_is_refused(body):
    with pytest.raises((ValueError, KeyError)):
        Checkpoint.decode(body)


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def delivered(store: MessageStore, topic: str) -> list[Message]:
    out: list[Message] = []
    for qid in range(4):
        out += await store.get_messages(topic, qid, 0, 1000)
    return out


async def wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_due_messages_reach_their_topic_on_time_and_a_new_master_delivers_the_rest_once(tmp_path):
    async def scenario():
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
        await store.start()
        try:
            start = now_ms()
            soon = [into_wheel(Message("Orders", i % 4, f"s{i}".encode(), {"UNIQ_KEY": f"s{i}"}), start + 300) for i in range(20)]
            later = [
                into_wheel(Message("Orders", i % 4, f"l{i}".encode(), {"UNIQ_KEY": f"l{i}"}), start + 1_500) for i in range(20)
            ]
            assert all(r.status is PutMessageStatus.PUT_OK for r in await store.put_messages(soon + later))

            first = TimerService(store, precision_ms=20, max_delay_ms=DAY)
            first.activate()
            await wait_until(lambda: _count(store, 20))
            got = await delivered(store, "Orders")
            assert {m.properties["UNIQ_KEY"] for m in got} == {f"s{i}" for i in range(20)}
            assert all(m.store_timestamp >= start + 300 for m in got)  # never before its time
            await first.deactivate()  # deposed before the later ones are due
            assert store.max_queue_offset(TIMER_TOPIC, CHECKPOINT_QUEUE) >= 1

            second = TimerService(store, precision_ms=20, max_delay_ms=DAY)  # the new master, same log
            second.activate()
            await wait_until(lambda: _count(store, 40))
            await asyncio.sleep(0.3)  # and nothing more comes
            got = await delivered(store, "Orders")
            ids = [m.properties["UNIQ_KEY"] for m in got]
            assert sorted(ids) == sorted([f"s{i}" for i in range(20)] + [f"l{i}" for i in range(20)])  # each once
            assert all(m.store_timestamp >= start + 1_500 for m in got if m.properties["UNIQ_KEY"].startswith("l"))
            assert second.wheel.size == 0 and second.checkpoint.low == 40
            await second.deactivate()
        finally:
            await store.shutdown()

    run(scenario())


def order(uniq: str, i: int) -> Message:
    return Message("Orders", i % 4, uniq.encode(), {"UNIQ_KEY": uniq})


async def _count(store: MessageStore, n: int) -> bool:
    return len(await delivered(store, "Orders")) >= n
