"""Logical queues (mqrules/logical_queues.py), table-tested with the seed's own tables
(seed 003): a move seals the old segment and appends a new one, the new one starts where the old one
ends, reads cross segment edges, expired segments are never read and their physical queue is reused,
drain and scale-out plans, and the invariant checker refusing broken chains. A property test runs
random operation sequences through the same checker."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqrules.codes import ResponseCode as C
from mqrules.logical_queues import (
    LogicalQueue,
    MappingRefused,
    Segment,
    SegmentState,
    TopicMapping,
    adopt,
    decide,
    drain,
    ensure_epoch,
    expire,
    grow,
    initial,
    logical_offset,
    min_logical_offset,
    physical_queue_counts,
    plan_moves,
    preview,
    problems,
    read_position,
    scale_out,
)

pytestmark = pytest.mark.unit

B1, B2, B3 = "broker1", "broker2", "broker3"


def four_on_two() -> TopicMapping:
    """The seed's first table: logical 0, 1 on broker1 queues 0, 1; logical 2, 3 on broker2 queues 0, 1."""
    segs = [Segment(B1, 0, 0), Segment(B1, 1, 0), Segment(B2, 0, 0), Segment(B2, 1, 0)]
    return TopicMapping("T", 1, tuple(LogicalQueue(i, (s,)) for i, s in enumerate(segs)))


def moved(m: TopicMapping, lid: int, target: str, sealed_end: int) -> TopicMapping:
    return decide(plan_moves(m, {lid: target}), lid, sealed_end)


def test_a_new_static_topic_spreads_its_queues_round_robin():
    m = initial("T", 5, [B1, B2])
    assert m.owners() == {0: (B1, 0), 1: (B2, 0), 2: (B1, 1), 3: (B2, 1), 4: (B1, 2)}
    assert m.epoch == 1 and problems(m) == []


@pytest.mark.parametrize("count, brokers", [(0, [B1]), (4, []), (4, [B1, B1])])
def test_a_new_static_topic_needs_queues_and_distinct_brokers(count, brokers):
    with pytest.raises(MappingRefused) as refused:
        initial("T", count, brokers)
    assert refused.value.code == C.INVALID_PARAMETER


def test_seed_move_logical_0_to_broker2_keeps_the_old_segment_read_only():
    m = four_on_two()
    planned = plan_moves(m, {0: B2})
    q = planned.queues[0]
    assert planned.epoch == 2 and problems(planned) == []
    assert [q.state(i) for i in range(2)] == [SegmentState.SEALING, SegmentState.WRITABLE]
    assert q.writable == Segment(B2, 2, None, 0)  # the seed's broker2 queue 2, logical start undecided
    assert planned.owners()[0] == (B2, 2)  # writes go to the new group at once
    done = decide(planned, 0, 101)  # broker1 sealed queue 0 after 101 messages: 0(0-100)
    q = done.queues[0]
    assert done.epoch == 3 and problems(done) == []
    assert [q.state(i) for i in range(2)] == [SegmentState.READ_ONLY, SegmentState.WRITABLE]
    assert q.segments[0].logic_end == 101 and q.writable.logic_start == 101  # 0(101-)


def test_seed_migrate_back_after_expiry_reuses_the_expired_queue():
    m = moved(four_on_two(), 0, B2, 101)
    m = expire(m, B1, {0: 101})  # broker1 cleaned queue 0's data
    assert m.queues[0].state(0) is SegmentState.EXPIRED
    m = decide(plan_moves(m, {0: B1}), 0, 100)  # broker2 queue 2 held 0(101-200)
    q = m.queues[0]
    assert (q.writable.broker_name, q.writable.queue_id) == (B1, 0)  # reused: the seed's 0(201-)
    assert q.writable.phys_start == 101 and q.writable.logic_start == 201
    assert [s.queue_id for s in q.segments] == [2, 0]  # the expired record gave way to its reuse
    assert problems(m) == []


def test_seed_migrate_back_before_expiry_creates_a_new_queue():
    m = moved(four_on_two(), 0, B2, 101)
    m = decide(plan_moves(m, {0: B1}), 0, 100)
    q = m.queues[0]
    assert [(s.broker_name, s.queue_id) for s in q.segments] == [(B1, 0), (B2, 2), (B1, 2)]  # the seed's broker1 queue 2
    assert [q.state(i) for i in range(3)] == [SegmentState.READ_ONLY, SegmentState.READ_ONLY, SegmentState.WRITABLE]
    assert q.writable.logic_start == 201 and problems(m) == []


def test_seed_drain_broker2_moves_all_its_queues_to_broker1():
    m = four_on_two()
    moves = drain(m, B2, [B1])
    assert moves == {2: B1, 3: B1}
    m = plan_moves(m, moves)
    assert m.owners() == {0: (B1, 0), 1: (B1, 1), 2: (B1, 2), 3: (B1, 3)}  # the seed's 2(101-), 3(101-)
    m = decide(decide(m, 2, 101), 3, 101)
    m = expire(m, B2, {0: 101, 1: 101})
    assert B2 not in m.brokers()  # nothing left to read there: it can be removed


def test_drain_spreads_over_the_targets_writing_the_fewest():
    m = initial("T", 8, [B1, B2])
    assert drain(m, B1, [B2, B3]) == {0: B3, 2: B3, 4: B3, 6: B3}  # broker2 writes 4 already: 4 and 4
    assert drain(m, B1, [B3, "broker4"]) == {0: B3, 2: "broker4", 4: B3, 6: "broker4"}


def test_seed_scale_out_gives_the_new_broker_its_share():
    m = four_on_two()
    moves = scale_out(m, B3)
    assert moves == {3: B3}  # 4 queues // 3 broker sets = 1, from the busiest (ties: highest name)
    m8 = initial("T", 8, [B1, B2])
    assert sorted(scale_out(m8, B3)) == [6, 7]  # 8 // 3 = 2, one from each


@pytest.mark.parametrize(
    "moves, code, why",
    [
        ({}, C.INVALID_PARAMETER, "no logical queue"),
        ({4: B3}, C.INVALID_PARAMETER, r"0-3; no \[4\]"),
        ({-1: B3}, C.INVALID_PARAMETER, r"no \[-1\]"),
        ({0: B1}, C.INVALID_PARAMETER, "already on broker1"),
    ],
)
def test_a_bad_move_is_refused(moves, code, why):
    with pytest.raises(MappingRefused, match=why) as refused:
        plan_moves(four_on_two(), moves)
    assert refused.value.code == code


def test_a_queue_still_moving_cannot_move_again():
    planned = plan_moves(four_on_two(), {0: B2})
    with pytest.raises(MappingRefused) as refused:
        plan_moves(planned, {0: B3})
    assert refused.value.code == C.LOGIC_QUEUE_MIGRATING
    with pytest.raises(MappingRefused, match="not moving"):
        decide(four_on_two(), 0, 5)
    with pytest.raises(MappingRefused, match="before the segment's start"):
        decide(planned, 0, -1)


def test_a_change_planned_against_an_older_epoch_is_fenced():
    m = plan_moves(four_on_two(), {0: B2})
    ensure_epoch(m, 2)
    with pytest.raises(MappingRefused) as refused:
        ensure_epoch(m, 1)
    assert refused.value.code == C.LOGIC_QUEUE_MAPPING_FENCED_EPOCH and "epoch 2, not 1" in refused.value.detail


# --- offsets at segment edges --------------------------------------------------------------------

# logical 0: broker1 q0 physical 0-100 (logical 0-99), broker2 q2 physical 0-50 (100-149), broker3 q0 from 7 (150-)
CHAIN = LogicalQueue(0, (Segment(B1, 0, 0, 0, 100), Segment(B2, 2, 100, 0, 50), Segment(B3, 0, 150, 7)))


@pytest.mark.parametrize(
    "logic, where",
    [
        (0, (B1, 0, 0)),
        (99, (B1, 0, 99)),  # the old segment's last message
        (100, (B2, 2, 0)),  # its end is the next segment's first
        (149, (B2, 2, 49)),
        (150, (B3, 0, 7)),  # the writable segment starts at physical 7 (a reused queue)
        (10_000, (B3, 0, 9_857)),  # beyond what is written: the reader waits there
    ],
)
def test_a_logical_offset_reads_from_the_segment_that_holds_it(logic, where):
    pos = read_position(CHAIN, logic)
    assert pos is not None and (pos.segment.broker_name, pos.segment.queue_id, pos.phys_offset) == where
    assert pos.logic_offset == logic


@pytest.mark.parametrize(
    "broker, qid, phys, logic",
    [(B1, 0, 0, 0), (B1, 0, 100, 100), (B2, 2, 0, 100), (B2, 2, 49, 149), (B3, 0, 7, 150), (B3, 0, 6, None), (B1, 1, 0, None)],
)
def test_a_physical_offset_has_one_logical_offset(broker, qid, phys, logic):
    assert logical_offset(CHAIN, broker, qid, phys) == logic


def test_an_expired_segment_is_never_read():
    q = LogicalQueue(0, (Segment(B1, 0, 0, 0, 100, expired=True), *CHAIN.segments[1:]))
    pos = read_position(q, 5)  # a consumer behind the expired data moves up to what is still held
    assert pos is not None and (pos.segment.broker_name, pos.phys_offset, pos.logic_offset) == (B2, 0, 100)
    assert logical_offset(q, B1, 0, 5) is None and min_logical_offset(q) == 100


def test_a_moving_queue_reads_its_sealing_segment_until_the_new_start_is_decided():
    q = plan_moves(four_on_two(), {0: B2}).queues[0]
    pos = read_position(q, 500)
    assert pos is not None and (pos.segment.broker_name, pos.phys_offset) == (B1, 500)
    assert logical_offset(q, B2, 2, 0) is None  # sends there have no logical offset yet


def test_a_wire_round_trip_keeps_the_mapping():
    m = plan_moves(moved(four_on_two(), 0, B2, 101), {1: B3})
    assert TopicMapping.from_wire(m.to_wire()) == m


def test_preview_names_each_queue_that_moves():
    m = moved(four_on_two(), 0, B2, 101)
    m = expire(m, B1, {0: 101})
    after = plan_moves(m, {0: B1, 3: B3})
    assert [(p.queue_id, p.from_broker, p.from_queue, p.to_broker, p.to_queue, p.reused) for p in preview(m, after)] == [
        (0, B2, 2, B1, 0, True),
        (3, B2, 1, B3, 0, False),
    ]


# --- the invariant checker -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "segments, problem",
    [
        ((Segment(B1, 0, 0, 0, 10),), "no writable segment"),
        ((Segment(B1, 0, 0), Segment(B2, 0, 0)), "second writable segment"),  # two open, neither sealing-then-undecided
        ((Segment(B1, 0, 0, 0, 10), Segment(B2, 0, 5)), "overlap or gap"),
        ((Segment(B1, 0, 0, 0, 10), Segment(B2, 0, 12)), "overlap or gap"),
        ((Segment(B1, 0, 0, 10, 5), Segment(B2, 0, 0)), "ends before it starts"),
        ((Segment(B1, 0, 0, 0, 10), Segment(B2, 0, None)), "undecided logical start"),
        ((Segment(B1, 0, 0, 0, 10), Segment(B2, 0, 10, 0, 20), Segment(B1, 1, 30, 0, None)), None),
        ((Segment(B1, 0, 0, 0, 10), Segment(B2, 0, 10, 0, 20, expired=True), Segment(B1, 1, 30)), "expired before an older"),
        ((Segment(B1, 0, 0, 0, 10, expired=True), Segment(B2, 0, 10, expired=True)), "expired while it may"),
        ((Segment(B1, 0, 0, 0, 10), Segment(B1, 0, 10, 10)), "already backs"),
        ((Segment(B1, 0, -1),), "negative"),
    ],
)
def test_the_checker_refuses_broken_chains(segments, problem):
    found = problems(TopicMapping("T", 1, (LogicalQueue(0, segments),)))
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found


def test_the_checker_refuses_one_physical_queue_behind_two_logical_queues():
    m = TopicMapping("T", 1, (LogicalQueue(0, (Segment(B1, 0, 0),)), LogicalQueue(1, (Segment(B1, 0, 0),))))
    assert any("already backs logical queue 0" in p for p in problems(m))


operations = st.lists(
    st.tuples(
        st.sampled_from(["move", "decide", "expire"]), st.integers(0, 5), st.sampled_from([B1, B2, B3]), st.integers(0, 50)
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_any_sequence_of_changes_keeps_every_invariant(ops):
    m = initial("T", 6, [B1, B2])
    ends: dict[tuple[str, int], int] = {}  # each physical queue's written end, as its broker would seal it
    for op, lid, broker, n in ops:
        before = m
        try:
            if op == "move":
                m = plan_moves(m, {lid: broker})
            elif op == "decide":
                old = m.queues[lid].sealing
                key = (old.broker_name, old.queue_id) if old else None
                m = decide(m, lid, ends.setdefault(key, (old.phys_start if old else 0) + n) if key else n)
            else:
                m = expire(m, broker, {qid: n * 10 for qid in range(8)})
        except MappingRefused:
            assert m == before  # a refusal changes nothing
            continue
        assert problems(m) == [], (op, lid, broker, n)
        assert m.epoch >= before.epoch
        for q in m.queues:  # every logical offset up to the decided ends reads from exactly one place
            pos = read_position(q, min_logical_offset(q))
            assert pos is None or not pos.segment.expired


def test_what_a_broker_asks_of_a_mapping_owners_segments_and_queue_counts():
    m = moved(four_on_two(), 0, B2, 101)  # logical 0: broker1 q0 (0-100), then broker2 q2 from 101
    assert m.owned_by(B1) == [1] and m.owned_by(B2) == [0, 2, 3] and m.owned_by(B3) == []
    lid, seg = m.segment_at(B2, 2)
    assert (lid, seg.logic_start, seg.phys_start) == (0, 101, 0)
    lid, seg = m.segment_at(B1, 0)  # the read-only segment is still found: its offsets still translate
    assert (lid, seg.phys_end) == (0, 101)
    assert m.segment_at(B3, 0) is None and m.segment_at(B1, 5) is None
    assert physical_queue_counts(m) == {B1: 2, B2: 3}
    gone = expire(m, B1, {0: 101})
    assert gone.segment_at(B1, 0) is None  # expired: nothing there translates any more
    assert physical_queue_counts(gone) == {B1: 2, B2: 3}  # never shrinks


@given(st.integers(1, 12), st.integers(1, 12), st.lists(st.sampled_from([B1, B2, B3]), min_size=1, max_size=3, unique=True))
@settings(max_examples=60, deadline=None)
def test_growing_keeps_every_queue_adds_the_new_ones_balanced_and_breaks_no_invariant(n, more, targets):
    m = initial("T", n, [B1, B2])
    grown = grow(m, n + more, targets)
    assert grown.queues[:n] == m.queues and len(grown.queues) == n + more and grown.epoch == m.epoch + 1
    assert problems(grown) == []
    new_owners = [grown.queues[i].writable.broker_name for i in range(n, n + more)]
    assert set(new_owners) <= set(targets)

    def spread(mapping: TopicMapping) -> int:  # among the targets: most written minus fewest
        load = [len(mapping.owned_by(b)) for b in targets]
        return max(load) - min(load)

    assert spread(grown) <= max(1, spread(m))  # each new queue went to the least loaded target


def test_growing_never_shrinks_and_reuses_an_expired_physical_queue():
    m = initial("T", 2, [B1, B2])
    with pytest.raises(MappingRefused, match="never goes down"):
        grow(m, 1, [B1])
    with pytest.raises(MappingRefused, match="already"):
        grow(m, 2, [B1])
    moved = decide(plan_moves(m, {0: B2}), 0, 50)  # B1's queue 0 read-only, ending at 50
    expired = expire(moved, B1, {0: 50})
    grown = grow(expired, 3, [B1])
    assert grown.queues[2].segments == (Segment(B1, 0, 0, 50),)  # continues at the expired queue's end


def test_adopting_a_plain_topic_keeps_every_offset():
    m = adopt("Plain", {B2: 1, B1: 2})
    assert [(q.writable.broker_name, q.writable.queue_id) for q in m.queues] == [(B1, 0), (B1, 1), (B2, 0)]
    assert all(q.segments == (Segment(q.writable.broker_name, q.writable.queue_id, 0),) for q in m.queues)
    assert problems(m) == [] and m.epoch == 1
    assert logical_offset(m.queues[1], B1, 1, 1234) == 1234
    with pytest.raises(MappingRefused):
        adopt("Empty", {})
