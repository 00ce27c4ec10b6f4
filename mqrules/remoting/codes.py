"""The request codes a remoting endpoint answers (issue 36), by ``RequestCode.java``'s names and numbers
(apache/rocketmq remoting/.../protocol/RequestCode.java), and the response codes.

Response codes live in one table, ``mqrules.codes.ResponseCode`` (the controller's 2000s, the REST
API's codes and the remoting answers are the same numbers); this module re-exports it so an endpoint
imports both kinds from one place.
"""

from __future__ import annotations

from enum import IntEnum

from mqrules.codes import ResponseCode

__all__ = ["RequestCode", "ResponseCode"]


class RequestCode(IntEnum):
    # the nameserver's
    GET_KV_CONFIG = 101
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    # a broker's, from producers and consumers
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    SEND_MESSAGE_V2 = 310  # SendMessageRequestHeaderV2: the same fields under one-letter names
    SEND_BATCH_MESSAGE = 320  # also SendMessageRequestHeaderV2
    # a broker's, to a producer or a consumer (the broker is the one asking)
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    # a broker's, from mqadmin and the dashboard
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_RUNTIME_INFO = 28
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_CONSUME_STATS = 208
    EXCHANGE_BROKER_HA_INFO = 906
    # the controller's, from mqadmin (getControllerMetaData, getSyncStateSet)
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
