"""What each client request asks of access control (brokers/core/access.py), row by row as apache/rocketmq's
``DefaultAuthorizationContextBuilder`` builds it (auth/.../authorization/builder/), with our three
departures named in their rows."""

from __future__ import annotations

import json

import pytest

from brokers.core.access import Ask, GrpcCall, GrpcNames, grpc_asks, remoting_asks
from mqrules.acl import Action, Resource
from mqrules.remoting.codes import RequestCode

pytestmark = pytest.mark.unit

PUB, SUB, GET = Action.PUB, Action.SUB, Action.GET


def topic(name: str, *actions: Action) -> Ask:
    return Ask(Resource.topic(name), actions)


def group(name: str, *actions: Action) -> Ask:
    return Ask(Resource.group(name), actions)


GRPC = [
    ("send: Pub on the topic", GrpcCall.SEND_MESSAGE, GrpcNames(("Orders",)), (topic("Orders", PUB),)),
    (
        "send (ours): Pub on each topic of a batch, once each",
        GrpcCall.SEND_MESSAGE,
        GrpcNames(("Orders", "Bills", "Orders")),
        (topic("Orders", PUB), topic("Bills", PUB)),
    ),
    ("send of no message: authentication only", GrpcCall.SEND_MESSAGE, GrpcNames(), ()),
    ("end transaction: Pub on the topic", GrpcCall.END_TRANSACTION, GrpcNames(("Orders",)), (topic("Orders", PUB),)),
    ("route: Pub or Sub on the topic", GrpcCall.QUERY_ROUTE, GrpcNames(("Orders",)), (topic("Orders", PUB, SUB),)),
    (
        "receive: Sub on the group and the topic",
        GrpcCall.RECEIVE_MESSAGE,
        GrpcNames(("Orders",), "g"),
        (group("g", SUB), topic("Orders", SUB)),
    ),
    (
        "ack: Sub on the group and the topic",
        GrpcCall.ACK_MESSAGE,
        GrpcNames(("Orders",), "g"),
        (group("g", SUB), topic("Orders", SUB)),
    ),
    (
        "forward to the DLQ: Sub on the group and the topic",
        GrpcCall.FORWARD_MESSAGE_TO_DLQ,
        GrpcNames(("Orders",), "g"),
        (group("g", SUB), topic("Orders", SUB)),
    ),
    (
        "assignment: Sub on the group and the topic",
        GrpcCall.QUERY_ASSIGNMENT,
        GrpcNames(("Orders",), "g"),
        (group("g", SUB), topic("Orders", SUB)),
    ),
    (
        "change invisible duration: Sub on the group",
        GrpcCall.CHANGE_INVISIBLE_DURATION,
        GrpcNames(("Orders",), "g"),
        (group("g", SUB),),
    ),
    ("termination: Sub on a named group", GrpcCall.NOTIFY_CLIENT_TERMINATION, GrpcNames((), "g"), (group("g", SUB),)),
    ("termination of a producer: authentication only", GrpcCall.NOTIFY_CLIENT_TERMINATION, GrpcNames(), ()),
    ("a consumer's heartbeat: Sub on its group", GrpcCall.HEARTBEAT, GrpcNames((), "g", consumer=True), (group("g", SUB),)),
    ("a producer's heartbeat: authentication only", GrpcCall.HEARTBEAT, GrpcNames((), "g", consumer=False), ()),
    ("query offset (ours): Sub on the topic", GrpcCall.QUERY_OFFSET, GrpcNames(("Orders",)), (topic("Orders", SUB),)),
    ("telemetry (ours): authentication only", GrpcCall.TELEMETRY, GrpcNames(("Orders",), "g"), ()),
    (
        "a retry group is its group",
        GrpcCall.ACK_MESSAGE,
        GrpcNames(("Orders",), "%RETRY%g"),
        (group("g", SUB), topic("Orders", SUB)),
    ),
]


@pytest.mark.parametrize("call, names, asks", [row[1:] for row in GRPC], ids=[row[0] for row in GRPC])
def test_grpc_asks(call, names, asks):
    assert grpc_asks(call, names) == asks


def test_every_grpc_call_has_a_row():
    assert {row[1] for row in GRPC} == set(GrpcCall)


def heartbeat(*consumers: tuple[str, list[str]]) -> bytes:
    data = [{"groupName": g, "subscriptionDataSet": [{"topic": t} for t in topics]} for g, topics in consumers]
    return json.dumps({"clientID": "c", "consumerDataSet": data, "producerDataSet": [{"groupName": "p"}]}).encode()


def lock_body(g: str, *topics: str) -> bytes:
    return json.dumps(
        {"consumerGroup": g, "clientId": "c", "mqSet": [{"topic": t, "brokerName": "b", "queueId": 0} for t in topics]}
    ).encode()


R = RequestCode
REMOTING = [
    ("send: Pub on the topic", R.SEND_MESSAGE, {"topic": "Orders", "producerGroup": "p"}, b"", (topic("Orders", PUB),)),
    ("send V2: Pub on field b", R.SEND_MESSAGE_V2, {"a": "p", "b": "Orders"}, b"", (topic("Orders", PUB),)),
    ("batch: Pub on field b", R.SEND_BATCH_MESSAGE, {"a": "p", "b": "Orders"}, b"", (topic("Orders", PUB),)),
    ("send to a retry topic: Sub on its group", R.SEND_MESSAGE, {"topic": "%RETRY%g"}, b"", (group("g", SUB),)),
    ("V2 send to a retry topic: Sub on group a", R.SEND_MESSAGE_V2, {"a": "g2", "b": "%RETRY%g"}, b"", (group("g2", SUB),)),
    ("end transaction naming its topic: Pub", R.END_TRANSACTION, {"topic": "Orders"}, b"", (topic("Orders", PUB),)),
    ("end transaction naming none: authentication only", R.END_TRANSACTION, {"tranStateTableOffset": "1"}, b"", ()),
    ("send back: Sub on the group", R.CONSUMER_SEND_MSG_BACK, {"group": "g", "offset": "1"}, b"", (group("g", SUB),)),
    (
        "pull: Sub on the topic and the group",
        R.PULL_MESSAGE,
        {"topic": "Orders", "consumerGroup": "g"},
        b"",
        (topic("Orders", SUB), group("g", SUB)),
    ),
    (
        "pull of a retry topic: Sub on the group",
        R.PULL_MESSAGE,
        {"topic": "%RETRY%g", "consumerGroup": "g"},
        b"",
        (group("g", SUB),),
    ),
    ("query message: Sub or Get on the topic", R.QUERY_MESSAGE, {"topic": "Orders"}, b"", (topic("Orders", SUB, GET),)),
    (
        "query offset: Sub or Get",
        R.QUERY_CONSUMER_OFFSET,
        {"topic": "Orders", "consumerGroup": "g", "queueId": "0"},
        b"",
        (topic("Orders", SUB, GET), group("g", SUB, GET)),
    ),
    (
        "update offset: Sub or Update",
        R.UPDATE_CONSUMER_OFFSET,
        {"topic": "Orders", "consumerGroup": "g"},
        b"",
        (topic("Orders", SUB, Action.UPDATE), group("g", SUB, Action.UPDATE)),
    ),
    (
        "a consumer's heartbeat: Sub on its group and each topic but retry topics",
        R.HEART_BEAT,
        {},
        heartbeat(("g", ["Orders", "%RETRY%g"])),
        (group("g", SUB), topic("Orders", SUB)),
    ),
    ("a producer's heartbeat: authentication only", R.HEART_BEAT, {}, heartbeat(), ()),
    ("unregister a consumer: Pub or Sub on its group", R.UNREGISTER_CLIENT, {"consumerGroup": "g"}, b"", (group("g", PUB, SUB),)),
    ("unregister a producer: authentication only", R.UNREGISTER_CLIENT, {"producerGroup": "p"}, b"", ()),
    (
        "consumer list: Sub or Get on the group",
        R.GET_CONSUMER_LIST_BY_GROUP,
        {"consumerGroup": "g"},
        b"",
        (group("g", SUB, GET),),
    ),
    (
        "lock: Sub on the group and each queue's topic",
        R.LOCK_BATCH_MQ,
        {},
        lock_body("g", "Orders", "Orders", "%RETRY%g"),
        (group("g", SUB), topic("Orders", SUB)),
    ),
    ("unlock: the same", R.UNLOCK_BATCH_MQ, {}, lock_body("g", "Orders"), (group("g", SUB), topic("Orders", SUB))),
    ("max offset: Get on the topic", R.GET_MAX_OFFSET, {"topic": "Orders", "queueId": "0"}, b"", (topic("Orders", GET),)),
    ("search offset: Get on the topic", R.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "Orders"}, b"", (topic("Orders", GET),)),
    ("topic stats of a retry topic: Get on its group", R.GET_TOPIC_STATS_INFO, {"topic": "%RETRY%g"}, b"", (group("g", GET),)),
    (
        "consume stats: Get on the group and the topic",
        R.GET_CONSUME_STATS,
        {"consumerGroup": "g", "topic": "T"},
        b"",
        (group("g", GET), topic("T", GET)),
    ),
    ("connections: Get on the group", R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}, b"", (group("g", GET),)),
    ("all topics (no resource named): authentication only", R.GET_ALL_TOPIC_CONFIG, {}, b"", ()),
    ("runtime info: authentication only", R.GET_BROKER_RUNTIME_INFO, {}, b"", ()),
]


@pytest.mark.parametrize("code, fields, body, asks", [row[1:] for row in REMOTING], ids=[row[0] for row in REMOTING])
def test_remoting_asks(code, fields, body, asks):
    assert remoting_asks(code, fields, body) == asks


@pytest.mark.parametrize(
    "code, body",
    [
        (R.HEART_BEAT, b"not json"),
        (R.HEART_BEAT, b"[1]"),
        (R.HEART_BEAT, json.dumps({"consumerDataSet": [{"groupName": ""}]}).encode()),
        (R.HEART_BEAT, json.dumps({"consumerDataSet": "g"}).encode()),
        (R.LOCK_BATCH_MQ, json.dumps({"mqSet": []}).encode()),
        (R.LOCK_BATCH_MQ, b"\xff"),
    ],
    ids=["no json", "not an object", "a group without a name", "not a list", "no group", "not utf-8"],
)
def test_a_body_that_cannot_be_read_is_refused(code, body):
    with pytest.raises(ValueError):
        remoting_asks(code, {}, body)
