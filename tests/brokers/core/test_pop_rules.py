"""The pop rules of brokers/core/pop.py that the receive path applies: which tags a filter takes,
which queues a receive pops (RocketMQ's proxy pops every queue for an official client), and how a pop
whose record was not stored is undone."""

from __future__ import annotations

import pytest

from brokers.core.pop import (
    InFlight,
    QueueState,
    dlq_topic,
    receive_order,
    retry_topic,
    tag_matcher,
    wire_nonce,
    wire_offset,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "expression, sql, tags, taken",
    [
        ("*", False, "a", True),
        ("", False, None, True),
        ("a || b", False, "b", True),
        (" a ||b ", False, "a", True),
        ("a || b", False, "c", False),
        ("a || b", False, None, False),
        ("a", False, "a || b", False),
    ],
    ids=["star", "empty", "one-of-two", "spaces", "other-tag", "no-tag", "tag-is-not-an-expression"],
)
def test_a_tag_filter_takes_the_tags_it_names(expression, sql, tags, taken):
    assert tag_matcher(expression, sql)(tags) is taken


def test_a_sql_filter_is_not_supported():
    assert tag_matcher("a > 1", True) is None


@pytest.mark.parametrize(
    "queue_id, readable, every_queue, want",
    [
        (2, 4, True, [2, 3, 0, 1]),
        (0, 4, True, [0, 1, 2, 3]),
        (2, 4, False, [2]),  # a tool (no language) reads the queue it names
        (7, 4, True, [7]),  # a queue the topic does not have: that one only (nothing there)
        (0, 0, True, [0]),  # an unknown topic
    ],
    ids=["named-first-then-the-rest", "from-zero", "tool", "beyond-the-topic", "no-queues"],
)
def test_a_receive_pops_the_named_queue_first_then_the_others(queue_id, readable, every_queue, want):
    assert receive_order(queue_id, readable, every_queue) == want


@pytest.mark.parametrize(
    "name, want",
    [
        pytest.param(lambda: retry_topic("g1", "Orders"), "%RETRY%g1_Orders", id="retry-topic-v1-naming"),
        pytest.param(lambda: dlq_topic("g1"), "%DLQ%g1", id="dlq-topic"),
    ],
)
def test_a_groups_retry_and_dead_letter_topics_are_named_as_rocketmq_names_them(name, want):
    assert name() == want


@pytest.mark.parametrize(
    "parse, value, ok",
    [
        pytest.param(wire_offset, 0, True, id="offset-zero"),
        pytest.param(wire_offset, 2**63 - 1, True, id="offset-largest"),
        pytest.param(wire_offset, 2**63, False, id="offset-too-large"),
        pytest.param(wire_offset, -1, False, id="offset-negative"),
        pytest.param(wire_offset, True, False, id="offset-a-bool-is-not-an-int"),
        pytest.param(wire_offset, "5", False, id="offset-a-string"),
        pytest.param(wire_offset, 5.0, False, id="offset-a-float"),
        pytest.param(wire_nonce, "n", True, id="nonce-one-char"),
        pytest.param(wire_nonce, "n" * 64, True, id="nonce-64-chars"),
        pytest.param(wire_nonce, "n" * 65, False, id="nonce-too-long"),
        pytest.param(wire_nonce, "", False, id="nonce-empty"),
        pytest.param(wire_nonce, 7, False, id="nonce-not-a-string"),
    ],
)
def test_offsets_and_nonces_read_from_the_wire_are_checked(parse, value, ok):
    if ok:
        assert parse(value) == value
    else:
        with pytest.raises(ValueError):
            parse(value)


def _queue(pop_offset, acked_below, in_flight=(), redeliver=None):
    return QueueState(pop_offset, acked_below, {o: InFlight(1, 1, f"n{o}") for o in in_flight}, set(), dict(redeliver or {}))


def _pop(q: QueueState, *offsets):  # as PopState.apply_pop does
    for o in offsets:
        q.redeliver.pop(o, None)
        q.in_flight[o] = InFlight(9, 2, "new")
        q.pop_offset = max(q.pop_offset, o + 1)


def _skip(q: QueueState, *offsets):  # as PopState.finish does for messages the filter skips
    for o in offsets:
        q.pop_offset = max(q.pop_offset, o + 1)
        q.finish(o)


@pytest.mark.parametrize(
    "start, touched, change, want",
    [
        (lambda: _queue(10, 10), [10, 11], lambda q: _pop(q, 10, 11), (10, 10, [], [], {})),
        # skipped offsets moved the committed offset: it goes back, nothing stays done
        (lambda: _queue(10, 10), [11, 10, 12], lambda q: (_pop(q, 11), _skip(q, 10, 12)), (10, 10, [], [], {})),
        # an ack of an older delivery meanwhile stays acked
        (lambda: _queue(10, 8, [8, 9]), [10], lambda q: (_pop(q, 10), q.finish(8)), (10, 9, [9], [], {})),
        (lambda: _queue(9, 8, [8]), [10, 9], lambda q: (_pop(q, 10), _skip(q, 9), q.finish(8)), (9, 9, [], [], {})),
        # an acting master's redelivery in place, and an orderly queue's delivery handed out again
        (lambda: _queue(10, 5, redeliver={5: 2}), [5], lambda q: _pop(q, 5), (10, 5, [], [], {5: 2})),
        (lambda: _queue(10, 5, [5]), [5], lambda q: _pop(q, 5), (10, 5, [5], [], {})),
    ],
    ids=["pop", "pop-and-skips", "older-ack-kept", "older-ack-over-a-skip", "redelivery", "again-in-place"],
)
def test_a_pop_whose_record_was_not_stored_is_undone_and_nothing_else(start, touched, change, want):
    q = start()
    before = {o: (f.deadline_ms, f.attempt, f.nonce) for o, f in q.in_flight.items()}
    mark = q.mark(touched)
    change(q)
    q.restore(mark)
    pop_offset, acked_below, in_flight, done, redeliver = want
    assert (q.pop_offset, q.acked_below, sorted(q.in_flight), sorted(q.done), q.redeliver) == (
        pop_offset,
        acked_below,
        in_flight,
        done,
        redeliver,
    )
    assert all((f.deadline_ms, f.attempt, f.nonce) == before[o] for o, f in q.in_flight.items())  # as they were
