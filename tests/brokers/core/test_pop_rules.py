"""The pop rules of brokers/core/pop.py that the receive path applies: which tags a filter takes,
and which queues a receive pops (RocketMQ's proxy pops every queue for an official client)."""

from __future__ import annotations

import pytest

from brokers.core.pop import receive_order, tag_matcher

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
