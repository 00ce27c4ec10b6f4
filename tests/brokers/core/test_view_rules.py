"""What an operator's view of a stored message says (brokers/core/views.py, docs/messages.md §3): its
type, delivery time and transaction state, a dead letter's origin, reason and attempts, the properties
of a pop consumer's retry and DLQ copies, and those of a resend from the DLQ."""

from __future__ import annotations

import pytest

from brokers.core.admission import MessageType
from brokers.core.views import (
    MAX_RECONSUME_EXCEEDED,
    dead_letter_facts,
    delivery_time_of,
    keys_of,
    message_type_of,
    moved_properties,
    origin_topic_of,
    resend_key,
    resend_message_type,
    resent_properties,
    transaction_state_of,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("props", "kind"),
    [
        pytest.param({}, "NORMAL", id="normal"),
        pytest.param({"TRAN_MSG": "true", "PGROUP": "p"}, "TRANSACTION", id="transaction"),
        pytest.param({"__SHARDINGKEY": "order-1"}, "FIFO", id="fifo"),
        pytest.param({"TIMER_DELIVER_MS": "1700000000000"}, "DELAY", id="timer"),
        pytest.param({"DELAY": "3"}, "DELAY", id="delay-level"),
        pytest.param({"DELAY": "0"}, "NORMAL", id="delay-level-zero"),
    ],
)
def test_message_type_of(props, kind):
    assert message_type_of(props) == kind


@pytest.mark.parametrize(
    ("props", "at"),
    [
        pytest.param({}, None, id="none"),
        pytest.param({"TIMER_DELIVER_MS": "1700000000000"}, 1700000000000, id="asked"),
        pytest.param({"TIMER_OUT_MS": "1700000000500"}, 1700000000500, id="due"),
        pytest.param({"TIMER_DELIVER_MS": "soon"}, None, id="garbled"),
    ],
)
def test_delivery_time_of(props, at):
    assert delivery_time_of(props) == at


@pytest.mark.parametrize(
    ("topic", "props", "state"),
    [
        pytest.param("Orders", {}, None, id="not-transactional"),
        pytest.param("Orders", {"TRAN_MSG": "true"}, "COMMIT", id="committed-in-its-topic"),
        pytest.param("RMQ_SYS_TRANS_HALF_TOPIC", {"TRAN_MSG": "true"}, "UNKNOWN", id="half"),
    ],
)
def test_transaction_state_of(topic, props, state):
    assert transaction_state_of(topic, props) == state


@pytest.mark.parametrize(
    ("props", "keys"),
    [
        pytest.param({}, [], id="none"),
        pytest.param({"KEYS": "a b  c"}, ["a", "b", "c"], id="space-separated"),
    ],
)
def test_keys_of(props, keys):
    assert keys_of(props) == keys


@pytest.mark.parametrize(
    ("props", "origin"),
    [
        pytest.param({}, None, id="none"),
        pytest.param({"ORIGIN_TOPIC": "A"}, "A", id="pop-copy"),
        pytest.param({"RETRY_TOPIC": "B", "ORIGIN_TOPIC": "A"}, "B", id="rocketmq-retry-topic-first"),
        pytest.param({"DLQ_ORIGIN_TOPIC": "C", "RETRY_TOPIC": "B"}, "C", id="dlq-origin-first"),
    ],
)
def test_origin_topic_of(props, origin):
    assert origin_topic_of(props) == origin


@pytest.mark.parametrize(
    ("props", "times", "facts"),
    [
        pytest.param(
            {"UNIQ_KEY": "U", "ORIGIN_TOPIC": "Orders", "RECONSUME_TIME": "3"},
            0,
            {"originTopic": "Orders", "originMsgId": "U", "reason": MAX_RECONSUME_EXCEEDED, "attempts": 3},
            id="pop-dead-letter",
        ),
        pytest.param(
            {"UNIQ_KEY": "U", "RETRY_TOPIC": "Orders", "ORIGIN_MESSAGE_ID": "O", "DLQ_REASON": "sent by the consumer"},
            4,
            {"originTopic": "Orders", "originMsgId": "O", "reason": "sent by the consumer", "attempts": 4},
            id="remoting-send-back",
        ),
        pytest.param(
            {}, 0, {"originTopic": None, "originMsgId": None, "reason": MAX_RECONSUME_EXCEEDED, "attempts": 0}, id="bare"
        ),
    ],
)
def test_dead_letter_facts(props, times, facts):
    assert dead_letter_facts(props, times) == facts


BASE = {"UNIQ_KEY": "U1", "TAGS": "t", "KEYS": "k1"}


@pytest.mark.parametrize(
    ("props", "topic", "attempt", "dead", "expected"),
    [
        pytest.param(
            BASE,
            "Orders",
            1,
            False,
            {**BASE, "RECONSUME_TIME": "1", "ORIGIN_TOPIC": "Orders", "RETRY_TOPIC": "Orders", "ORIGIN_MESSAGE_ID": "U1"},
            id="first-retry",
        ),
        pytest.param(
            {**BASE, "ORIGIN_TOPIC": "Orders", "RETRY_TOPIC": "Orders", "ORIGIN_MESSAGE_ID": "U1"},
            "%RETRY%g_Orders",
            3,
            True,
            {
                **BASE,
                "RECONSUME_TIME": "3",
                "ORIGIN_TOPIC": "Orders",
                "RETRY_TOPIC": "Orders",
                "ORIGIN_MESSAGE_ID": "U1",
                "DLQ_ORIGIN_TOPIC": "Orders",
                "DLQ_ORIGIN_MESSAGE_ID": "U1",
                "DLQ_REASON": MAX_RECONSUME_EXCEEDED,
            },
            id="dead-from-the-retry-topic",
        ),
    ],
)
def test_moved_properties(props, topic, attempt, dead, expected):
    assert moved_properties(props, topic, attempt, dead) == expected


@pytest.mark.parametrize(
    ("resend_id", "offset", "key"),
    [pytest.param("ab" * 16, 0, "ab" * 16 + ":0", id="first"), pytest.param("0" * 32, 123456, "0" * 32 + ":123456", id="far")],
)
def test_resend_key(resend_id, offset, key):
    assert resend_key(resend_id, offset) == key


DEAD = {
    "UNIQ_KEY": "U1",
    "TAGS": "t",
    "KEYS": "k1 k2",
    "user": "v",
    "RECONSUME_TIME": "3",
    "ORIGIN_TOPIC": "Orders",
    "RETRY_TOPIC": "Orders",
    "ORIGIN_MESSAGE_ID": "U0",
    "DLQ_ORIGIN_TOPIC": "Orders",
    "DLQ_ORIGIN_MESSAGE_ID": "U0",
    "DLQ_REASON": MAX_RECONSUME_EXCEEDED,
    "DELAY": "3",
}


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        pytest.param(
            DEAD,
            {"TAGS": "t", "user": "v", "UNIQ_KEY": "N", "ORIGIN_MESSAGE_ID": "U1", "RESEND_ID": "r", "KEYS": "k1 k2 r:7"},
            id="dead-letter",
        ),
        pytest.param({}, {"UNIQ_KEY": "N", "RESEND_ID": "r", "KEYS": "r:7"}, id="bare"),
    ],
)
def test_resent_properties(props, expected):
    assert resent_properties(props, "N", "r", 7) == expected


@pytest.mark.parametrize(
    ("topic_type", "kind"),
    [
        pytest.param("NORMAL", MessageType.NORMAL, id="normal"),
        pytest.param("MIXED", MessageType.NORMAL, id="mixed"),
        pytest.param("FIFO", MessageType.FIFO, id="fifo"),
        pytest.param("DELAY", MessageType.DELAY, id="delay-due-now"),
        pytest.param("TRANSACTION", None, id="transaction-refused"),
    ],
)
def test_resend_message_type(topic_type, kind):
    assert resend_message_type(topic_type) == kind
