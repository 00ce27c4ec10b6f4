"""The read-only admin requests mqadmin, rocketmq-dashboard and rocketmq-exporter send a broker to draw a
cluster (issue 36 item 5), answered from the same store, topic configs and consumer metadata the
status report (brokers/admin.py) and the gRPC edge use. Decides nothing: each handler reads, shapes
the body Java's ``AdminBrokerProcessor`` writes, and answers.

| code | request | body |
|---|---|---|
| 28 | GET_BROKER_RUNTIME_INFO | ``KVTable`` ``{"table": {key: text}}`` |
| 202 | GET_TOPIC_STATS_INFO | ``TopicStatsTable`` ``{"offsetTable": {mq: TopicOffset}, "topicPutTps"}`` |
| 208 | GET_CONSUME_STATS | ``ConsumeStats`` ``{"offsetTable": {mq: OffsetWrapper}, "consumeTps"}`` |
| 21 | GET_ALL_TOPIC_CONFIG | ``TopicConfigAndMappingSerializeWrapper`` (header ``totalTopicNum``) |
| 201 | GET_ALL_SUBSCRIPTIONGROUP_CONFIG | ``SubscriptionGroupWrapper`` (header ``totalGroupNum``) |

Bodies are standard JSON. Two maps are keyed by a ``MessageQueue`` object; fastjson, which Java's
``RemotingSerializable`` uses, writes such a key as a bare object (``{{"brokerName":...}:{...}}``),
which no other JSON reader takes. We write the key as a string holding that object's JSON, fields in
fastjson's (alphabetical) order: ``"{\\"brokerName\\":\\"b\\",\\"queueId\\":0,\\"topic\\":\\"T\\"}"``.
That is fastjson's own ``WriteNonStringKeyAsString`` rendering, and fastjson 1.2.83 (RocketMQ's,
the dashboard's and the exporter's) reads a string key of a bean-typed map by parsing the string as
that bean (``MapDeserializer.parseMap``), so Java clients get their ``MessageQueue`` back
(docs/remoting.md, "The broker's admin requests").

Sources: apache/rocketmq broker/.../processor/AdminBrokerProcessor.java (getBrokerRuntimeInfo,
prepareRuntimeInfo, getTopicStatsInfo, getConsumeStats, getAllTopicConfig, getAllSubscriptionGroup),
store/.../StoreStatsService.java and DefaultMessageStore.java (getRuntimeInfo), remoting/.../protocol/
admin/{TopicStatsTable,TopicOffset,ConsumeStats,OffsetWrapper}.java, body/{KVTable,
TopicConfigAndMappingSerializeWrapper,SubscriptionGroupWrapper}.java, subscription/
SubscriptionGroupConfig.java, common/.../TopicConfig.java, MixAll.java (humanReadableByteCount).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand
from mqrules.remoting.headers import (
    GET_ALL_SUBSCRIPTION_GROUP_REQUEST,
    GET_ALL_SUBSCRIPTION_GROUP_RESPONSE,
    GET_ALL_TOPIC_CONFIG_REQUEST,
    GET_ALL_TOPIC_CONFIG_RESPONSE,
    GET_CONSUME_STATS_REQUEST,
    GET_TOPIC_STATS_INFO_REQUEST,
    HeaderTable,
    HeaderValue,
    encode_header,
    parse_header,
)

from ..config import BrokerConfig
from ..meta import ConsumerMeta, dv_wire
from ..pop import now_ms
from ..store.store import MessageStore
from ..topics import TopicConfig, TopicConfigManager, broker_own, queue_ids

Handler = Callable[[RemotingCommand, object], Awaitable[RemotingCommand]]

# MQVersion.getVersionDesc(CURRENT_VERSION) of the RocketMQ release whose protocol these answers follow.
VERSION_DESC = "V5_3_3"
TOPIC_LIST_SEPARATOR = ";"  # GetConsumeStatsRequestHeader.topicList
# Static topics' mappings are not served here (their DataVersion stays the initial one).
NO_MAPPINGS_VERSION = {"counter": 0, "stateVersion": 0, "timestamp": 0}
NO_TPS = "0.0 0.0 0.0"  # StoreStatsService's "10 s, 1 min, 10 min" rates: not sampled here
# KVTable keys that clients parse as numbers (the dashboard's and mqadmin's Long.parseLong): never absent.
# Counts of gets are not kept here.
COUNTERS = (
    "msgPutTotalYesterdayMorning",
    "msgPutTotalTodayMorning",
    "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning",
    "msgGetTotalTodayNow",
)
# SubscriptionGroupConfig's defaults: the broker keeps group names only.
_GROUP_DEFAULTS = {
    "attributes": {},
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeMessageOrderly": False,
    "consumeTimeoutMinute": 15,
    "groupRetryPolicy": {"type": "CUSTOMIZED"},
    "groupSysFlag": 0,
    "notifyConsumerIdsChangedEnable": True,
    "retryMaxTimes": 16,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}


def body(value: object) -> bytes:
    """Standard JSON, compact, UTF-8 (as fastjson writes a body)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def message_queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A ``MessageQueue`` as a map key: fastjson's JSON of it, as a string (this module's docstring)."""
    return json.dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic}, separators=(",", ":"), ensure_ascii=False)


def human_bytes(n: int) -> str:
    """``MixAll.humanReadableByteCount(n, false)``: ``512 B``, ``1.5 KiB``, ``20.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def runtime_text(elapsed_ms: int) -> str:
    """StoreStatsService's ``runtime``: ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``."""
    seconds = max(elapsed_ms, 0) // 1000
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def topic_config_json(tc: TopicConfig) -> dict:
    """``TopicConfig`` as fastjson writes it (``order`` false: no ORDER_TOPIC_CONFIG is kept, and a FIFO
    topic says so in its ``message.type`` attribute)."""
    return {
        "attributes": dict(tc.attributes),
        "order": False,
        "perm": tc.perm,
        "readQueueNums": tc.readQueueNums,
        "topicFilterType": "SINGLE_TAG",
        "topicName": tc.topicName,
        "topicSysFlag": tc.topicSysFlag,
        "writeQueueNums": tc.writeQueueNums,
    }


def _header(request: RemotingCommand, table: HeaderTable) -> dict[str, HeaderValue] | None:
    """The request's header, or None when it carries no extFields (old clients send 21 and 201 so;
    Java checks nothing then)."""
    return parse_header(table, request.ext_fields) if request.ext_fields else None


class AdminRequests:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        meta: ConsumerMeta,
        runtime: Callable[[], dict[str, str]],
    ):
        """``runtime()``: KVTable values the composition root knows and this module does not (a put
        rate, the midnight counters, the role); they are added last, so they win."""
        self.config, self.store, self.topics, self.meta = config, store, topics, meta
        self.runtime = runtime
        self.boot_timestamp = now_ms()

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_BROKER_RUNTIME_INFO: self.broker_runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_subscription_groups,
        }

    # --- 28 -------------------------------------------------------------------------------------------

    async def broker_runtime_info(self, request: RemotingCommand, connection: object = None) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=body({"table": self.runtime_table()}))

    def runtime_table(self) -> dict[str, str]:
        store, now = self.store, now_ms()
        table = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerActive": "true",
            **dict.fromkeys(COUNTERS, "0"),
            "msgPutTotalTodayNow": str(store.stats["messages"]),  # put since this process started, as Java's
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": runtime_text(now - self.boot_timestamp),
            "commitLogMinOffset": str(store.min_offset),
            "commitLogMaxOffset": str(store.max_offset),
            "putTps": NO_TPS,
            "getFoundTps": NO_TPS,
            "getMissTps": NO_TPS,
            "getTotalTps": NO_TPS,
            "getTransferredTps": NO_TPS,
        }
        root = Path(self.config.storePathRootDir)
        if root.exists():
            disk = shutil.disk_usage(root)
            table["commitLogDirCapacity"] = f"Total : {human_bytes(disk.total)}, Free : {human_bytes(disk.free)}."
        table.update(self.runtime())
        return table

    # --- 202 ------------------------------------------------------------------------------------------

    async def topic_stats_info(self, request: RemotingCommand, connection: object = None) -> RemotingCommand:
        topic = str(parse_header(GET_TOPIC_STATS_INFO_REQUEST, request.ext_fields)["topic"])
        tc = self._topic(topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        offsets = {}
        for queue_id in queue_ids(tc):
            end = self.store.max_queue_offset(topic, queue_id)
            first = await self.store.first_queue_offset(topic, queue_id) if end else 0
            offsets[message_queue_key(topic, self.config.brokerName, queue_id)] = {
                "lastUpdateTimestamp": await self._store_timestamp(topic, queue_id, end - 1),
                "maxOffset": end,
                "minOffset": first,
            }
        return request.response(ResponseCode.SUCCESS, body=body({"offsetTable": offsets, "topicPutTps": 0.0}))

    # --- 208 ------------------------------------------------------------------------------------------

    async def consume_stats(self, request: RemotingCommand, connection: object = None) -> RemotingCommand:
        header = parse_header(GET_CONSUME_STATS_REQUEST, request.ext_fields)
        group = str(header["consumerGroup"])
        listed = [t for t in str(header["topicList"] or "").split(TOPIC_LIST_SEPARATOR) if t.strip()]
        if listed:
            wanted = set(listed)
        elif header["topic"]:
            wanted = {str(header["topic"])}
        else:
            wanted = self._consumed_topics(group)
        offsets = {}
        for topic in sorted(wanted):
            tc = self._topic(topic)
            if tc is None:
                continue  # Java logs and leaves the topic out
            for queue_id in range(tc.readQueueNums):
                committed, popped = self._consumer_offsets(group, topic, queue_id)
                offsets[message_queue_key(topic, self.config.brokerName, queue_id)] = {
                    "brokerOffset": self.store.max_queue_offset(topic, queue_id),
                    "consumerOffset": committed,
                    "lastTimestamp": await self._store_timestamp(topic, queue_id, committed - 1),
                    "pullOffset": max(committed, popped),
                }
        return request.response(ResponseCode.SUCCESS, body=body({"consumeTps": 0.0, "offsetTable": offsets}))

    def _consumed_topics(self, group: str) -> set[str]:
        """``ConsumerOffsetManager.whichTopicByConsumer``: the topics the group committed offsets on,
        and (pop consumers) the ones it pops from."""
        topics = {key.rsplit("@", 2)[1] for key in self.meta.offsets.offsets if key.rsplit("@", 2)[0] == group}
        return topics | {topic for g, topic, _ in self.meta.pop.queues if g == group}

    def _consumer_offsets(self, group: str, topic: str, queue_id: int) -> tuple[int, int]:
        """(committed, next never popped): 0 for a queue the group never consumed here (Java's
        queryOffset -1, clamped); the pop state's next offset when the group pops the queue."""
        committed = max(self.meta.consumed_below(group, topic, queue_id) or 0, 0)
        state = self.meta.pop.queues.get((group, topic, queue_id))
        return committed, committed if state is None else state.pop_offset

    # --- 21 and 201 -----------------------------------------------------------------------------------

    async def all_topic_config(self, request: RemotingCommand, connection: object = None) -> RemotingCommand:
        _header(request, GET_ALL_TOPIC_CONFIG_REQUEST)  # checked; everything is answered at once (no enableSplitMetadata)
        table = {name: topic_config_json(tc) for name, tc in sorted(self.topics.topics.items()) if not broker_own(name)}
        wrapper = {
            "dataVersion": self.topics.wire_version(),
            "mappingDataVersion": NO_MAPPINGS_VERSION,
            "topicConfigTable": table,
            "topicQueueMappingDetailMap": {},
            "topicQueueMappingInfoMap": {},
        }
        # totalTopicNum is what the body holds: a paging client (MQClientAPIImpl.getAllTopicConfig) stops after one page.
        header = encode_header({"totalTopicNum": len(table)}, GET_ALL_TOPIC_CONFIG_RESPONSE)
        return request.response(ResponseCode.SUCCESS, ext_fields=header, body=body(wrapper))

    async def all_subscription_groups(self, request: RemotingCommand, connection: object = None) -> RemotingCommand:
        _header(request, GET_ALL_SUBSCRIPTION_GROUP_REQUEST)
        table = {group: {**_GROUP_DEFAULTS, "groupName": group} for group in sorted(self.meta.groups)}
        wrapper = {"dataVersion": dv_wire(self.meta.data_version), "forbiddenTable": {}, "subscriptionGroupTable": table}
        header = encode_header({"totalGroupNum": len(table)}, GET_ALL_SUBSCRIPTION_GROUP_RESPONSE)
        return request.response(ResponseCode.SUCCESS, ext_fields=header, body=body(wrapper))

    # --- reading the store ----------------------------------------------------------------------------

    def _topic(self, name: str) -> TopicConfig | None:
        return None if broker_own(name) else self.topics.topics.get(name)

    async def _store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """``getMessageStoreTimeStamp``: when the message at ``offset`` was stored; 0 when there is none."""
        if offset < 0:
            return 0
        messages = await self.store.get_messages(topic, queue_id, offset, 1)
        return messages[0].store_timestamp if messages and messages[0].queue_offset == offset else 0
