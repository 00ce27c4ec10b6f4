"""The broker's read-only admin requests (brokers/remoting/admin.py, issue 36 item 5), on a real store:
each request built from the header tables transcribed from apache/rocketmq (mqrules/remoting/headers.py)
and sent through the frame codec, each body read back the way a Java client's fastjson reads it into
KVTable, TopicStatsTable, ConsumeStats, TopicConfigSerializeWrapper and SubscriptionGroupWrapper."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from brokers.config import from_mapping
from brokers.meta import META_TOPIC, ConsumerMeta
from brokers.remoting.admin import AdminRequests, message_queue_key
from brokers.remoting.server import RemotingServer
from brokers.store.message import Message
from brokers.store.store import MessageStore, StoreConfig
from brokers.topics import TopicConfig, TopicConfigManager, system_topics
from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand, SerializeType, decode_frame, encode_frame
from mqrules.remoting.headers import (
    GET_ALL_SUBSCRIPTION_GROUP_REQUEST,
    GET_ALL_SUBSCRIPTION_GROUP_RESPONSE,
    GET_ALL_TOPIC_CONFIG_REQUEST,
    GET_ALL_TOPIC_CONFIG_RESPONSE,
    GET_CONSUME_STATS_REQUEST,
    GET_TOPIC_STATS_INFO_REQUEST,
    HeaderTable,
    encode_header,
    parse_header,
)

pytestmark = pytest.mark.unit

BROKER, CLUSTER, TOPIC, OTHER = "broker-a", "adm", "Orders", "Audit"
COMMITTER, POPPER = "billing", "shipping"  # a group that commits offsets, one that pops

# fastjson's fields of the bodies' classes (remoting/.../protocol/admin/*.java, body/*.java): what a
# Java reader maps; a key outside these is ignored by it, a missing one is its default.
TOPIC_OFFSET_FIELDS = {"minOffset", "maxOffset", "lastUpdateTimestamp"}
OFFSET_WRAPPER_FIELDS = {"brokerOffset", "consumerOffset", "pullOffset", "lastTimestamp"}
MESSAGE_QUEUE_FIELDS = {"topic", "brokerName", "queueId"}
DATA_VERSION_FIELDS = {"stateVersion", "timestamp", "counter"}
TOPIC_CONFIG_FIELDS = {
    "topicName",
    "readQueueNums",
    "writeQueueNums",
    "perm",
    "topicFilterType",
    "topicSysFlag",
    "order",
    "attributes",
}
SUBSCRIPTION_GROUP_FIELDS = {
    "groupName",
    "consumeEnable",
    "consumeFromMinEnable",
    "consumeBroadcastEnable",
    "consumeMessageOrderly",
    "retryQueueNums",
    "retryMaxTimes",
    "groupRetryPolicy",
    "brokerId",
    "whichBrokerWhenConsumeSlowly",
    "notifyConsumerIdsChangedEnable",
    "groupSysFlag",
    "consumeTimeoutMinute",
    "attributes",
}


def broker_config(root: Path):
    return from_mapping(
        {
            "brokerName": BROKER,
            "brokerClusterName": CLUSTER,
            "storePathRootDir": str(root),
            "controlPlaneUrl": "http://127.0.0.1:1",
            "controlPlaneToken": "t",
        }
    )


def request(code: int, values: dict | None = None, table: HeaderTable | None = None, **kw) -> RemotingCommand:
    """A request as a Java client sends it, through the wire and back (so the handler sees what the
    decoder hands an endpoint)."""
    ext = encode_header(values or {}, table) if values is not None else {}
    return decode_frame(encode_frame(RemotingCommand(code=code, opaque=7, ext_fields=ext, **kw))[4:])


def mq(key: str) -> tuple[str, str, int]:
    """A MessageQueue map key as fastjson 1.2.83 reads a string key of a bean-typed map: the string is
    parsed as the bean's JSON."""
    doc = json.loads(key)
    assert set(doc) == MESSAGE_QUEUE_FIELDS
    return doc["topic"], doc["brokerName"], doc["queueId"]


@pytest.fixture
def broker(tmp_path):
    """A started store with Orders (4 queues: 3 messages on queue 0, 1 on queue 2), Audit (1 queue,
    empty), the broker's system topics and its consumer-metadata topic; ``billing`` committed 2 on
    Orders queue 0, ``shipping`` popped Orders queue 0's first two and acked the first."""
    loop = asyncio.new_event_loop()
    root = tmp_path / "store"
    store = MessageStore(StoreConfig(root, mapped_file_size_commit_log=1 << 20))
    topics = TopicConfigManager(tmp_path / "topics.json")
    topics.seed(system_topics(CLUSTER, BROKER))
    topics.update(TopicConfig(TOPIC, 4, 4, 6, attributes={"message.type": "NORMAL"}))
    topics.update(TopicConfig(OTHER, 1, 1, 6))
    topics.update(TopicConfig(META_TOPIC, 1, 1, 6))
    meta = ConsumerMeta(tmp_path / "consumerOffset.json", topics)
    extra: dict[str, str] = {}

    async def start():
        await store.start()
        for queue_id, text in [(0, "a"), (0, "b"), (0, "c"), (2, "d")]:
            await store.put_message(Message(TOPIC, queue_id, text.encode()))
        await store.put_message(Message(META_TOPIC, 0, b"{}"))

    loop.run_until_complete(start())
    meta.groups |= {COMMITTER, POPPER}
    meta.offsets.commit(COMMITTER, TOPIC, 0, 2)
    meta.pop.pop(POPPER, TOPIC, 0, [0, 1], [1, 1], 60_000)
    meta.pop.finish(POPPER, TOPIC, 0, [0])
    admin = AdminRequests(broker_config(root), store, topics, meta, lambda: dict(extra))
    server = RemotingServer("127.0.0.1", 0)  # answers as the broker's listener does (a missing field too)
    server.handle_all(admin.handlers())

    class Broker:
        def ask(self, req: RemotingCommand) -> tuple[RemotingCommand, object]:
            reply = loop.run_until_complete(server.reply(req, None))
            reply = decode_frame(encode_frame(reply)[4:])  # what the client reads
            assert reply.is_response and reply.opaque == req.opaque
            return reply, json.loads(reply.body) if reply.body else None

        def stored_at(self, topic: str, queue_id: int, offset: int) -> int:
            (msg,) = loop.run_until_complete(store.get_messages(topic, queue_id, offset, 1))
            assert msg.queue_offset == offset
            return msg.store_timestamp

    b = Broker()
    b.store, b.topics, b.meta, b.extra, b.handlers = store, topics, meta, extra, admin.handlers()
    try:
        yield b
    finally:
        loop.run_until_complete(store.shutdown())
        loop.close()


def test_the_handlers_cover_the_five_read_only_admin_codes(broker):
    assert set(broker.handlers) == {
        RequestCode.GET_BROKER_RUNTIME_INFO,
        RequestCode.GET_TOPIC_STATS_INFO,
        RequestCode.GET_CONSUME_STATS,
        RequestCode.GET_ALL_TOPIC_CONFIG,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    }


# --- 28 GET_BROKER_RUNTIME_INFO --------------------------------------------------------------------


def test_runtime_info_is_a_kvtable_of_strings_with_the_keys_the_dashboard_parses(broker):
    reply, doc = broker.ask(request(RequestCode.GET_BROKER_RUNTIME_INFO))  # sent with no header, as Java does
    assert reply.code == ResponseCode.SUCCESS
    assert set(doc) == {"table"}
    table = doc["table"]
    assert all(isinstance(v, str) for v in table.values())  # HashMap<String, String>
    # the dashboard and mqadmin Long.parseLong these: present and numeric
    for key in (
        "msgPutTotalYesterdayMorning",
        "msgPutTotalTodayMorning",
        "msgPutTotalTodayNow",
        "msgGetTotalYesterdayMorning",
        "msgGetTotalTodayMorning",
        "msgGetTotalTodayNow",
        "commitLogMinOffset",
        "commitLogMaxOffset",
        "bootTimestamp",
    ):
        int(table[key])
    assert table["msgPutTotalTodayNow"] == "5"  # the five puts since the store started
    assert int(table["commitLogMaxOffset"]) == broker.store.max_offset > 0
    assert int(table["commitLogMinOffset"]) == broker.store.min_offset
    assert table["brokerVersionDesc"].startswith("V5_")
    assert table["runtime"].startswith("[ 0 days, 0 hours, 0 minutes, ")
    assert [float(x) for x in table["putTps"].split(" ")] == [0.0, 0.0, 0.0]  # the dashboard splits on spaces
    assert table["commitLogDirCapacity"].startswith("Total : ") and ", Free : " in table["commitLogDirCapacity"]


def test_runtime_values_from_the_composition_root_win(broker):
    broker.extra.update({"putTps": "12.5 11.0 10.0", "msgPutTotalTodayMorning": "3", "brokerRole": "SYNC_MASTER"})
    _, doc = broker.ask(request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert doc["table"]["putTps"] == "12.5 11.0 10.0"
    assert doc["table"]["msgPutTotalTodayMorning"] == "3"
    assert doc["table"]["brokerRole"] == "SYNC_MASTER"


@pytest.mark.parametrize("serialize_type", list(SerializeType), ids=lambda s: s.name)
def test_a_reply_comes_in_the_header_serialization_the_request_used(broker, serialize_type):
    reply, doc = broker.ask(request(RequestCode.GET_BROKER_RUNTIME_INFO, serialize_type=serialize_type))
    assert reply.serialize_type is serialize_type and "table" in doc


# --- 202 GET_TOPIC_STATS_INFO ----------------------------------------------------------------------


def test_topic_stats_has_one_offset_per_queue_keyed_by_message_queue(broker):
    reply, doc = broker.ask(request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}, GET_TOPIC_STATS_INFO_REQUEST))
    assert reply.code == ResponseCode.SUCCESS
    assert set(doc) == {"offsetTable", "topicPutTps"}
    table = {mq(key): value for key, value in doc["offsetTable"].items()}
    assert set(table) == {(TOPIC, BROKER, q) for q in range(4)}
    assert all(set(v) == TOPIC_OFFSET_FIELDS for v in table.values())
    assert {q: (v["minOffset"], v["maxOffset"]) for (_, _, q), v in table.items()} == {0: (0, 3), 1: (0, 0), 2: (0, 1), 3: (0, 0)}
    # the last message's store time; 0 for an empty queue
    assert table[(TOPIC, BROKER, 0)]["lastUpdateTimestamp"] == broker.stored_at(TOPIC, 0, 2) > 0
    assert table[(TOPIC, BROKER, 1)]["lastUpdateTimestamp"] == 0


def test_a_message_queue_key_is_fastjsons_rendering_of_the_object_as_a_string():
    assert message_queue_key(TOPIC, BROKER, 3) == '{"brokerName":"broker-a","queueId":3,"topic":"Orders"}'


@pytest.mark.parametrize(
    "topic",
    ["NoSuchTopic", META_TOPIC],
    ids=["unknown topic", "the broker's own consumer-metadata topic"],
)
def test_topic_stats_of_a_topic_this_broker_does_not_show_is_topic_not_exist(broker, topic):
    reply, doc = broker.ask(request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}, GET_TOPIC_STATS_INFO_REQUEST))
    assert (reply.code, reply.remark, doc) == (ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist", None)


def test_topic_stats_without_the_required_topic_is_a_system_error_naming_it(broker):
    reply, _ = broker.ask(request(RequestCode.GET_TOPIC_STATS_INFO, {"lo": True}, GET_TOPIC_STATS_INFO_REQUEST))
    assert reply.code == ResponseCode.SYSTEM_ERROR and "topic is missing" in reply.remark


# --- 208 GET_CONSUME_STATS -------------------------------------------------------------------------


def consume_stats(broker, **header) -> tuple[RemotingCommand, dict]:
    reply, doc = broker.ask(request(RequestCode.GET_CONSUME_STATS, header, GET_CONSUME_STATS_REQUEST))
    assert reply.code == ResponseCode.SUCCESS
    assert set(doc) == {"offsetTable", "consumeTps"} and doc["consumeTps"] == 0.0
    table = {mq(key): value for key, value in doc["offsetTable"].items()}
    assert all(set(v) == OFFSET_WRAPPER_FIELDS for v in table.values())
    return reply, table


def test_consume_stats_of_a_committing_group_walk_the_topics_it_committed_on(broker):
    _, table = consume_stats(broker, consumerGroup=COMMITTER)
    assert set(table) == {(TOPIC, BROKER, q) for q in range(4)}  # readQueueNums queues of each topic
    q0, q2 = table[(TOPIC, BROKER, 0)], table[(TOPIC, BROKER, 2)]
    assert (q0["brokerOffset"], q0["consumerOffset"], q0["pullOffset"]) == (3, 2, 2)
    assert q0["lastTimestamp"] == broker.stored_at(TOPIC, 0, 1) > 0  # the last consumed message's store time
    assert (q2["brokerOffset"], q2["consumerOffset"], q2["pullOffset"], q2["lastTimestamp"]) == (1, 0, 0, 0)


def test_consume_stats_of_a_pop_group_read_its_pop_state(broker):
    _, table = consume_stats(broker, consumerGroup=POPPER)
    q0 = table[(TOPIC, BROKER, 0)]
    # acked below 1 (offset 0 acked), popped up to 2 (offset 1 in flight)
    assert (q0["brokerOffset"], q0["consumerOffset"], q0["pullOffset"]) == (3, 1, 2)


@pytest.mark.parametrize(
    ("header", "topics"),
    [
        ({"topic": OTHER}, {OTHER}),
        ({"topic": OTHER, "topicList": f"{TOPIC};"}, {TOPIC}),  # topicList wins over topic
        ({"topicList": f"{TOPIC};{OTHER};NoSuchTopic"}, {TOPIC, OTHER}),  # an unknown topic is left out
    ],
    ids=["topic", "topicList over topic", "topicList with an unknown topic"],
)
def test_consume_stats_for_named_topics(broker, header, topics):
    _, table = consume_stats(broker, consumerGroup=COMMITTER, **header)
    assert {t for t, _, _ in table} == topics


def test_consume_stats_of_an_unknown_group_are_empty(broker):
    _, table = consume_stats(broker, consumerGroup="nobody")
    assert table == {}


def test_consume_stats_without_a_group_is_a_system_error_naming_it(broker):
    reply, _ = broker.ask(request(RequestCode.GET_CONSUME_STATS, {"topic": TOPIC}, GET_CONSUME_STATS_REQUEST))
    assert reply.code == ResponseCode.SYSTEM_ERROR and "consumerGroup is missing" in reply.remark


# --- 21 GET_ALL_TOPIC_CONFIG -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [None, {"topicSeq": 0, "maxTopicNum": 2, "dataVersion": ""}],
    ids=["an old client: no header", "a paging client (MQClientAPIImpl.getAllTopicConfig)"],
)
def test_all_topic_config_is_every_topic_but_the_brokers_own(broker, header):
    reply, doc = broker.ask(request(RequestCode.GET_ALL_TOPIC_CONFIG, header, GET_ALL_TOPIC_CONFIG_REQUEST))
    assert reply.code == ResponseCode.SUCCESS
    table = doc["topicConfigTable"]
    assert set(table) == {TOPIC, OTHER, CLUSTER, BROKER, "SELF_TEST_TOPIC"}
    assert all(set(tc) == TOPIC_CONFIG_FIELDS and tc["topicName"] == name for name, tc in table.items())
    assert table[TOPIC] == {
        "attributes": {"message.type": "NORMAL"},
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": TOPIC,
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert doc["dataVersion"] == broker.topics.wire_version() and set(doc["dataVersion"]) == DATA_VERSION_FIELDS
    assert set(doc["mappingDataVersion"]) == DATA_VERSION_FIELDS
    assert doc["topicQueueMappingInfoMap"] == doc["topicQueueMappingDetailMap"] == {}
    # the number the body holds: a paging client (topicSeq += size; stop at totalTopicNum - 1) stops after one page
    assert parse_header(GET_ALL_TOPIC_CONFIG_RESPONSE, reply.ext_fields) == {"totalTopicNum": 5}


def test_all_topic_config_with_a_malformed_header_is_a_system_error(broker):
    malformed = RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG, opaque=7, ext_fields={"topicSeq": "zero"})
    reply, _ = broker.ask(malformed)
    assert reply.code == ResponseCode.SYSTEM_ERROR and "topicSeq" in reply.remark


# --- 201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG ----------------------------------------------------------


@pytest.mark.parametrize("header", [None, {"groupSeq": 0, "maxGroupNum": 10}], ids=["no header", "paging header"])
def test_all_subscription_groups_name_every_group_with_javas_defaults(broker, header):
    reply, doc = broker.ask(request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, header, GET_ALL_SUBSCRIPTION_GROUP_REQUEST))
    assert reply.code == ResponseCode.SUCCESS
    assert set(doc) == {"subscriptionGroupTable", "forbiddenTable", "dataVersion"}
    table = doc["subscriptionGroupTable"]
    assert set(table) == {COMMITTER, POPPER}
    group = table[COMMITTER]
    assert set(group) == SUBSCRIPTION_GROUP_FIELDS and group["groupName"] == COMMITTER
    assert (group["consumeEnable"], group["retryMaxTimes"], group["brokerId"]) == (True, 16, 0)
    assert doc["forbiddenTable"] == {}
    assert set(doc["dataVersion"]) == DATA_VERSION_FIELDS
    assert parse_header(GET_ALL_SUBSCRIPTION_GROUP_RESPONSE, reply.ext_fields) == {"totalGroupNum": 2}
