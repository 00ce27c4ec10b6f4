"""The custom-header tables (mqrules/remoting/headers.py): the required fields as the Java classes mark
them (@CFNotNull), typed parsing that names every bad field at once, and V2's one-letter names read as
SendMessageRequestHeader's."""

from __future__ import annotations

import pytest

from mqrules.remoting import headers as h
from mqrules.remoting.codes import RequestCode
from mqrules.remoting.headers import HeaderFieldError, encode_header, parse_header

pytestmark = pytest.mark.unit

INHERITED = {"ns", "nsd", "bname", "oway", "lo"}

# (table, its @CFNotNull fields, its other fields of its own), transcribed from
# remoting/src/main/java/org/apache/rocketmq/remoting/protocol/header/*.java
REQUIRED = [
    (h.GET_ROUTE_INFO_REQUEST, {"topic"}, {"acceptStandardJsonOnly"}),
    (h.GET_KV_CONFIG_REQUEST, {"namespace", "key"}, set()),
    (h.GET_KV_CONFIG_RESPONSE, set(), {"value"}),
    (
        h.SEND_MESSAGE_REQUEST,
        {"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp", "flag"},
        {"properties", "reconsumeTimes", "unitMode", "batch", "maxReconsumeTimes"},
    ),
    (h.SEND_MESSAGE_REQUEST_V2, set("abcdefgh"), set("ijklmn")),
    (h.SEND_MESSAGE_RESPONSE, {"msgId", "queueId", "queueOffset"}, {"transactionId", "batchUniqId", "recallHandle"}),
    (
        h.PULL_MESSAGE_REQUEST,
        {
            "consumerGroup",
            "topic",
            "queueId",
            "queueOffset",
            "maxMsgNums",
            "sysFlag",
            "commitOffset",
            "suspendTimeoutMillis",
            "subVersion",
        },
        {"subscription", "expressionType", "maxMsgBytes", "requestSource", "proxyFrowardClientId"},
    ),
    (
        h.PULL_MESSAGE_RESPONSE,
        {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"},
        {"offsetDelta", "topicSysFlag", "groupSysFlag", "forbiddenType"},
    ),
    (h.QUERY_CONSUMER_OFFSET_REQUEST, {"consumerGroup", "topic", "queueId"}, {"setZeroIfNotFound"}),
    (h.QUERY_CONSUMER_OFFSET_RESPONSE, {"offset"}, set()),
    (h.UPDATE_CONSUMER_OFFSET_REQUEST, {"consumerGroup", "topic", "queueId", "commitOffset"}, set()),
    (h.SEARCH_OFFSET_REQUEST, {"topic", "queueId", "timestamp"}, {"boundaryType"}),
    (h.SEARCH_OFFSET_RESPONSE, {"offset"}, set()),
    (h.GET_MAX_OFFSET_REQUEST, {"topic", "queueId"}, {"committed"}),
    (h.GET_MAX_OFFSET_RESPONSE, {"offset"}, set()),
    (h.GET_MIN_OFFSET_REQUEST, {"topic", "queueId"}, set()),
    (h.GET_MIN_OFFSET_RESPONSE, {"offset"}, set()),
    (h.GET_EARLIEST_MSG_STORETIME_REQUEST, {"topic", "queueId"}, set()),
    (h.GET_EARLIEST_MSG_STORETIME_RESPONSE, {"timestamp"}, set()),
    (h.QUERY_MESSAGE_REQUEST, {"topic", "key", "maxNum", "beginTimestamp", "endTimestamp"}, set()),
    (h.QUERY_MESSAGE_RESPONSE, {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}, set()),
    (h.VIEW_MESSAGE_REQUEST, {"offset"}, {"topic"}),
    (h.HEARTBEAT_REQUEST, set(), set()),
    (h.UNREGISTER_CLIENT_REQUEST, {"clientID"}, {"producerGroup", "consumerGroup"}),
    (h.GET_CONSUMER_LIST_BY_GROUP_REQUEST, {"consumerGroup"}, set()),
    (h.NOTIFY_CONSUMER_IDS_CHANGED_REQUEST, {"consumerGroup"}, set()),
    (h.LOCK_BATCH_MQ_REQUEST, set(), set()),
    (h.UNLOCK_BATCH_MQ_REQUEST, set(), set()),
    (
        h.CONSUMER_SEND_MSG_BACK_REQUEST,
        {"offset", "group", "delayLevel"},
        {"originMsgId", "originTopic", "unitMode", "maxReconsumeTimes"},
    ),
    (
        h.END_TRANSACTION_REQUEST,
        {"producerGroup", "tranStateTableOffset", "commitLogOffset", "commitOrRollback", "msgId"},
        {"topic", "fromTransactionCheck", "transactionId"},
    ),
    (
        h.CHECK_TRANSACTION_STATE_REQUEST,
        {"tranStateTableOffset", "commitLogOffset"},
        {"topic", "msgId", "transactionId", "offsetMsgId"},
    ),
    (h.GET_ALL_TOPIC_CONFIG_REQUEST, {"topicSeq"}, {"dataVersion", "maxTopicNum"}),
    (h.GET_ALL_TOPIC_CONFIG_RESPONSE, {"totalTopicNum"}, set()),
    (h.GET_ALL_SUBSCRIPTION_GROUP_REQUEST, {"groupSeq"}, {"dataVersion", "maxGroupNum"}),
    (h.GET_ALL_SUBSCRIPTION_GROUP_RESPONSE, {"totalGroupNum"}, set()),
    (h.GET_TOPIC_STATS_INFO_REQUEST, {"topic"}, set()),
    (h.GET_CONSUME_STATS_REQUEST, {"consumerGroup"}, {"topic", "topicList"}),
    (h.GET_CONSUMER_CONNECTION_LIST_REQUEST, {"consumerGroup"}, set()),
    (h.EXCHANGE_HA_INFO_REQUEST, set(), {"masterHaAddress", "masterFlushOffset", "masterAddress"}),
    (h.EXCHANGE_HA_INFO_RESPONSE, set(), {"masterHaAddress", "masterFlushOffset", "masterAddress"}),
    (h.GET_METADATA_RESPONSE, set(), {"group", "controllerLeaderId", "controllerLeaderAddress", "isLeader", "peers"}),
]
ALL_TABLES = {id(t): t for t in (*h.REQUEST_HEADERS.values(), *h.RESPONSE_HEADERS.values())}


@pytest.mark.parametrize("table, required, optional", REQUIRED, ids=[t.name for t, _, _ in REQUIRED])
def test_a_tables_fields_are_the_java_classes(table, required, optional):
    own = {f.name for f in table.fields} - (INHERITED if table is not h.SEND_MESSAGE_REQUEST_V2 else set())
    assert {f.name for f in table.fields if f.required} == required
    assert own == required | optional
    assert len({f.name for f in table.fields}) == len(table.fields)


def test_every_table_a_code_names_is_transcribed_above():
    assert set(ALL_TABLES) <= {id(t) for t, _, _ in REQUIRED}


SEND_V1 = {
    "producerGroup": "pg",
    "topic": "T",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "2",
    "sysFlag": "0",
    "bornTimestamp": "1700000000000",
    "flag": "0",
    "properties": "KEYS\x01k\x02",
    "reconsumeTimes": "1",
    "maxReconsumeTimes": "16",
    "bname": "broker-a",
}


def test_a_send_header_parses_typed_with_javas_defaults():
    values = parse_header(h.SEND_MESSAGE_REQUEST, SEND_V1)
    assert values["queueId"] == 2 and values["bornTimestamp"] == 1700000000000 and values["topic"] == "T"
    assert values["unitMode"] is False and values["batch"] is False  # absent: the getters' false
    assert values["bname"] == "broker-a" and values["lo"] is None


def test_v2s_letters_read_as_v1s_names():
    letters = dict(zip("abcdefghijln", [SEND_V1[k] for k in SEND_V1], strict=True))
    assert letters["l"] == "16" and letters["n"] == "broker-a"
    v2 = parse_header(h.SEND_MESSAGE_REQUEST_V2, {**letters, "m": "true"})
    v1 = parse_header(h.SEND_MESSAGE_REQUEST, {**SEND_V1, "batch": "true"})
    assert v2 == {key: v1[key] for key in v2}
    assert set(v1) - set(v2) == INHERITED - {"bname"}


def test_every_bad_field_is_named_at_once():
    bad = {**SEND_V1, "queueId": "x", "bornTimestamp": "9223372036854775808", "unitMode": "yes"}  # (a boolean is never bad)
    del bad["producerGroup"], bad["flag"]
    with pytest.raises(HeaderFieldError) as caught:
        parse_header(h.SEND_MESSAGE_REQUEST, bad)
    assert set(caught.value.errors) == {"producerGroup", "queueId", "bornTimestamp", "flag"}
    assert caught.value.errors["producerGroup"] == "is missing"
    message = str(caught.value)
    assert message.startswith("SendMessageRequestHeader: ")
    assert all(name in message for name in caught.value.errors)


def test_a_v2_error_names_the_letter_and_what_it_stands_for():
    with pytest.raises(HeaderFieldError) as caught:
        parse_header(h.SEND_MESSAGE_REQUEST_V2, {"a": "pg"})
    assert "e (queueId)" in caught.value.errors and "a (producerGroup)" not in caught.value.errors


@pytest.mark.parametrize(
    "field_type, raw, parsed",
    [
        (h.INT, "0", 0),
        (h.INT, "+5", 5),
        (h.INT, "-0", 0),
        (h.INT, "-2147483648", -(2**31)),
        (h.INT, "2147483647", 2**31 - 1),
        (h.LONG, "9223372036854775807", 2**63 - 1),
        (h.LONG, "-9223372036854775808", -(2**63)),
        (h.LONG, "000000000000000000000000001", 1),  # Long.parseLong reads leading zeros
        (h.LONG, "1" * 5000, None),
        (h.INT, "2147483648", None),
        (h.LONG, "9223372036854775808", None),
        (h.INT, " 5", None),
        (h.INT, "5 ", None),
        (h.INT, "1_0", None),
        (h.INT, "٣", None),  # Python's int() reads an Arabic-Indic three
        (h.INT, "", None),
        (h.INT, "0x10", None),
        (h.BOOL, "true", True),
        (h.BOOL, "TRUE", True),
        (h.BOOL, "False", False),
        (h.BOOL, "1", False),  # Boolean.parseBoolean: the C++ client's "1"/"0" are both false
        (h.BOOL, "0", False),
        (h.BOOL, "", False),
        (h.BOOL, "yes", False),
        (h.STRING, "", ""),
        (h.STRING, " x ", " x "),
    ],
)
def test_a_fields_text_is_read_as_java_reads_its_type(field_type, raw, parsed):
    table = h.HeaderTable("T", (h.HeaderField("v", field_type),))
    if parsed is None:
        with pytest.raises(HeaderFieldError, match="v "):
            parse_header(table, {"v": raw})
    else:
        assert parse_header(table, {"v": raw}) == {"v": parsed}


def test_values_encode_as_strings():
    assert encode_header({"a": None, "b": True, "c": False, "d": -5, "e": "x"}) == {
        "b": "true",
        "c": "false",
        "d": "-5",
        "e": "x",
    }
    with pytest.raises(TypeError):
        encode_header({"ratio": 1.5})  # type: ignore[dict-item]


def test_encoding_with_a_table_uses_its_names():
    assert encode_header({"producerGroup": "pg", "queueId": 3, "batch": None}, h.SEND_MESSAGE_REQUEST_V2) == {"a": "pg", "e": "3"}
    with pytest.raises(KeyError, match="queueIdd"):
        encode_header({"queueIdd": 3}, h.SEND_MESSAGE_REQUEST_V2)


SAMPLES = {h.STRING: "s", h.INT: -7, h.LONG: 2**40, h.BOOL: True}


@pytest.mark.parametrize("table", ALL_TABLES.values(), ids=lambda t: t.name)
def test_each_table_round_trips(table):
    values = {f.key: SAMPLES[f.type] for f in table.fields}
    assert parse_header(table, encode_header(values, table)) == values


@pytest.mark.parametrize(
    "code",
    [
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_BROKER_RUNTIME_INFO,
        RequestCode.CONTROLLER_GET_METADATA_INFO,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
    ],
)
def test_requests_that_send_no_header_have_no_table(code):
    # MQClientAPIImpl creates these with a null custom header
    assert code not in h.REQUEST_HEADERS


def test_v2_and_batch_share_the_short_header():
    assert (
        h.REQUEST_HEADERS[RequestCode.SEND_MESSAGE_V2]
        is h.REQUEST_HEADERS[RequestCode.SEND_BATCH_MESSAGE]
        is h.SEND_MESSAGE_REQUEST_V2
    )
