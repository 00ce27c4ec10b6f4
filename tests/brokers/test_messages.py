"""Finding messages on a broker and following them, broker side (brokers/messages.py, trace.py, dlq.py,
clients_report.py; docs/messages.md §2-4): a real broker in this process, linked to a real control plane
(uvicorn, Redis, Postgres); messages sent and received by the official Python client over gRPC; every
request goes the control plane's way (controlplane/broker_rpc.py: a push, one ``rpc_reply``), QUERY_MESSAGE
a remoting client's.

- messages are found by their unique key and by key (through the store's index), by commit-log offset
  (with a bounded body), and listed by time;
- the trace of one message: consumed by one group, delivered twice and dead in another, never delivered
  to a third, each delivery naming the client that received it;
- the dead letter is listed with its origin, reason and attempts, and resent once however often it is
  asked (after a restart of the resend's memory too, through the index);
- the connected clients (gRPC and remoting) are in the status report with their subscriptions, and gone
  once they close.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage

from brokers.broker import Broker
from brokers.config import load
from brokers.dlq import DeadLetters
from brokers.messages import BrokerIdentity, MessageQueries
from brokers.meta import META_TOPIC
from controlplane import broker_rpc
from controlplane.models import ApiToken
from mqrules.codes import ResponseCode
from mqrules.remoting.codes import RequestCode
from mqrules.remoting.frame import encode_frame
from mqrules.remoting.headers import QUERY_MESSAGE_REQUEST
from mqrules.remoting.message_id import decode_offset_message_id
from nameserver import liveness
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from testkit.remoting import RemotingClient, decode_records, heartbeat_body
from tests.procs import create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CLUSTER, NAME, TOPIC, PAYMENTS = "msgq", "broker-a", "Orders", "Payments"
MAX_TIMES = 2  # retryMaxTimes: maxAttempts = 3 deliveries, the third not acked is the last


async def until(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return found


def test_messages_are_found_traced_and_resent_and_clients_listed(tmp_path):
    token = ApiToken.issue("msgq-broker", "broker")[1]
    with uvicorn_server() as base:
        keys = broker_keys(NAME, tmp_path / "store", BrokerPorts.reserve(), base, cluster=CLUSTER, token=token)
        conf = write_broker_conf(
            tmp_path / "broker.conf",
            {**keys, "mappedFileSizeCommitLog": 1 << 20, "brokerStatusReportInterval": 200, "retryMaxTimes": MAX_TIMES},
        )
        admin = {"Authorization": f"Bearer {ApiToken.issue('msgq-admin', 'admin')[1]}"}
        asyncio.run(scenario(conf, base, admin))


async def scenario(conf, base: str, admin: dict) -> None:
    broker = Broker(load(conf), conf)
    await broker.start()
    try:
        member = liveness.member(CLUSTER, broker.config.broker_addr)

        async def connected():
            return await asyncio.to_thread(lambda: liveness.connections([member]).get(member))

        channel = await until(connected)

        async def ask(kind: str, payload: dict) -> dict:
            return await asyncio.to_thread(broker_rpc.call, channel, kind, payload, 15.0)

        for topic, queues in ((TOPIC, 2), (PAYMENTS, 1)):  # through the control plane, pushed to the broker
            await asyncio.to_thread(create_topic, base, admin, topic, queues, clusterName=CLUSTER)
        config = ClientConfiguration(f"127.0.0.1:{broker.config.grpcServerPort}", Credentials())
        ids = await asyncio.to_thread(send, config, TOPIC, [(f"order {i}".encode(), [f"order-{i}", "shared"]) for i in range(3)])
        await found_by_key_offset_and_time(broker, ask, ids)
        [paid] = await asyncio.to_thread(send, config, PAYMENTS, [(b"order 42 paid", ["order-42"])])
        await traced_listed_and_resent(broker, ask, config, paid)
    finally:
        await broker.stop()


def send(config: ClientConfiguration, topic: str, bodies: list[tuple[bytes, list[str]]]) -> list[str]:
    deadline = time.monotonic() + 30
    while True:  # until the route names the topic (the broker registers it)
        producer = Producer(config, (topic,))
        try:
            producer.startup()
            break
        except Exception:
            assert time.monotonic() < deadline, f"no route for {topic}"
            time.sleep(0.5)
    try:
        ids = []
        for body, keys in bodies:
            msg = ClientMessage()
            msg.topic, msg.body, msg.tag = topic, body, "order"
            for key in keys:  # (each assignment adds one: the client keeps a set)
                msg.keys = key
            ids.append(producer.send(msg).message_id)
        return ids
    finally:
        producer.shutdown()


async def refused(ask, kind: str, payload: dict) -> broker_rpc.BrokerRefused:
    with pytest.raises(broker_rpc.BrokerRefused) as caught:
        await ask(kind, payload)
    return caught.value


async def found_by_key_offset_and_time(broker: Broker, ask, ids: list[str]) -> None:
    views = []
    for message_id, i in zip(ids, range(3), strict=True):
        answer = await ask("query_message", {"by": "uniqueKey", "topic": TOPIC, "key": message_id})
        assert answer["truncated"] is False and [m["uniqKey"] for m in answer["messages"]] == [message_id]
        view = answer["messages"][0]
        assert (view["topic"], view["tags"], sorted(view["keys"])) == (TOPIC, "order", [f"order-{i}", "shared"])
        assert (view["bodySize"], view["messageType"], view["brokerName"], view["brokerId"]) == (7, "NORMAL", NAME, 0)
        decoded = decode_offset_message_id(view["msgId"])
        assert (f"{decoded.host}:{decoded.port}", decoded.commit_log_offset) == (
            broker.config.broker_addr,
            view["commitLogOffset"],
        )
        views.append(view)
    shared = await ask("query_message", {"topic": TOPIC, "key": "shared", "maxNum": 10})
    assert [m["uniqKey"] for m in shared["messages"]] == ids[::-1] and shared["truncated"] is False  # newest first
    two = await ask("query_message", {"topic": TOPIC, "key": "shared", "maxNum": 2})
    assert [m["uniqKey"] for m in two["messages"]] == ids[:0:-1] and two["truncated"] is True
    assert (await ask("query_message", {"topic": TOPIC, "key": "order-1"}))["messages"][0]["uniqKey"] == ids[1]
    assert (await ask("query_message", {"by": "uniqueKey", "topic": TOPIC, "key": "order-1"}))["messages"] == []
    assert (await ask("query_message", {"topic": PAYMENTS, "key": "shared"}))["messages"] == []
    future = {"topic": TOPIC, "key": "shared", "beginMs": int(time.time() * 1000) + 60_000}
    assert (await ask("query_message", future))["messages"] == []

    one = await ask("view_message", {"commitLogOffset": views[0]["commitLogOffset"], "bodyBytes": 5})
    assert base64.b64decode(one["body"]) == b"order" and one["bodyTruncated"] is True and one["uniqKey"] == ids[0]
    whole = await ask("view_message", {"commitLogOffset": views[0]["commitLogOffset"]})
    assert base64.b64decode(whole["body"]) == b"order 0" and whole["bodyTruncated"] is False
    gone = await refused(ask, "view_message", {"commitLogOffset": broker.store.max_offset + 10})
    assert gone.code == ResponseCode.TOPIC_NOT_EXIST

    printed = await ask("print_messages", {"topic": TOPIC, "beginMs": views[0]["storeTimestamp"], "maxNum": 10})
    assert sorted(m["uniqKey"] for m in printed["messages"]) == sorted(ids) and printed["truncated"] is False
    assert len((await ask("print_messages", {"topic": TOPIC, "maxNum": 2}))["messages"]) == 2

    for payload, field in (
        ({"topic": TOPIC, "key": "k" * 256}, "key"),
        ({"topic": TOPIC, "key": "k", "maxNum": 0}, "maxNum"),
        ({"topic": TOPIC, "key": "k", "beginMs": 5, "endMs": 4}, "endMs"),
        ({"topic": "", "key": "k"}, "topic"),
        ({"by": "id", "topic": TOPIC, "key": "k"}, "by"),
    ):
        bad = await refused(ask, "query_message", payload)
        assert bad.code == ResponseCode.INVALID_PARAMETER and field in bad.fields, payload
    assert (await refused(ask, "view_message", {"commitLogOffset": -1})).fields.keys() == {"commitLogOffset"}

    # QUERY_MESSAGE (12), as a remoting client asks: the records as stored, newest first.
    def remoting_query(key: str, unique: bool):
        with RemotingClient(broker.config.broker_addr) as c:
            header = {"topic": TOPIC, "key": key, "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62}
            command = c.command(RequestCode.QUERY_MESSAGE, header, QUERY_MESSAGE_REQUEST)
            if unique:
                command.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
            c.sock.sendall(encode_frame(command))
            return c.answer(command.opaque)

    answer = await asyncio.to_thread(remoting_query, "shared", False)
    assert answer.code == ResponseCode.SUCCESS and int(answer.ext_fields["indexLastUpdatePhyoffset"]) > 0
    assert [r["body"] for r in decode_records(answer.body)] == [b"order 2", b"order 1", b"order 0"]
    answer = await asyncio.to_thread(remoting_query, ids[1], True)
    assert [r["body"] for r in decode_records(answer.body)] == [b"order 1"]
    assert (await asyncio.to_thread(remoting_query, "nothing", False)).code == ResponseCode.QUERY_NOT_FOUND


def receive_one(consumer: SimpleConsumer, invisible_s: int, within_s: float = 30) -> list:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = consumer.receive(1, invisible_s)
        if got:
            return got
    return []


def consume(config, group: str, deliveries: int, ack_last: bool) -> None:
    consumer = SimpleConsumer(config, group, {PAYMENTS: FilterExpression()}, await_duration=1)
    consumer.startup()
    try:
        for attempt in range(1, deliveries + 1):
            got = receive_one(consumer, 1)
            assert len(got) == 1 and got[0].delivery_attempt == attempt, f"{group}: delivery {attempt}"
            if ack_last and attempt == deliveries:
                consumer.ack(got[0])
    finally:
        consumer.shutdown()


async def traced_listed_and_resent(broker: Broker, ask, config, paid: str) -> None:
    await asyncio.to_thread(consume, config, "shipping", 1, True)
    await asyncio.to_thread(consume, config, "audit", MAX_TIMES + 1, False)
    [view] = (await ask("query_message", {"by": "uniqueKey", "topic": PAYMENTS, "key": paid}))["messages"]
    asked = {k: view[k] for k in ("topic", "queueId", "queueOffset", "uniqKey", "storeTimestamp")}

    async def dead() -> dict | None:
        groups = (await ask("message_trace", {**asked, "groups": ["shipping", "audit", "idle"]}))["groups"]
        return groups if groups["audit"]["consumed"] == "dead" else None

    groups = await until(dead, 30)
    shipping, audit, idle = groups["shipping"], groups["audit"], groups["idle"]
    assert shipping["consumed"] == "consumed" and shipping["committedOffset"] == 1 and shipping["recordsGone"] is False
    [delivery] = shipping["deliveries"]
    assert delivery["attempt"] == 1 and delivery["clientId"] and delivery["ackTimeMs"] >= delivery["popTimeMs"]
    assert (delivery["topic"], delivery["queueOffset"]) == (PAYMENTS, 0) and shipping["retry"] == [] and shipping["dlq"] is None
    assert [(d["attempt"], d["topic"], d["ackTimeMs"]) for d in audit["deliveries"]] == [
        (1, PAYMENTS, None),
        (2, "%RETRY%audit_Payments", None),
        (3, "%RETRY%audit_Payments", None),
    ]
    assert [m["uniqKey"] for m in audit["retry"]] == [paid, paid] and audit["dlq"]["uniqKey"] == paid
    assert idle == {
        "consumed": "not_yet",
        "deliveries": [],
        "retry": [],
        "dlq": None,
        "committedOffset": None,
        "recordsGone": False,
    }
    # the records carry the trace keys the index found them by
    records = await broker.store.get_messages(META_TOPIC, 0, 0, 1000)
    assert any(m.properties.get("KEYS") == f"{PAYMENTS}@0@0" and b'"clientId"' in m.body for m in records)
    assert (await refused(ask, "message_trace", {**asked, "groups": "audit"})).fields.keys() == {"groups"}

    await resent_once(broker, ask, config, paid, audit["dlq"]["commitLogOffset"])


async def resent_once(broker: Broker, ask, config, paid: str, dlq_offset: int) -> None:
    listed = await ask("dlq_list", {"group": "audit"})
    assert (listed["minOffset"], listed["maxOffset"]) == (0, 1)
    [letter] = listed["messages"]
    assert (letter["uniqKey"], letter["originTopic"], letter["originMsgId"]) == (paid, PAYMENTS, paid)
    assert (letter["attempts"], letter["reason"], letter["commitLogOffset"]) == (
        MAX_TIMES + 1,
        "max reconsume times exceeded",
        dlq_offset,
    )
    assert (await ask("dlq_list", {"group": "nobody"}))["messages"] == []

    request = {"group": "audit", "commitLogOffsets": [dlq_offset, 7], "resendId": uuid.uuid4().hex}
    end = broker.store.max_queue_offset(PAYMENTS, 0)
    preview = await ask("dlq_resend", {**request, "preview": True})
    assert preview["missing"] == [7] and [(r["originTopic"], r["already"], r["newMsgId"]) for r in preview["resent"]] == [
        (PAYMENTS, False, None)
    ]
    assert broker.store.max_queue_offset(PAYMENTS, 0) == end
    done = await ask("dlq_resend", request)
    [first] = done["resent"]
    assert first["already"] is False and first["newUniqKey"] not in (None, paid)
    again = await ask("dlq_resend", request)
    assert [(r["already"], r["newMsgId"], r["newUniqKey"]) for r in again["resent"]] == [
        (True, first["newMsgId"], first["newUniqKey"])
    ]
    # A broker that forgot what it wrote (a restart, a new master) finds the copy through the index.
    c = broker.config
    identity = BrokerIdentity(NAME, lambda: 0, c.broker_addr, c.brokerIP1, c.listenPort)
    queries = MessageQueries(broker.store, broker.topics, identity, lambda: None)
    fresh = DeadLetters(broker.store, broker.topics, broker.metalog, queries, lambda: None)
    assert (await fresh.dlq_resend(request))["resent"][0]["already"] is True
    assert broker.store.max_queue_offset(PAYMENTS, 0) == end + 1
    [copy] = await broker.store.get_messages(PAYMENTS, 0, end, 1)
    props = copy.properties
    assert (copy.body, props["UNIQ_KEY"], props["ORIGIN_MESSAGE_ID"]) == (b"order 42 paid", first["newUniqKey"], paid)
    assert props["RESEND_ID"] == request["resendId"] and f"{request['resendId']}:{dlq_offset}" in props["KEYS"].split(" ")
    bad = await refused(ask, "dlq_resend", {**request, "resendId": "not-hex"})
    assert bad.code == ResponseCode.INVALID_PARAMETER and bad.fields.keys() == {"resendId"}
    await clients_listed(broker, config)

    broker.metalog.become_follower()  # only the serving master resends; a preview is anyone's
    follower = await refused(ask, "dlq_resend", {**request, "resendId": uuid.uuid4().hex})
    assert follower.code == ResponseCode.SYSTEM_ERROR and "not the master" in follower.detail
    assert (await ask("dlq_resend", {**request, "preview": True}))["resent"][0]["already"] is True


async def clients_listed(broker: Broker, config) -> None:
    """The status report's clients: a gRPC consumer and a remoting one, with their subscriptions, gone
    once they close."""

    async def report() -> dict[str, dict]:
        return {c["protocol"]: c for c in (await broker.admin.status_report())["clients"]}

    consumer = SimpleConsumer(config, "watchers", {PAYMENTS: FilterExpression("paid")}, await_duration=1)
    await asyncio.to_thread(consumer.startup)
    remoting = RemotingClient(broker.config.broker_addr)
    try:
        body = heartbeat_body("10.0.0.9@cpp", ["makers"], {"pullers": {TOPIC: "a || b"}})
        assert (await asyncio.to_thread(remoting.request, RequestCode.HEART_BEAT, None, None, body)).code == 0

        async def both() -> dict | None:
            seen = await report()
            return seen if "grpc" in seen and "watchers" in seen["grpc"]["consumerGroups"] and "remoting" in seen else None

        seen = await until(both)
        grpc, cpp = seen["grpc"], seen["remoting"]
        assert grpc["language"] == "PYTHON" and grpc["version"] and grpc["address"].startswith("127.0.0.1:")
        assert grpc["subscriptions"]["watchers"] == [{"topic": PAYMENTS, "expression": "paid", "type": "TAG"}]
        assert grpc["lastSeenMs"] > time.time() * 1000 - 60_000
        assert (cpp["clientId"], cpp["producerGroups"], cpp["consumerGroups"]) == ("10.0.0.9@cpp", ["makers"], ["pullers"])
        assert cpp["subscriptions"] == {"pullers": [{"topic": TOPIC, "expression": "a || b", "type": "TAG"}]}
        assert cpp["language"] == "JAVA" and cpp["topics"] == [TOPIC]
    finally:
        remoting.close()
        await asyncio.to_thread(consumer.shutdown)

    async def gone() -> bool:
        return await report() == {}

    await until(gone)
