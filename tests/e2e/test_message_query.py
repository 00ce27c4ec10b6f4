"""Finding messages and following them (issue 40; docs/messages.md), with the official clients in their
own processes and real brokers behind the control plane's REST API:

- messages the official Python producer sent with keys are found by their id (the client's, a unique
  key), by key, by the offset message id and by (broker, commit-log offset), on the master and, after
  kill -9 of the master, on the replicas that are left;
- the trace of one message consumed by one group, redelivered twice to another and sent to the
  dead-letter queue of a third shows each group's story;
- a resend from the dead-letter queue reaches the original topic once, however often it is asked;
- the connected clients (the official Python and Node.js clients, the two remoting clients) are listed
  with their subscriptions, and are gone once they close.
"""

from __future__ import annotations

import signal
import time
import uuid

import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage

from chaos.node_client import node_client_process
from chaos.remoting_clients import remoting_client
from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.e2e.test_failover import in_sync_group
from tests.e2e.test_remoting_clients import remoting_nameserver
from tests.procs import create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Replicated"  # the test kit's topic, 4 queues
MAX_TIMES = 2  # retryMaxTimes: a message is delivered 3 times before it is dead


def api(base: str, headers: dict, cluster: str):
    http = httpx.Client(base_url=f"{base}/api/v1/clusters/{cluster}", headers=headers, timeout=30)

    def get(path: str, **params) -> dict:
        response = http.get(path, params=params)
        assert response.status_code == 200, (path, params, response.status_code, response.text)
        return response.json()

    def post(path: str, body: dict) -> dict:
        response = http.post(path, json=body)
        assert response.status_code == 200, (path, body, response.status_code, response.text)
        return response.json()

    return http, get, post


def send_with_keys(port: int, topic: str, bodies: list[tuple[bytes, list[str]]]) -> list[str]:
    producer = Producer(ClientConfiguration(f"127.0.0.1:{port}", Credentials()), (topic,))
    producer.startup()
    try:
        ids = []
        for body, keys in bodies:
            msg = ClientMessage()
            msg.topic, msg.body, msg.tag = topic, body, "order"
            for key in keys:  # the client's setter adds one key a time
                msg.keys = key
            ids.append(producer.send(msg).message_id)
        return ids
    finally:
        producer.shutdown()


def found(get, ids: list[str], bodies: list[bytes]) -> dict[str, dict]:
    """Each message by its unique key, checked; then by key, by offset id and by offset: the same."""
    views = {}
    for message_id, body in zip(ids, bodies, strict=True):
        answer = get("/messages", topic=TOPIC, uniqueKey=message_id)
        assert [m["uniqKey"] for m in answer["messages"]] == [message_id]
        view = answer["messages"][0]
        assert view["topic"] == TOPIC and view["tags"] == "order"
        assert view["bodySize"] == len(body)
        views[message_id] = view
    shared = get("/messages", topic=TOPIC, key="shared", max=64)
    assert {m["uniqKey"] for m in shared["messages"]} == set(ids)
    first = views[ids[0]]
    assert {m["uniqKey"] for m in get("/messages", topic=TOPIC, key="order-0")["messages"]} == {ids[0]}
    by_id = get(f"/messages/{first['msgId']}")
    assert by_id["uniqKey"] == ids[0] and by_id["commitLogOffset"] == first["commitLogOffset"]
    assert by_id["body"]["text"] == bodies[0].decode()
    # the client's message id is an id too, given its topic (RocketMQ's admin falls back to the unique key)
    assert get(f"/messages/{ids[0]}", topic=TOPIC)["commitLogOffset"] == first["commitLogOffset"]
    by_offset = get("/messages/by-offset", brokerName=first["brokerName"], commitLogOffset=first["commitLogOffset"])
    assert by_offset["uniqKey"] == ids[0]
    return views


def test_messages_are_found_by_id_key_and_offset_on_the_master_and_after_failover(tmp_path):
    with in_sync_group(tmp_path, "mq") as g:
        http, get, _ = api(g.base, g.admin, "repl")
        bodies = [f"order event {i}".encode() for i in range(5)]
        ids = send_with_keys(g.master.grpc_port, TOPIC, [(b, [f"order-{i}", "shared"]) for i, b in enumerate(bodies)])
        before = found(get, ids, bodies)
        assert {v["brokerAddr"] for v in before.values()} == {f"127.0.0.1:{g.master.listen_port}"}

        missing = http.get("/messages", params={"topic": TOPIC, "uniqueKey": uuid.uuid4().hex.upper()})
        assert missing.status_code == 200 and missing.json()["messages"] == []
        bad = http.get("/messages/not-an-id")
        assert bad.status_code == 400 and "msgId" in bad.json().get("fields", bad.json())

        epoch = g.info()["masterEpoch"]
        g.master.stop(signal.SIGKILL)
        wait_for(
            lambda: g.info().get("masterEpoch", 0) > epoch and g.master_of(g.info()) not in (None, g.master), 60, "a new master"
        )
        after = found(get, ids, bodies)
        # the same messages, at the same offsets, now answered by a replica that was a slave
        assert {k: v["commitLogOffset"] for k, v in after.items()} == {k: v["commitLogOffset"] for k, v in before.items()}
        assert f"127.0.0.1:{g.master.listen_port}" not in {v["brokerAddr"] for v in after.values()}


def consume(config, group: str, topic: str, message_id: str, deliveries: int, ack_last: bool) -> list:
    """Receive message ``message_id`` ``deliveries`` times (invisible 1 s each), acking only the last
    when ``ack_last`` (any other message, the warm-up's, is acked at once); returns its deliveries."""
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=1)
    consumer.startup()
    try:
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < deliveries and time.monotonic() < deadline:
            for m in consumer.receive(1, 1):
                if m.message_id != message_id:
                    consumer.ack(m)
                    continue
                got.append(m)
                if ack_last and len(got) == deliveries:
                    consumer.ack(m)
        assert [m.delivery_attempt for m in got] == list(range(1, deliveries + 1)), group
        return got
    finally:
        consumer.shutdown()


def single_broker(tmp_path, base: str, token: str, cluster: str, **keys) -> tuple[BrokerPorts, object]:
    ports = BrokerPorts.reserve()
    conf = write_broker_conf(
        tmp_path / "broker.conf",
        broker_keys(
            "broker-a", tmp_path / "store", ports, base, cluster=cluster, token=token, mappedFileSizeCommitLog=1 << 20, **keys
        ),
    )
    return ports, start_broker(conf, cluster)


def test_trace_shows_each_group_and_a_dlq_resend_reaches_the_topic_once(tmp_path):
    token = ApiToken.issue("trace-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('trace-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        ports, proc = single_broker(tmp_path, base, token, "trace", retryMaxTimes=MAX_TIMES)
        try:
            http, get, post = api(base, admin, "trace")
            wait_for(lambda: "broker-a" in _cluster(base, admin)["brokerAddrTable"], 30, "the broker registered")
            create_topic(base, admin, "Orders", 2, clusterName="trace")
            config = ClientConfiguration(f"127.0.0.1:{ports.grpc}", Credentials())
            wait_for(lambda: _sends(ports.grpc, "Orders"), 30, "the topic taking sends")
            [message_id] = send_with_keys(ports.grpc, "Orders", [(b"order 42 paid", ["order-42"])])

            consume(config, "shipping", "Orders", message_id, 1, ack_last=True)  # consumed at once
            consume(config, "billing", "Orders", message_id, 3, ack_last=True)  # redelivered twice, then acked
            consume(config, "audit", "Orders", message_id, MAX_TIMES + 1, ack_last=False)  # never acked: dead

            [view] = get("/messages", topic="Orders", uniqueKey=message_id)["messages"]

            def traced() -> dict:
                return get(f"/messages/{view['msgId']}/trace")["groups"]

            wait_for(lambda: traced().get("audit", {}).get("consumed") == "dead", 30, "the audit group's dead letter")
            groups = traced()
            shipping, billing, audit = groups["shipping"], groups["billing"], groups["audit"]
            assert shipping["consumed"] == "consumed" and len(shipping["deliveries"]) == 1
            assert shipping["deliveries"][0]["ackTimeMs"] is not None and shipping["dlq"] is None
            assert billing["consumed"] == "consumed"
            assert [d["attempt"] for d in billing["deliveries"]] == [1, 2, 3]
            assert [d["ackTimeMs"] is not None for d in billing["deliveries"]] == [False, False, True]
            assert len(billing["retry"]) == 2 and billing["dlq"] is None
            assert all(d["clientId"] for d in billing["deliveries"])
            assert audit["consumed"] == "dead" and len(audit["deliveries"]) == MAX_TIMES + 1
            assert audit["dlq"]["uniqKey"] == message_id
            assert not any(d["ackTimeMs"] for d in audit["deliveries"])

            dead = get("/dlq/audit")["messages"]
            assert [(m["uniqKey"], m["originTopic"]) for m in dead] == [(message_id, "Orders")]
            assert dead[0]["attempts"] == MAX_TIMES + 1
            request = {"msgIds": [dead[0]["msgId"]], "requestId": uuid.uuid4().hex}
            preview = post("/dlq/audit/resend", {**request, "dryRun": True})
            assert [r["originTopic"] for r in preview["resent"]] == ["Orders"]
            done = post("/dlq/audit/resend", request)
            again = post("/dlq/audit/resend", request)
            assert [r["already"] for r in done["resent"]] == [False]
            assert [r["already"] for r in again["resent"]] == [True]
            assert again["resent"][0]["newMsgId"] == done["resent"][0]["newMsgId"]
            export = http.get("/dlq/audit/export")
            assert export.status_code == 200 and export.text.count("\n") == 1 and message_id in export.text

            # The resent message reaches Orders once: the shipping group gets exactly one new message.
            consumer = SimpleConsumer(config, "shipping", {"Orders": FilterExpression()}, await_duration=1)
            consumer.startup()
            quiet_until = 0.0
            try:
                got: list = []
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not (got and time.monotonic() > quiet_until):
                    for m in consumer.receive(16, 30):
                        consumer.ack(m)
                        if m.body != b"warm-up":  # the warm-up send, if shipping had not received it yet
                            got.append(m)
                            quiet_until = time.monotonic() + 5  # and nothing more in the 5 s after it
                assert [(m.body, m.message_id != message_id) for m in got] == [(b"order 42 paid", True)]
            finally:
                consumer.shutdown()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def _cluster(base: str, admin: dict) -> dict:
    return httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()


def _sends(port: int, topic: str) -> bool:
    try:
        send_with_keys(port, topic, [(b"warm-up", [])])
        return True
    except Exception:
        return False


def test_connected_clients_are_listed_with_their_subscriptions_and_gone_after_they_close(tmp_path):
    with in_sync_group(tmp_path, "cc") as g, remoting_nameserver() as namesrv:
        http, get, _ = api(g.base, g.admin, "repl")
        config = ClientConfiguration(f"127.0.0.1:{g.master.grpc_port}", Credentials())
        py_consumer = SimpleConsumer(config, "py-group", {TOPIC: FilterExpression("order")}, await_duration=1)
        py_consumer.startup()
        node_out = tmp_path / "node.jsonl"
        node = node_client_process(
            "consume",
            "node-consumer",
            tmp_path,
            "--access",
            f"127.0.0.1:{g.master.grpc_port}",
            "--topic",
            TOPIC,
            "--group",
            "node-group",
            "--out",
            str(node_out),
        )
        node.start()
        try:
            with (
                remoting_client("cpp", "consume", "cpp-consumer", tmp_path, namesrv, TOPIC, "--group", "cpp-group"),
                remoting_client("node", "consume", "ons-consumer", tmp_path, namesrv, TOPIC, "--group", "ons-group"),
            ):

                def listed() -> dict[str, dict]:
                    return {c["group"]: c for c in get("/clients", topic=TOPIC)["consumers"]}

                groups = {"py-group", "node-group", "cpp-group", "ons-group"}
                wait_for(lambda: groups <= listed().keys(), 60, "every client listed")
                clients = listed()
                assert clients["py-group"]["language"] == "PYTHON" and clients["py-group"]["protocol"] == "grpc"
                assert clients["node-group"]["language"] == "NODE_JS" and clients["node-group"]["protocol"] == "grpc"
                assert clients["cpp-group"]["language"] == "CPP" and clients["cpp-group"]["protocol"] == "remoting"
                assert clients["ons-group"]["protocol"] == "remoting"
                assert {"topic": TOPIC, "expression": "order", "type": "TAG"} in clients["py-group"]["subscriptions"]
                for c in clients.values():
                    assert c["clientId"] and c["address"] and c["lastSeenMs"] > 0
            wait_for(lambda: not {"cpp-group", "ons-group"} & listed().keys(), 60, "the remoting clients gone")
        finally:
            node.stop()
            py_consumer.shutdown()
        wait_for(lambda: not groups & listed().keys(), 150, "every client gone")
