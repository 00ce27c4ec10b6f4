"""RocketMQ response codes (reference §1.12). Pure: usable from the rule cores and the remoting codec
(``mqrules.remoting.codes`` re-exports ``ResponseCode``: one table for every protocol we speak)."""

from enum import IntEnum


class ResponseCode(IntEnum):
    """``ResponseCode`` / ``RemotingSysResponseCode`` numbers (reference §1.12; apache/rocketmq
    remoting/.../protocol/ResponseCode.java, by the same names, misspellings included). The client-side
    ``RPC_*`` codes (-1000...) never travel and are left out."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501  # a static topic's logical queue asked of a broker that does not own it
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500  # a server shutting down, to clients newer than 5.3.1
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016
    # Ours (RocketMQ's static-topic admin has no code for these; reference §6): a logical-queue
    # mapping change planned against an older epoch, and a move of a queue whose last move is undecided.
    LOGIC_QUEUE_MAPPING_FENCED_EPOCH = 2100
    LOGIC_QUEUE_MIGRATING = 2101
    USER_NOT_EXIST = 3001
    POLICY_NOT_EXIST = 3002


# Broker websocket close codes both ends know (docs/websocket.md). A broker resetting its link (a call
# timed out, e.g. right after a partition healed) and reconnecting at once closes with this: it is not
# gone, so the control plane's close hooks do not run. A broker that stops closes with 1000/1001; one
# that dies sends no close frame (1006).
CLOSE_BROKER_RECONNECTING = 4000
