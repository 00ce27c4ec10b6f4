"""The custom headers of the remoting requests and responses we speak: field tables transcribed from
apache/rocketmq's header classes (remoting/src/main/java/org/apache/rocketmq/remoting/protocol/header/,
``rpc/RpcRequestHeader.java``, ``rpc/TopicRequestHeader.java``), and one parser and one encoder for all.

A header travels as ``extFields``, a map of strings. Each table lists ``(name, type, required)``:
``required`` is Java's ``@CFNotNull``; ``default`` is what the Java class answers for an absent field
(a field initializer, or a getter's fallback such as ``SendMessageRequestHeader.isBatch``). Fields a
header inherits from ``RpcRequestHeader`` (``ns``, ``nsd``, ``bname``, ``oway``) and
``TopicRequestHeader`` (``lo``) are listed too: Java reads them by reflection over the superclasses.

``SEND_MESSAGE_V2`` and ``SEND_BATCH_MESSAGE`` carry ``SendMessageRequestHeaderV2``: the same fields
under the names ``a`` to ``n``. Its table gives each the long name ``SendMessageRequestHeader`` uses
(``n``, the broker name, is ``bname``), so ``parse_header`` hands the endpoint the same dict for either
code. V2 is read by its ``FastCodesHeader.decode``, which reads ``a``..``n`` and nothing inherited.

Java checks nothing when a request carries no extFields at all (``decodeCommandCustomHeaderDirectly``):
old clients send ``GET_ALL_TOPIC_CONFIG`` and ``GET_ALL_SUBSCRIPTIONGROUP_CONFIG`` so and get
everything. ``parse_header`` is stricter (every call checks); such an endpoint looks at
``ext_fields`` first. ``LOCK_BATCH_MQ``, ``UNLOCK_BATCH_MQ``, ``HEART_BEAT`` and the
controller's requests say what they want in a JSON body; their headers carry the inherited fields only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from mqrules.validation import INT_MAX, LONG_MAX

from .codes import RequestCode

HeaderValue = str | int | bool | None
_INTEGER = re.compile(r"[+-]?[0-9]+")  # Integer.parseInt / Long.parseLong, ASCII digits only


class FieldType(StrEnum):
    STRING = "String"
    INT = "Integer"
    LONG = "Long"
    BOOL = "Boolean"


@dataclass(frozen=True, slots=True)
class HeaderField:
    name: str  # its key in extFields
    type: FieldType
    required: bool = False
    default: HeaderValue = None
    long_name: str | None = None  # V2's one-letter fields: SendMessageRequestHeader's name

    @property
    def key(self) -> str:
        """Its key in what ``parse_header`` answers."""
        return self.long_name or self.name

    @property
    def label(self) -> str:
        return self.name if self.long_name is None else f"{self.name} ({self.long_name})"


@dataclass(frozen=True, slots=True)
class HeaderTable:
    name: str  # the Java class
    fields: tuple[HeaderField, ...]


class HeaderFieldError(ValueError):
    """A header with missing or malformed fields: ``errors`` maps each (its extFields name, V2's with
    the long name beside it: ``e (queueId)``) to what is wrong; the message lists them all, for the
    reply's remark."""

    def __init__(self, header: str, errors: Mapping[str, str]):
        super().__init__(f"{header}: " + "; ".join(f"{name} {problem}" for name, problem in errors.items()))
        self.header = header
        self.errors = dict(errors)


# --- parsing and encoding --------------------------------------------------------------------------


def parse_header(table: HeaderTable, ext_fields: Mapping[str, str]) -> dict[str, HeaderValue]:
    """Every field of ``table``, typed, by its long name (an absent optional field is its default, or
    ``None``). Raises ``HeaderFieldError`` naming every missing or malformed field at once."""
    values: dict[str, HeaderValue] = {}
    errors: dict[str, str] = {}
    for f in table.fields:
        raw = ext_fields.get(f.name)
        if raw is None:
            if f.required:
                errors[f.label] = "is missing"
            values[f.key] = f.default
            continue
        try:
            values[f.key] = _parse_value(f.type, raw)
        except ValueError as exc:
            errors[f.label] = str(exc)
    if errors:
        raise HeaderFieldError(table.name, errors)
    return values


def _parse_value(type_: FieldType, raw: str) -> HeaderValue:
    if type_ is FieldType.STRING:
        return raw
    if type_ is FieldType.BOOL:
        # Boolean.parseBoolean: "true" in any case, anything else false (the C++ client sends "0"/"1")
        return raw.lower() == "true"
    limit = INT_MAX if type_ is FieldType.INT else LONG_MAX
    digits = raw.lstrip("+-").lstrip("0")  # Java reads leading zeros; more than 19 digits fit no long
    if not _INTEGER.fullmatch(raw) or len(digits) > 19 or not -limit - 1 <= int(raw) <= limit:
        raise ValueError(f"{raw!r:.40} is not a Java {type_.value} ({-limit - 1}..{limit})")
    return int(raw)


def encode_header(values: Mapping[str, HeaderValue], table: HeaderTable | None = None) -> dict[str, str]:
    """``extFields`` for a header's values: ``None`` left out, booleans ``true``/``false``, numbers in
    decimal. With ``table``, ``values`` are keyed by long names and sent under the table's names
    (``producerGroup`` as ``a`` for V2); a non-null value the table lacks is a ``KeyError``."""
    names = {f.key: f.name for f in table.fields} if table is not None else None
    out = {}
    for key, value in values.items():
        if value is None:
            continue
        if names is not None and key not in names:
            raise KeyError(f"{table.name if table else ''} has no field {key!r}")
        out[key if names is None else names[key]] = _text(key, value)
    return out


def _text(key: str, value: HeaderValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise TypeError(f"header field {key!r}: a {type(value).__name__} is not a string, integer or boolean")


# --- the tables ------------------------------------------------------------------------------------

STRING, INT, LONG, BOOL = FieldType.STRING, FieldType.INT, FieldType.LONG, FieldType.BOOL


def _f(name: str, type_: FieldType, required: bool = False, default: HeaderValue = None) -> HeaderField:
    return HeaderField(name, type_, required, default)


def _table(name: str, *fields: HeaderField) -> HeaderTable:
    return HeaderTable(name, tuple(fields))


RPC = (_f("ns", STRING), _f("nsd", BOOL), _f("bname", STRING), _f("oway", BOOL))  # RpcRequestHeader: namespace, broker, oneway
TOPIC = (*RPC, _f("lo", BOOL))  # TopicRequestHeader (and TopicQueueRequestHeader): lo, a static topic's logical queue

# nameserver
GET_ROUTE_INFO_REQUEST = _table(
    "GetRouteInfoRequestHeader", _f("topic", STRING, True), _f("acceptStandardJsonOnly", BOOL), *TOPIC
)
GET_KV_CONFIG_REQUEST = _table("GetKVConfigRequestHeader", _f("namespace", STRING, True), _f("key", STRING, True))
GET_KV_CONFIG_RESPONSE = _table("GetKVConfigResponseHeader", _f("value", STRING))

# sending
SEND_MESSAGE_REQUEST = _table(
    "SendMessageRequestHeader",
    _f("producerGroup", STRING, True),
    _f("topic", STRING, True),
    _f("defaultTopic", STRING, True),
    _f("defaultTopicQueueNums", INT, True),
    _f("queueId", INT, True),
    _f("sysFlag", INT, True),
    _f("bornTimestamp", LONG, True),
    _f("flag", INT, True),
    _f("properties", STRING),
    _f("reconsumeTimes", INT, default=0),
    _f("unitMode", BOOL, default=False),
    _f("batch", BOOL, default=False),
    _f("maxReconsumeTimes", INT),
    *TOPIC,
)
# V2's letters and the V1 fields they stand for (SendMessageRequestHeaderV2.createSendMessageRequestHeaderV1);
# the defaults are V1's getters', so both codes parse to the same values.
SEND_MESSAGE_REQUEST_V2 = _table(
    "SendMessageRequestHeaderV2",
    HeaderField("a", STRING, True, long_name="producerGroup"),
    HeaderField("b", STRING, True, long_name="topic"),
    HeaderField("c", STRING, True, long_name="defaultTopic"),
    HeaderField("d", INT, True, long_name="defaultTopicQueueNums"),
    HeaderField("e", INT, True, long_name="queueId"),
    HeaderField("f", INT, True, long_name="sysFlag"),
    HeaderField("g", LONG, True, long_name="bornTimestamp"),
    HeaderField("h", INT, True, long_name="flag"),
    HeaderField("i", STRING, long_name="properties"),
    HeaderField("j", INT, default=0, long_name="reconsumeTimes"),
    HeaderField("k", BOOL, default=False, long_name="unitMode"),
    HeaderField("l", INT, long_name="maxReconsumeTimes"),
    HeaderField("m", BOOL, default=False, long_name="batch"),
    HeaderField("n", STRING, long_name="bname"),
)
SEND_MESSAGE_RESPONSE = _table(
    "SendMessageResponseHeader",
    _f("msgId", STRING, True),
    _f("queueId", INT, True),
    _f("queueOffset", LONG, True),
    _f("transactionId", STRING),
    _f("batchUniqId", STRING),
    _f("recallHandle", STRING),
)

# pulling and offsets
PULL_MESSAGE_REQUEST = _table(
    "PullMessageRequestHeader",
    _f("consumerGroup", STRING, True),
    _f("topic", STRING, True),
    _f("queueId", INT, True),
    _f("queueOffset", LONG, True),
    _f("maxMsgNums", INT, True),
    _f("sysFlag", INT, True),
    _f("commitOffset", LONG, True),
    _f("suspendTimeoutMillis", LONG, True),
    _f("subscription", STRING),
    _f("subVersion", LONG, True),
    _f("expressionType", STRING),
    _f("maxMsgBytes", INT),
    _f("requestSource", INT),
    _f("proxyFrowardClientId", STRING),  # sic
    *TOPIC,
)
PULL_MESSAGE_RESPONSE = _table(
    "PullMessageResponseHeader",
    _f("suggestWhichBrokerId", LONG, True),
    _f("nextBeginOffset", LONG, True),
    _f("minOffset", LONG, True),
    _f("maxOffset", LONG, True),
    _f("offsetDelta", LONG),
    _f("topicSysFlag", INT),
    _f("groupSysFlag", INT),
    _f("forbiddenType", INT),
)
QUERY_CONSUMER_OFFSET_REQUEST = _table(
    "QueryConsumerOffsetRequestHeader",
    _f("consumerGroup", STRING, True),
    _f("topic", STRING, True),
    _f("queueId", INT, True),
    _f("setZeroIfNotFound", BOOL),
    *TOPIC,
)
QUERY_CONSUMER_OFFSET_RESPONSE = _table("QueryConsumerOffsetResponseHeader", _f("offset", LONG, True))
UPDATE_CONSUMER_OFFSET_REQUEST = _table(
    "UpdateConsumerOffsetRequestHeader",
    _f("consumerGroup", STRING, True),
    _f("topic", STRING, True),
    _f("queueId", INT, True),
    _f("commitOffset", LONG, True),
    *TOPIC,
)
SEARCH_OFFSET_REQUEST = _table(
    "SearchOffsetRequestHeader",
    _f("topic", STRING, True),
    _f("queueId", INT, True),
    _f("timestamp", LONG, True),
    _f("boundaryType", STRING),  # BoundaryType: "upper" (any case) or else lower
    *TOPIC,
)
SEARCH_OFFSET_RESPONSE = _table("SearchOffsetResponseHeader", _f("offset", LONG, True))
GET_MAX_OFFSET_REQUEST = _table(
    "GetMaxOffsetRequestHeader", _f("topic", STRING, True), _f("queueId", INT, True), _f("committed", BOOL, default=True), *TOPIC
)
GET_MAX_OFFSET_RESPONSE = _table("GetMaxOffsetResponseHeader", _f("offset", LONG, True))
GET_MIN_OFFSET_REQUEST = _table("GetMinOffsetRequestHeader", _f("topic", STRING, True), _f("queueId", INT, True), *TOPIC)
GET_MIN_OFFSET_RESPONSE = _table("GetMinOffsetResponseHeader", _f("offset", LONG, True))
GET_EARLIEST_MSG_STORETIME_REQUEST = _table(
    "GetEarliestMsgStoretimeRequestHeader", _f("topic", STRING, True), _f("queueId", INT, True), *TOPIC
)
GET_EARLIEST_MSG_STORETIME_RESPONSE = _table("GetEarliestMsgStoretimeResponseHeader", _f("timestamp", LONG, True))

# messages by key or id
QUERY_MESSAGE_REQUEST = _table(
    "QueryMessageRequestHeader",
    _f("topic", STRING, True),
    _f("key", STRING, True),
    _f("maxNum", INT, True),
    _f("beginTimestamp", LONG, True),
    _f("endTimestamp", LONG, True),
    *TOPIC,
)
QUERY_MESSAGE_RESPONSE = _table(
    "QueryMessageResponseHeader", _f("indexLastUpdateTimestamp", LONG, True), _f("indexLastUpdatePhyoffset", LONG, True)
)
VIEW_MESSAGE_REQUEST = _table("ViewMessageRequestHeader", _f("topic", STRING), _f("offset", LONG, True))

# clients and consumer groups
HEARTBEAT_REQUEST = _table("HeartbeatRequestHeader", *RPC)
UNREGISTER_CLIENT_REQUEST = _table(
    "UnregisterClientRequestHeader", _f("clientID", STRING, True), _f("producerGroup", STRING), _f("consumerGroup", STRING), *RPC
)
GET_CONSUMER_LIST_BY_GROUP_REQUEST = _table("GetConsumerListByGroupRequestHeader", _f("consumerGroup", STRING, True), *RPC)
NOTIFY_CONSUMER_IDS_CHANGED_REQUEST = _table("NotifyConsumerIdsChangedRequestHeader", _f("consumerGroup", STRING, True), *RPC)
LOCK_BATCH_MQ_REQUEST = _table("LockBatchMqRequestHeader", *RPC)
UNLOCK_BATCH_MQ_REQUEST = _table("UnlockBatchMqRequestHeader", *RPC)
CONSUMER_SEND_MSG_BACK_REQUEST = _table(
    "ConsumerSendMsgBackRequestHeader",
    _f("offset", LONG, True),
    _f("group", STRING, True),
    _f("delayLevel", INT, True),
    _f("originMsgId", STRING),
    _f("originTopic", STRING),
    _f("unitMode", BOOL, default=False),
    _f("maxReconsumeTimes", INT),
    *RPC,
)

# transactions
END_TRANSACTION_REQUEST = _table(
    "EndTransactionRequestHeader",
    _f("topic", STRING),
    _f("producerGroup", STRING, True),
    _f("tranStateTableOffset", LONG, True),
    _f("commitLogOffset", LONG, True),
    _f("commitOrRollback", INT, True),  # MessageSysFlag: 0x8 commit, 0xC rollback, 0 not decided
    _f("fromTransactionCheck", BOOL, default=False),
    _f("msgId", STRING, True),
    _f("transactionId", STRING),
    *RPC,
)
CHECK_TRANSACTION_STATE_REQUEST = _table(
    "CheckTransactionStateRequestHeader",
    _f("topic", STRING),
    _f("tranStateTableOffset", LONG, True),
    _f("commitLogOffset", LONG, True),
    _f("msgId", STRING),
    _f("transactionId", STRING),
    _f("offsetMsgId", STRING),
    *RPC,
)

# administration (mqadmin, the dashboard)
GET_ALL_TOPIC_CONFIG_REQUEST = _table(
    "GetAllTopicConfigRequestHeader", _f("topicSeq", INT, True), _f("dataVersion", STRING), _f("maxTopicNum", INT)
)
GET_ALL_TOPIC_CONFIG_RESPONSE = _table("GetAllTopicConfigResponseHeader", _f("totalTopicNum", INT, True))
GET_ALL_SUBSCRIPTION_GROUP_REQUEST = _table(
    "GetAllSubscriptionGroupRequestHeader", _f("groupSeq", INT, True), _f("dataVersion", STRING), _f("maxGroupNum", INT)
)
GET_ALL_SUBSCRIPTION_GROUP_RESPONSE = _table("GetAllSubscriptionGroupResponseHeader", _f("totalGroupNum", INT, True))
GET_TOPIC_STATS_INFO_REQUEST = _table("GetTopicStatsInfoRequestHeader", _f("topic", STRING, True), *TOPIC)
GET_CONSUME_STATS_REQUEST = _table(
    "GetConsumeStatsRequestHeader", _f("consumerGroup", STRING, True), _f("topic", STRING), _f("topicList", STRING), *TOPIC
)
GET_CONSUMER_CONNECTION_LIST_REQUEST = _table("GetConsumerConnectionListRequestHeader", _f("consumerGroup", STRING, True), *RPC)
_HA_INFO = (_f("masterHaAddress", STRING), _f("masterFlushOffset", LONG), _f("masterAddress", STRING))
EXCHANGE_HA_INFO_REQUEST = _table("ExchangeHAInfoRequestHeader", *_HA_INFO)
EXCHANGE_HA_INFO_RESPONSE = _table("ExchangeHAInfoResponseHeader", *_HA_INFO)
GET_METADATA_RESPONSE = _table(
    "GetMetaDataResponseHeader",
    _f("group", STRING),
    _f("controllerLeaderId", STRING),
    _f("controllerLeaderAddress", STRING),
    _f("isLeader", BOOL, default=False),
    _f("peers", STRING),
)

# Which header each request carries, and its answer's (requests absent here send none).
REQUEST_HEADERS: dict[RequestCode, HeaderTable] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GET_ROUTE_INFO_REQUEST,
    RequestCode.GET_KV_CONFIG: GET_KV_CONFIG_REQUEST,
    RequestCode.SEND_MESSAGE: SEND_MESSAGE_REQUEST,
    RequestCode.SEND_MESSAGE_V2: SEND_MESSAGE_REQUEST_V2,
    RequestCode.SEND_BATCH_MESSAGE: SEND_MESSAGE_REQUEST_V2,
    RequestCode.PULL_MESSAGE: PULL_MESSAGE_REQUEST,
    RequestCode.QUERY_MESSAGE: QUERY_MESSAGE_REQUEST,
    RequestCode.QUERY_CONSUMER_OFFSET: QUERY_CONSUMER_OFFSET_REQUEST,
    RequestCode.UPDATE_CONSUMER_OFFSET: UPDATE_CONSUMER_OFFSET_REQUEST,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SEARCH_OFFSET_REQUEST,
    RequestCode.GET_MAX_OFFSET: GET_MAX_OFFSET_REQUEST,
    RequestCode.GET_MIN_OFFSET: GET_MIN_OFFSET_REQUEST,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GET_EARLIEST_MSG_STORETIME_REQUEST,
    RequestCode.VIEW_MESSAGE_BY_ID: VIEW_MESSAGE_REQUEST,
    RequestCode.HEART_BEAT: HEARTBEAT_REQUEST,
    RequestCode.UNREGISTER_CLIENT: UNREGISTER_CLIENT_REQUEST,
    RequestCode.CONSUMER_SEND_MSG_BACK: CONSUMER_SEND_MSG_BACK_REQUEST,
    RequestCode.END_TRANSACTION: END_TRANSACTION_REQUEST,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: GET_CONSUMER_LIST_BY_GROUP_REQUEST,
    RequestCode.CHECK_TRANSACTION_STATE: CHECK_TRANSACTION_STATE_REQUEST,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NOTIFY_CONSUMER_IDS_CHANGED_REQUEST,
    RequestCode.LOCK_BATCH_MQ: LOCK_BATCH_MQ_REQUEST,
    RequestCode.UNLOCK_BATCH_MQ: UNLOCK_BATCH_MQ_REQUEST,
    RequestCode.GET_ALL_TOPIC_CONFIG: GET_ALL_TOPIC_CONFIG_REQUEST,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: GET_ALL_SUBSCRIPTION_GROUP_REQUEST,
    RequestCode.GET_TOPIC_STATS_INFO: GET_TOPIC_STATS_INFO_REQUEST,
    RequestCode.GET_CONSUME_STATS: GET_CONSUME_STATS_REQUEST,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: GET_CONSUMER_CONNECTION_LIST_REQUEST,
    RequestCode.EXCHANGE_BROKER_HA_INFO: EXCHANGE_HA_INFO_REQUEST,
}
RESPONSE_HEADERS: dict[RequestCode, HeaderTable] = {
    RequestCode.GET_KV_CONFIG: GET_KV_CONFIG_RESPONSE,
    RequestCode.SEND_MESSAGE: SEND_MESSAGE_RESPONSE,
    RequestCode.SEND_MESSAGE_V2: SEND_MESSAGE_RESPONSE,
    RequestCode.SEND_BATCH_MESSAGE: SEND_MESSAGE_RESPONSE,
    RequestCode.PULL_MESSAGE: PULL_MESSAGE_RESPONSE,
    RequestCode.QUERY_MESSAGE: QUERY_MESSAGE_RESPONSE,
    RequestCode.QUERY_CONSUMER_OFFSET: QUERY_CONSUMER_OFFSET_RESPONSE,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SEARCH_OFFSET_RESPONSE,
    RequestCode.GET_MAX_OFFSET: GET_MAX_OFFSET_RESPONSE,
    RequestCode.GET_MIN_OFFSET: GET_MIN_OFFSET_RESPONSE,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GET_EARLIEST_MSG_STORETIME_RESPONSE,
    RequestCode.GET_ALL_TOPIC_CONFIG: GET_ALL_TOPIC_CONFIG_RESPONSE,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: GET_ALL_SUBSCRIPTION_GROUP_RESPONSE,
    RequestCode.EXCHANGE_BROKER_HA_INFO: EXCHANGE_HA_INFO_RESPONSE,
    RequestCode.CONTROLLER_GET_METADATA_INFO: GET_METADATA_RESPONSE,
}
