"""A group's backlog on one queue (brokers/core/lag.py), as RocketMQ's ConsumerLagCalculator counts
it for rocketmq_consumer_lag_messages / _inflight_messages / _ready_messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.core.admission import MessageType, metrics_type
from brokers.core.lag import is_retry_topic, is_system, queue_backlog

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("max_offset", "min_offset", "committed", "pulled", "expected"),
    [
        pytest.param(10, 0, 10, 10, (0, 0, 0, 10, 10), id="caught up"),
        pytest.param(10, 0, 4, 4, (6, 0, 6, 4, 4), id="pull consumer behind: all of it ready"),
        pytest.param(10, 0, 4, 7, (6, 3, 3, 4, 7), id="pop consumer: 3 in flight, 3 never handed out"),
        pytest.param(10, 0, 4, 10, (6, 6, 0, 4, 10), id="everything handed out, nothing acked"),
        pytest.param(
            10, 6, 2, 2, (8, 0, 4, 6, 6), id="retention passed the commit: lag counts from the commit, ready from the min"
        ),
        pytest.param(10, 0, 12, 12, (0, 0, 0, 12, 12), id="commit beyond the end (a cut log): no negative figures"),
        pytest.param(0, 0, 0, 0, (0, 0, 0, 0, 0), id="empty queue"),
    ],
)
def test_queue_backlog(max_offset, min_offset, committed, pulled, expected):
    assert queue_backlog(max_offset, min_offset, committed, pulled) == expected


@given(
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
def test_backlog_figures_are_never_negative_and_ready_plus_in_flight_never_exceed_what_is_kept(mx, mn, committed, pulled):
    mn = min(mn, mx)
    lag, in_flight, ready, consumed, handed_out = queue_backlog(mx, mn, committed, pulled)
    assert min(lag, in_flight, ready) >= 0
    assert in_flight + ready <= max(0, mx - max(committed, mn))
    assert lag == max(0, mx - committed)  # the REST API's lag (mqadmin's diff)
    assert consumed <= handed_out


@pytest.mark.parametrize(
    ("topic", "group", "retry", "system"),
    [
        ("Orders", "G", False, False),
        ("%RETRY%G", "G", True, False),
        ("rmq_sys_wheel", "G", False, True),
        ("Orders", "CID_RMQ_SYS_TRANS", False, True),
    ],
)
def test_retry_and_system_labels(topic, group, retry, system):
    assert (is_retry_topic(topic), is_system(topic, group)) == (retry, system)


@pytest.mark.parametrize(
    ("message_type", "label"),
    [
        (MessageType.NORMAL, "normal"),
        (MessageType.FIFO, "fifo"),
        (MessageType.DELAY, "delay"),
        (MessageType.TRANSACTION, "transaction"),
        (MessageType.MESSAGE_TYPE_UNSPECIFIED, "normal"),  # a remoting send names no type
        (99, "normal"),
    ],
)
def test_the_message_type_label_of_rocketmq_messages_in_total(message_type, label):
    assert metrics_type(message_type) == label
