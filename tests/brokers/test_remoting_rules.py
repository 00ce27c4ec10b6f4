"""The broker remoting edge's own rules, table-tested: a message's type from its properties, a batch
body, a TAG expression's hashes, heartbeat fields as both real clients write them, and the queue locks
(brokers/remoting/). The edge over real sockets: tests/e2e/test_remoting_broker.py."""

from __future__ import annotations

import struct

import pytest

from brokers.core.admission import MessageType
from brokers.core.codes import Code
from brokers.remoting.clients import CONSUME_FROM, CONSUME_TYPES, BadHeartbeat, enum_name, parse_subscriptions
from brokers.remoting.consumer import tag_codes
from brokers.remoting.locks import REBALANCE_LOCK_MAX_LIVE_S, BadLockRequest, RebalanceLocks, parse_mq_set
from brokers.remoting.sending import BadBatch, decode_batch, message_type, refusal_code
from brokers.store.consumequeue import tags_code
from mqrules.remoting.codes import ResponseCode
from mqrules.remoting.properties import encode_properties

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "props, want",
    [
        pytest.param({}, (MessageType.NORMAL, "", None), id="plain"),
        pytest.param({"TRAN_MSG": "true"}, (MessageType.TRANSACTION, "", None), id="transactional"),
        pytest.param({"TRAN_MSG": "false"}, (MessageType.NORMAL, "", None), id="tran-msg-false"),
        pytest.param({"DELAY": "3"}, (MessageType.DELAY, "", None), id="delay-level"),
        pytest.param({"TIMER_DELIVER_MS": "1700000000000"}, (MessageType.DELAY, "", 1700000000000), id="delivery-time"),
        pytest.param({"TIMER_DELIVER_MS": "soon"}, (MessageType.DELAY, "", -1), id="delivery-time-not-a-number"),
        pytest.param({"__SHARDINGKEY": "order-1"}, (MessageType.FIFO, "order-1", None), id="fifo-group"),
    ],
)
def test_a_messages_type_comes_from_its_properties(props, want):
    assert message_type(props) == want


def test_a_relative_timer_is_a_delivery_time_from_now():
    kind, _, at = message_type({"TIMER_DELAY_SEC": "10"})
    assert kind is MessageType.DELAY and at is not None and at > 1_600_000_000_000


def batch_entry(body: bytes, props: dict[str, str], flag: int = 0) -> bytes:
    raw = encode_properties(props).encode()
    size = 20 + len(body) + 2 + len(raw)
    return struct.pack(">iiiii", size, 0, 0, flag, len(body)) + body + struct.pack(">h", len(raw)) + raw


def test_a_batch_body_holds_each_messages_body_flag_and_properties():
    body = batch_entry(b"one", {"UNIQ_KEY": "A"}, 7) + batch_entry(b"", {}) + batch_entry(b"three", {"TAGS": "t"})
    assert decode_batch(body) == [(b"one", 7, {"UNIQ_KEY": "A"}), (b"", 0, {}), (b"three", 0, {"TAGS": "t"})]


@pytest.mark.parametrize(
    "body, problem",
    [
        pytest.param(b"", "no message", id="empty"),
        pytest.param(batch_entry(b"x", {})[:-1], "do not add up", id="cut-short"),
        pytest.param(b"\x00\x00\x00\x05abc", "cut short", id="a-head-cut-short"),
        pytest.param(struct.pack(">iiiii", 30, 0, 0, 0, 99) + b"x" * 10, "do not add up", id="body-beyond-the-entry"),
    ],
)
def test_a_bad_batch_is_refused_naming_where(body, problem):
    with pytest.raises(BadBatch, match=problem):
        decode_batch(body)


@pytest.mark.parametrize(
    "code, want",
    [
        (Code.TOPIC_NOT_FOUND, ResponseCode.TOPIC_NOT_EXIST),
        (Code.FORBIDDEN, ResponseCode.NO_PERMISSION),
        (Code.INTERNAL_SERVER_ERROR, ResponseCode.SYSTEM_ERROR),
        (Code.MESSAGE_BODY_EMPTY, ResponseCode.MESSAGE_ILLEGAL),
        (Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, ResponseCode.MESSAGE_ILLEGAL),
    ],
)
def test_a_core_refusal_has_the_remoting_code_javas_broker_answers(code, want):
    assert refusal_code(code) == want


@pytest.mark.parametrize(
    "expression, want",
    [
        ("*", None),
        ("", None),
        ("  * ", None),
        ("TagA", {tags_code("TagA")}),
        ("TagA || TagB", {tags_code("TagA"), tags_code("TagB")}),
        ("TagA||", {tags_code("TagA")}),
    ],
)
def test_a_tag_expression_is_the_hashes_the_consume_queue_keeps(expression, want):
    assert tag_codes(expression) == (None if want is None else frozenset(want))


@pytest.mark.parametrize(
    "value, names, want",
    [
        (1, CONSUME_TYPES, "CONSUME_PASSIVELY"),  # the C++ client: ordinals
        ("CONSUME_ACTIVELY", CONSUME_TYPES, "CONSUME_ACTIVELY"),  # Java, ali-ons: names
        (4, CONSUME_FROM, "CONSUME_FROM_FIRST_OFFSET"),
        (99, CONSUME_FROM, "default"),
        (True, CONSUME_TYPES, "default"),
        (None, CONSUME_TYPES, "default"),
    ],
)
def test_heartbeat_enums_are_read_by_ordinal_or_name(value, names, want):
    assert enum_name(value, names, "default") == want


def test_subscriptions_as_the_cpp_client_and_ali_ons_write_them():
    cpp = parse_subscriptions([{"subString": "TagA || TagB", "subVersion": "1795880064736", "topic": "T", "codeSet": [0, 0]}])
    node = parse_subscriptions([{"topic": "T", "subString": "*", "subVersion": 17, "expressionType": "TAG"}])
    assert (cpp["T"].expression, cpp["T"].version, cpp["T"].expression_type) == ("TagA || TagB", 1795880064736, "TAG")
    assert (node["T"].expression, node["T"].version) == ("*", 17)
    assert parse_subscriptions(None) == {}
    assert (
        node["T"].matcher()("anything")
        and parse_subscriptions([{"topic": "T", "expressionType": "SQL92"}])["T"].matcher() is None
    )
    with pytest.raises(BadHeartbeat):
        parse_subscriptions([{"subString": "*"}])  # no topic
    with pytest.raises(BadHeartbeat):
        parse_subscriptions({"topic": "T"})


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


MQS = [("T", "broker-a", 0), ("T", "broker-a", 1)]


def test_a_queue_lock_is_one_clients_until_it_lapses():
    clock = Clock()
    locks = RebalanceLocks(clock)
    assert locks.try_lock("g", "c1", MQS) == MQS
    assert locks.try_lock("g", "c2", MQS) == []
    assert locks.try_lock("other-group", "c2", MQS) == MQS  # locks are per group
    clock.now += REBALANCE_LOCK_MAX_LIVE_S - 1
    assert locks.try_lock("g", "c1", MQS[:1]) == MQS[:1]  # renewed
    clock.now += 2
    assert locks.try_lock("g", "c2", MQS) == [MQS[1]]  # the one not renewed lapsed
    assert (locks.holder("g", MQS[0]), locks.holder("g", MQS[1])) == ("c1", "c2")


def test_an_unlock_frees_only_the_holders_own_locks():
    locks = RebalanceLocks(Clock())
    locks.try_lock("g", "c1", MQS)
    locks.unlock("g", "c2", MQS)
    assert locks.holder("g", MQS[0]) == "c1"
    locks.unlock("g", "c1", MQS[:1])
    assert locks.holder("g", MQS[0]) is None and locks.try_lock("g", "c2", MQS) == [MQS[0]]


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"topic": "T"}, id="not-a-list"),
        pytest.param([["T", "b", 0]], id="not-an-object"),
        pytest.param([{"topic": "T", "brokerName": "b", "queueId": "0"}], id="queue-id-as-text"),
        pytest.param([{"topic": "T", "brokerName": "b", "queueId": True}], id="queue-id-a-boolean"),
        pytest.param([{"topic": "T", "queueId": 0}], id="no-broker-name"),
    ],
)
def test_a_malformed_mq_set_is_refused(raw):
    with pytest.raises(BadLockRequest):
        parse_mq_set(raw)
