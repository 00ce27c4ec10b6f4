"""Request and response codes (mqrules/remoting/codes.py, mqrules/codes.py) by the numbers of
apache/rocketmq remoting/.../protocol/RequestCode.java, ResponseCode.java and RemotingSysResponseCode.java."""

from __future__ import annotations

import pytest

from mqrules import codes
from mqrules.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.unit

REQUEST_CODES = [
    ("SEND_MESSAGE", 10),
    ("PULL_MESSAGE", 11),
    ("QUERY_MESSAGE", 12),
    ("QUERY_CONSUMER_OFFSET", 14),
    ("UPDATE_CONSUMER_OFFSET", 15),
    ("GET_ALL_TOPIC_CONFIG", 21),
    ("GET_BROKER_RUNTIME_INFO", 28),
    ("SEARCH_OFFSET_BY_TIMESTAMP", 29),
    ("GET_MAX_OFFSET", 30),
    ("GET_MIN_OFFSET", 31),
    ("GET_EARLIEST_MSG_STORETIME", 32),
    ("VIEW_MESSAGE_BY_ID", 33),
    ("HEART_BEAT", 34),
    ("UNREGISTER_CLIENT", 35),
    ("CONSUMER_SEND_MSG_BACK", 36),
    ("END_TRANSACTION", 37),
    ("GET_CONSUMER_LIST_BY_GROUP", 38),
    ("CHECK_TRANSACTION_STATE", 39),
    ("NOTIFY_CONSUMER_IDS_CHANGED", 40),
    ("LOCK_BATCH_MQ", 41),
    ("UNLOCK_BATCH_MQ", 42),
    ("GET_KV_CONFIG", 101),
    ("GET_ROUTEINFO_BY_TOPIC", 105),
    ("GET_BROKER_CLUSTER_INFO", 106),
    ("GET_ALL_SUBSCRIPTIONGROUP_CONFIG", 201),
    ("GET_TOPIC_STATS_INFO", 202),
    ("GET_CONSUMER_CONNECTION_LIST", 203),
    ("GET_ALL_TOPIC_LIST_FROM_NAMESERVER", 206),
    ("GET_CONSUME_STATS", 208),
    ("SEND_MESSAGE_V2", 310),
    ("SEND_BATCH_MESSAGE", 320),
    ("EXCHANGE_BROKER_HA_INFO", 906),
    ("CONTROLLER_GET_METADATA_INFO", 1005),
    ("CONTROLLER_GET_SYNC_STATE_DATA", 1006),
]

RESPONSE_CODES = [
    ("SUCCESS", 0),
    ("SYSTEM_ERROR", 1),
    ("SYSTEM_BUSY", 2),
    ("REQUEST_CODE_NOT_SUPPORTED", 3),
    ("TRANSACTION_FAILED", 4),
    ("FLUSH_DISK_TIMEOUT", 10),
    ("SLAVE_NOT_AVAILABLE", 11),
    ("FLUSH_SLAVE_TIMEOUT", 12),
    ("MESSAGE_ILLEGAL", 13),
    ("SERVICE_NOT_AVAILABLE", 14),
    ("VERSION_NOT_SUPPORTED", 15),
    ("NO_PERMISSION", 16),
    ("TOPIC_NOT_EXIST", 17),
    ("TOPIC_EXIST_ALREADY", 18),
    ("PULL_NOT_FOUND", 19),
    ("PULL_RETRY_IMMEDIATELY", 20),
    ("PULL_OFFSET_MOVED", 21),
    ("QUERY_NOT_FOUND", 22),
    ("SUBSCRIPTION_PARSE_FAILED", 23),
    ("SUBSCRIPTION_NOT_EXIST", 24),
    ("SUBSCRIPTION_NOT_LATEST", 25),
    ("SUBSCRIPTION_GROUP_NOT_EXIST", 26),
    ("FILTER_DATA_NOT_EXIST", 27),
    ("FILTER_DATA_NOT_LATEST", 28),
    ("INVALID_PARAMETER", 29),
    ("TRANSACTION_SHOULD_COMMIT", 200),
    ("TRANSACTION_SHOULD_ROLLBACK", 201),
    ("TRANSACTION_STATE_UNKNOW", 202),
    ("TRANSACTION_STATE_GROUP_WRONG", 203),
    ("NO_BUYER_ID", 204),
    ("NOT_IN_CURRENT_UNIT", 205),
    ("CONSUMER_NOT_ONLINE", 206),
    ("CONSUME_MSG_TIMEOUT", 207),
    ("NO_MESSAGE", 208),
    ("POLLING_FULL", 209),
    ("POLLING_TIMEOUT", 210),
    ("BROKER_NOT_EXIST", 211),
    ("BROKER_DISPATCH_NOT_COMPLETE", 212),
    ("BROADCAST_CONSUMPTION", 213),
    ("FLOW_CONTROL", 215),
    ("NOT_LEADER_FOR_QUEUE", 501),
    ("ILLEGAL_OPERATION", 604),
    ("GO_AWAY", 1500),
    ("CONTROLLER_JRAFT_INTERNAL_ERROR", 2015),
    ("CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS", 2016),
    ("USER_NOT_EXIST", 3001),
    ("POLICY_NOT_EXIST", 3002),
]


@pytest.mark.parametrize("name, number", REQUEST_CODES, ids=[n for n, _ in REQUEST_CODES])
def test_a_request_code_is_rocketmqs(name, number):
    assert RequestCode[name] == number


@pytest.mark.parametrize("name, number", RESPONSE_CODES, ids=[n for n, _ in RESPONSE_CODES])
def test_a_response_code_is_rocketmqs(name, number):
    assert ResponseCode[name] == number


def test_the_request_codes_are_the_issues_list():
    assert {c.name for c in RequestCode} == {n for n, _ in REQUEST_CODES}


@pytest.mark.parametrize("enum", [RequestCode, ResponseCode], ids=lambda e: e.__name__)
def test_no_number_has_two_names(enum):
    # an IntEnum makes a second name for a number an alias, silently
    assert len(enum.__members__) == len(list(enum))


def test_one_response_code_table_for_every_protocol():
    assert ResponseCode is codes.ResponseCode
