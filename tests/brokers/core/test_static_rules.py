"""Static topics' write and offset rules (brokers/core/static.py): where a message of a logical queue
is written, and which logical offset a physical one is."""

from __future__ import annotations

import itertools

import pytest

from brokers.core.static import live, logical_position, write_target
from mqrules.logical_queues import decide, initial, plan_moves

pytestmark = pytest.mark.unit

A, B = "broker-a", "broker-b"
TWO_SETS = initial("T", 4, [A, B])  # A owns 0 and 2, B 1 and 3
MOVING = plan_moves(initial("T", 2, [A, B]), {0: B})  # 0's new segment on B, start undecided
MOVED = decide(MOVING, 0, 40)  # 0: A q0 (0-39), then B q1 from 40


@pytest.mark.parametrize(
    "m, broker, lid, want",
    [
        pytest.param(TWO_SETS, A, None, [0, 2, 0, 2], id="owned-queues-in-turn"),
        pytest.param(TWO_SETS, A, 2, [2], id="a-groups-queue-owned-here"),
        pytest.param(TWO_SETS, A, 1, [None], id="a-groups-queue-owned-elsewhere"),
        pytest.param(TWO_SETS, "broker-c", None, [None], id="owns-nothing"),
        pytest.param(MOVING, B, 0, [0], id="the-new-owner-of-a-moving-queue"),
        pytest.param(MOVING, A, 0, [None], id="the-old-owner-takes-no-more"),
    ],
)
def test_a_message_is_written_where_its_logical_queue_is_writable(m, broker, lid, want):
    turns = itertools.count()
    got = [write_target(m, broker, lid, turns) for _ in want]
    assert [t[0] if t is not None else None for t in got] == want


@pytest.mark.parametrize(
    "m, broker, queue_id, offset, want",
    [
        pytest.param(MOVED, A, 0, 39, (0, 39), id="the-sealed-segment"),
        pytest.param(MOVED, B, 1, 0, (0, 40), id="the-new-segment-starts-at-the-seal"),
        pytest.param(MOVED, B, 1, 5, (0, 45), id="and-goes-on"),
        pytest.param(MOVED, B, 0, 7, (1, 7), id="another-logical-queue"),
        pytest.param(MOVING, B, 1, 0, None, id="undecided-start"),
        pytest.param(MOVED, A, 1, 0, None, id="no-segment-there"),
        pytest.param(None, A, 0, 0, None, id="not-a-static-topic"),
    ],
)
def test_a_physical_offset_is_its_segments_logical_one(m, broker, queue_id, offset, want):
    assert logical_position(m, broker, queue_id, offset) == want


@pytest.mark.parametrize("m, lid, count", [(TWO_SETS, 0, 1), (MOVED, 0, 2)], ids=["one-segment", "moved-two"])
def test_a_logical_queues_live_segments_oldest_first(m, lid, count):
    segments = live(m.queues[lid])
    assert len(segments) == count and segments[-1] is m.queues[lid].writable
