"""A broker's static-topic mappings (brokers/static.py): only a newer epoch is adopted, writes go to
the logical queues this broker set owns in turn, physical offsets translate to logical ones, and a
move's seal waits for the sends already on their way to the store before it reports the end."""

from __future__ import annotations

import asyncio

import pytest

from brokers.static import StaticQueues
from mqrules.logical_queues import decide, initial, plan_moves

pytestmark = pytest.mark.unit

A, B = "broker-a", "broker-b"


def run(coro):
    return asyncio.run(coro)


def test_only_a_newer_mapping_is_adopted_and_a_malformed_one_is_ignored():
    async def go():
        s = StaticQueues(A, lambda t, q: 0)
        first = initial("T", 4, [A, B])
        assert s.update(first.to_wire()) and s.get("T").epoch == 1
        moved = plan_moves(first, {0: B})
        assert s.update(moved.to_wire()) and s.get("T").epoch == 2
        assert not s.update(first.to_wire()) and s.get("T").epoch == 2
        assert not s.update({"topic": "T", "epoch": 9}) and s.get("T").epoch == 2

    run(go())


def test_writes_take_the_owned_queues_in_turn_and_a_queue_owned_elsewhere_is_not_taken():
    s = StaticQueues(A, lambda t, q: 0)
    m = initial("T", 4, [A, B])  # A owns 0 and 2
    assert [s.write_target(m, None)[0] for _ in range(4)] == [0, 2, 0, 2]
    assert s.write_target(m, 2)[0] == 2 and s.write_target(m, 1) is None
    assert StaticQueues("broker-c", lambda t, q: 0).write_target(m, None) is None


def test_physical_offsets_translate_to_logical_ones_on_each_segment():
    async def go():
        a, b = StaticQueues(A, lambda t, q: 0), StaticQueues(B, lambda t, q: 0)
        m = decide(plan_moves(initial("T", 2, [A, B]), {0: B}), 0, 40)  # 0: A q0 (0-39), then B q1 from 40
        for s in (a, b):
            s.update(m.to_wire())
        assert a.logical("T", 0, 39) == (0, 39) and a.logical("T", 0, 40) == (0, 40)
        assert b.logical("T", 1, 0) == (0, 40) and b.logical("T", 1, 5) == (0, 45)
        assert b.logical("T", 0, 7) == (1, 7) and a.logical("T", 1, 0) is None
        assert a.logical("Other", 0, 0) is None

    run(go())


def test_a_seal_waits_for_the_sends_on_their_way_then_reports_the_end_and_only_on_the_master():
    async def go():
        ends = {("T", 0): 10}
        reports: list[dict] = []
        master = False

        async def report(payload: dict) -> None:
            reports.append(payload)

        s = StaticQueues(A, lambda t, q: ends[(t, q)], report=report, may_seal=lambda: master)
        m = initial("T", 2, [A, B])
        s.update(m.to_wire())
        moved = plan_moves(m, {0: B})
        s.update(moved.to_wire())  # not the master: nothing reported
        await asyncio.sleep(0.02)
        assert reports == []
        master = True
        s.writing[("T", 0)] += 1  # a send passed the check before the mapping changed
        s.seal_due()
        await asyncio.sleep(0.02)
        assert reports == []  # still on its way
        ends[("T", 0)] = 11
        s.writing[("T", 0)] -= 1
        await asyncio.sleep(0.02)
        assert reports == [{"topic": "T", "queueId": 0, "brokerName": A, "physicalQueueId": 0, "sealedEnd": 11}]
        s.update(decide(moved, 0, 11).to_wire())  # decided: nothing more to report
        await asyncio.sleep(0.02)
        assert len(reports) == 1
        await s.close()

    run(go())


def test_a_mapping_adopted_is_persisted_before_anything_acts_on_it_and_read_back_at_start(tmp_path):
    path = tmp_path / "config" / "staticTopics.json"

    async def go():
        s = StaticQueues(A, lambda t, q: 0, path)
        moved = plan_moves(initial("T", 2, [A, B]), {0: B})
        s.update(initial("T", 2, [A, B]).to_wire())
        s.update(moved.to_wire())
        s.update(initial("U", 1, [A]).to_wire())
        return moved

    moved = run(go())
    again = StaticQueues(A, lambda t, q: 0, path)  # a restarted broker
    assert again.get("T") == moved and again.get("U").epoch == 1
    assert again.write_target(again.get("T"), 0) is None  # queue 0 moved away: never written here again
