"""RocketMQ response codes (reference §1.12). Pure: usable from the rule cores."""

from enum import IntEnum


class ResponseCode(IntEnum):
    """``ResponseCode`` / ``RemotingSysResponseCode`` numbers (reference §1.12)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29
    BROKER_NOT_EXIST = 211
    NOT_LEADER_FOR_QUEUE = 501  # a static topic's logical queue asked of a broker that does not own it
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
    # Ours (RocketMQ's static-topic admin has no code for these; reference §6): a logical-queue
    # mapping change planned against an older epoch, and a move of a queue whose last move is undecided.
    LOGIC_QUEUE_MAPPING_FENCED_EPOCH = 2100
    LOGIC_QUEUE_MIGRATING = 2101


# Broker websocket close codes both ends know (docs/websocket.md). A broker resetting its link (a call
# timed out, e.g. right after a partition healed) and reconnecting at once closes with this: it is not
# gone, so the control plane's close hooks do not run. A broker that stops closes with 1000/1001; one
# that dies sends no close frame (1006).
CLOSE_BROKER_RECONNECTING = 4000
