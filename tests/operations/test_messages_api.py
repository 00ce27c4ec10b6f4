"""The control plane's side of finding messages (docs/messages.md §5), over real sockets (uvicorn, Redis,
Postgres): bad input is a 400 at its field before any broker is asked; a query goes to every broker set
of the topic and the answers are merged; an offset id goes to the set that stored it; a broker's "not
there" is a 404 with 17; a silent or unconnected set is a 503; a dead-letter resend is previewed (a gone
message refuses it whole, nothing recorded), then recorded before the brokers are asked and completed
after; the clients of the brokers' reports are listed. The brokers here are websocket clients that speak
the frames (tests/operations/test_broker_admin.py's ``Answering``); real brokers answer the same
requests in tests/e2e/test_message_query.py."""

from __future__ import annotations

import time
from contextlib import ExitStack

import httpx
import pytest

from controlplane.models import ApiToken, OperatorAction
from mqrules.remoting.message_id import encode_offset_message_id
from tests.dashboards.admin_helpers import client_for
from tests.nameserver.helpers import register_body
from tests.operations.test_broker_admin import Answering
from tests.procs import uvicorn_server
from tests.wsclient import BrokerSocket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CLUSTER = "msgc"
SETS = {"msg-a": "127.0.0.1:31911", "msg-b": "127.0.0.1:32911"}
NOW = int(time.time() * 1000)


def view(broker: str, offset: int, stored: int, **extra) -> dict:
    host, port = SETS[broker].split(":")
    return {
        "msgId": encode_offset_message_id(host, int(port), offset),
        "uniqKey": f"U{broker}{offset}",
        "topic": "Orders",
        "tags": "paid",
        "keys": ["order-1"],
        "queueId": 0,
        "queueOffset": offset // 100,
        "commitLogOffset": offset,
        "storeHost": SETS[broker],
        "bornHost": "127.0.0.1:5000",
        "bornTimestamp": stored - 1,
        "storeTimestamp": stored,
        "reconsumeTimes": 0,
        "bodySize": 13,
        "bodyCrc": 1,
        "properties": {"KEYS": "order-1"},
        "messageType": "NORMAL",
        "deliveryTimestamp": None,
        "transactionState": None,
        "brokerName": broker,
        "brokerId": 0,
        "brokerAddr": SETS[broker],
        **extra,
    }


def answers_of(broker: str):
    """What the set's master answers: two messages by key, one record at 100, a DLQ of one at 500."""

    def answer(kind: str, payload: dict) -> dict | None:
        if kind == "query_message":
            first = broker == "msg-a"
            found = [view(broker, 100, NOW - (10 if first else 15)), view(broker, 200, NOW - (5 if first else 20))]
            return {"ok": True, "result": {"messages": found, "truncated": False}}
        if kind == "view_message":
            if payload["commitLogOffset"] != 100:
                return {"ok": False, "error": {"code": 17, "name": "TOPIC_NOT_EXIST", "detail": "no message there"}}
            return {"ok": True, "result": {**view(broker, 100, NOW), "body": "b3JkZXIgNDIgcGFpZA==", "bodyTruncated": False}}
        if kind == "dlq_resend":
            resent = [
                {
                    "commitLogOffset": o,
                    "originTopic": "Orders",
                    "newMsgId": None if payload["preview"] else "N1",
                    "newUniqKey": None,
                    "already": False,
                }
                for o in payload["commitLogOffsets"]
                if o == 500
            ]
            missing = [o for o in payload["commitLogOffsets"] if o != 500]
            return {"ok": True, "result": {"resent": resent, "missing": missing}}
        return None

    return answer


@pytest.fixture
def plane():
    token = ApiToken.issue("msg-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('msg-admin', 'admin')[1]}"}
    reader = {"Authorization": f"Bearer {ApiToken.issue('msg-reader', 'read')[1]}"}
    topics = {t: {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6} for t in ("Orders", "Audit")}
    with uvicorn_server(BROKER_RPC_TIMEOUT_SECONDS="2") as base, ExitStack() as stack:
        socks = {}
        for name, addr in SETS.items():
            sock = socks[name] = BrokerSocket(stack, base, token)
            reply = sock.call("register", register_body(0, addr, cluster=CLUSTER, name=name, topics=topics, timeout=60_000))
            assert reply["type"] == "register_result", reply
        api = httpx.Client(base_url=f"{base}/api/v1/clusters/{CLUSTER}", timeout=20)
        yield api, socks, admin, reader


BAD = {
    "a key over 255": ("/messages", {"topic": "Orders", "key": "k" * 256}, "key"),
    "a key with a space": ("/messages", {"topic": "Orders", "key": "a b"}, "key"),
    "key and unique key": ("/messages", {"topic": "Orders", "key": "a", "uniqueKey": "b"}, "uniqueKey"),
    "a range over 7 days": ("/messages", {"topic": "Orders", "key": "a", "begin": 0, "end": 8 * 86_400_000}, "end"),
    "max over the cap": ("/messages", {"topic": "Orders", "key": "a", "max": 1001}, "max"),
    "max as text": ("/messages", {"topic": "Orders", "max": "ten"}, "max"),
    "no topic": ("/messages", {"key": "a"}, "topic"),
    "an id that does not decode": ("/messages/not-an-id", {}, "msgId"),
    "an id with a port beyond 65535": ("/messages/7F000001FFFFFFFF0000000000000000", {}, "msgId"),
    "a trace of an id that does not decode": ("/messages/XYZ/trace", {}, "msgId"),
    "by offset without a broker": ("/messages/by-offset", {"commitLogOffset": 5}, "brokerName"),
    "by a negative offset": ("/messages/by-offset", {"brokerName": "msg-a", "commitLogOffset": -1}, "commitLogOffset"),
    "a DLQ page over 500": ("/dlq/g1", {"limit": 501}, "limit"),
    "a DLQ group not a name": ("/dlq/g%001", {}, "group"),
    "clients of a bad topic": ("/clients", {"topic": "a/b"}, "topic"),
}


@pytest.mark.parametrize("path, params, field", BAD.values(), ids=BAD.keys())
def test_bad_input_is_a_400_at_its_field_and_no_broker_is_asked(plane, path, params, field):
    api, socks, _, reader = plane
    asked = [Answering(s, answers_of(n)) for n, s in socks.items()]
    try:
        r = api.get(path, params=params, headers=reader)
        assert r.status_code == 400, r.text
        assert r.json()["code"] == 29 and field in r.json()["fields"], r.json()
        assert not any(a.asked for a in asked)
    finally:
        for a in asked:
            a.close()


def test_queries_reach_every_set_and_come_back_merged_and_refusals_and_silence_are_told(plane):
    api, socks, _, reader = plane
    a, b = (Answering(socks[n], answers_of(n)) for n in SETS)
    try:
        found = api.get("/messages", params={"topic": "Orders", "key": "order-1", "max": 3}, headers=reader)
        assert found.status_code == 200, found.text
        assert [(m["brokerName"], m["commitLogOffset"]) for m in found.json()["messages"]] == [
            ("msg-a", 200),
            ("msg-a", 100),
            ("msg-b", 100),
        ]
        assert found.json()["truncated"] is True
        (kind, payload), *_ = a.asked
        assert kind == "query_message" and payload["by"] == "key" and payload["key"] == "order-1" and payload["maxNum"] == 3
        assert payload["endMs"] - payload["beginMs"] == 7 * 86_400_000

        # An offset id names the set that stored it: only that one is asked; the body is previewed as text.
        asked_before = len(a.asked)
        one = api.get(f"/messages/{view('msg-b', 100, NOW)['msgId']}", headers=reader)
        assert one.status_code == 200, one.text
        assert one.json()["brokerName"] == "msg-b"
        assert one.json()["body"] == {"format": "text", "text": "order 42 paid", "size": 13, "truncated": False}
        assert len(a.asked) == asked_before and b.asked[-1][0] == "view_message"
        body = api.get(f"/messages/{view('msg-b', 100, NOW)['msgId']}/body", headers=reader)
        assert body.status_code == 200 and body.content == b"order 42 paid"
        assert body.headers["content-type"] == "application/octet-stream"
        assert b.asked[-1][1]["bodyBytes"] == 4 * 1024 * 1024

        gone = api.get(f"/messages/{view('msg-a', 900, NOW)['msgId']}", headers=reader)
        assert gone.status_code == 404 and gone.json()["code"] == 17, gone.text
        by_offset = api.get("/messages/by-offset", params={"brokerName": "msg-a", "commitLogOffset": 100}, headers=reader)
        assert by_offset.status_code == 200 and by_offset.json()["commitLogOffset"] == 100
        unknown = api.get("/messages/by-offset", params={"brokerName": "nope", "commitLogOffset": 100}, headers=reader)
        assert unknown.status_code == 404 and unknown.json()["code"] == 211
        no_topic = api.get("/messages", params={"topic": "Nowhere", "key": "k"}, headers=reader)
        assert no_topic.status_code == 404 and no_topic.json()["code"] == 17
    finally:
        a.close()
        b.close()

    # One set silent: the other's answer, with the silent one named; every set silent: 503 (14).
    a = Answering(socks["msg-a"], answers_of("msg-a"))
    silent = Answering(socks["msg-b"], lambda kind, payload: None)
    try:
        part = api.get("/messages", params={"topic": "Orders", "key": "order-1"}, headers=reader)
        assert part.status_code == 200 and [f["brokerName"] for f in part.json()["failed"]] == ["msg-b"], part.text
        started = time.monotonic()
        none = api.get(f"/messages/{view('msg-b', 100, NOW)['msgId']}", headers=reader)
        assert none.status_code == 503 and none.json()["code"] == 14 and "did not answer" in none.json()["detail"]
        assert time.monotonic() - started < 10
    finally:
        a.close()
        silent.close()


def test_a_resend_is_previewed_refused_whole_when_a_message_is_gone_and_audited_when_done(plane):
    api, socks, admin, reader = plane
    a = Answering(socks["msg-a"], answers_of("msg-a"))
    try:
        dead, gone = view("msg-a", 500, NOW)["msgId"], view("msg-a", 600, NOW)["msgId"]
        request = {"msgIds": [dead], "requestId": "ab" * 16}
        assert api.post("/dlq/g1/resend", json=request, headers=reader).status_code == 403

        refused = api.post("/dlq/g1/resend", json={**request, "msgIds": [dead, gone]}, headers=admin)
        assert refused.status_code == 404 and refused.json()["code"] == 17 and refused.json()["fields"]["msgIds"] == [gone]
        bad = api.post("/dlq/g1/resend", json={**request, "msgIds": ["zz"]}, headers=admin)
        assert bad.status_code == 400 and "msgIds" in bad.json()["fields"]
        both = api.post("/dlq/g1/resend", json={**request, "all": True}, headers=admin)
        assert both.status_code == 400
        preview = api.post("/dlq/g1/resend", json={**request, "dryRun": True}, headers=admin)
        assert preview.status_code == 200 and preview.json()["dryRun"] and not preview.json()["applied"]
        assert not OperatorAction.objects.filter(action="dlq_resend").exists()

        done = api.post("/dlq/g1/resend", json=request, headers=admin)
        assert done.status_code == 200 and done.json()["applied"], done.text
        assert [(r["msgId"], r["newMsgId"]) for r in done.json()["resent"]] == [(dead, "N1")]
        sent = [p for kind, p in a.asked if kind == "dlq_resend"]
        assert [(p["preview"], p["resendId"], p["commitLogOffsets"]) for p in sent[-2:]] == [
            (True, "ab" * 16, [500]),
            (False, "ab" * 16, [500]),
        ]
        (record,) = OperatorAction.objects.filter(action="dlq_resend")
        assert record.result == "ok" and record.actor == "token:msg-admin" and record.cluster_name == CLUSTER
        assert record.params == {"group": "g1", "requestId": "ab" * 16, "msgIds": [dead]}
        assert record.after["resent"] == [["msg-a", 500, "N1", False]]
    finally:
        a.close()

    # The master gone silent after the preview would have been answered: 503, nothing recorded as done.
    silent = Answering(socks["msg-a"], lambda kind, payload: None)
    try:
        r = api.post("/dlq/g1/resend", json={"msgIds": [dead]}, headers=admin)
        assert r.status_code == 503 and r.json()["code"] == 14
        assert OperatorAction.objects.filter(action="dlq_resend").count() == 1
    finally:
        silent.close()


def test_connected_clients_come_from_the_brokers_reports(plane):
    api, socks, _, reader = plane
    consumer = {
        "clientId": "c-1",
        "language": "PYTHON",
        "version": "5.0.1",
        "address": "127.0.0.1:50000",
        "protocol": "grpc",
        "lastSeenMs": NOW,
        "producerGroups": [],
        "consumerGroups": ["g1"],
        "topics": ["Orders"],
        "subscriptions": {"g1": [{"topic": "Orders", "expression": "paid", "type": "TAG"}]},
        "queues": {"g1": [["Orders", 0]]},
    }
    for name, addr in SETS.items():
        report = {
            "clusterName": CLUSTER,
            "brokerName": name,
            "brokerId": 0,
            "brokerAddr": addr,
            "status": {"metaMode": "WRITER"},
            "config": {},
            "dynamicKeys": [],
            "queues": [],
            "offsets": [],
            "clients": [consumer],
        }
        assert socks[name].call("broker_status", report)["type"] == "broker_status_result"
    bad = socks["msg-a"].call("broker_status", {**report, "clients": [{**consumer, "protocol": "mqtt"}]})
    assert bad["type"] == "error" and "clients" in bad["payload"]["fields"]

    listed = api.get("/clients", params={"topic": "Orders"}, headers=reader)
    assert listed.status_code == 200, listed.text
    (row,) = listed.json()["consumers"]
    assert (row["group"], row["clientId"], row["brokerNames"]) == ("g1", "c-1", ["msg-a", "msg-b"])
    assert row["subscriptions"] == [{"topic": "Orders", "expression": "paid", "type": "TAG"}]
    assert row["queues"] == [["msg-a", "Orders", 0], ["msg-b", "Orders", 0]]
    assert api.get("/clients", params={"group": "other"}, headers=reader).json() == {"producers": [], "consumers": []}


def test_the_pages_show_clients_and_refusals_without_a_500(plane):
    """The dashboard's pages (dashboards/messages_pages.py) read through the same services: a refused search
    shows its field, a viewer sees no resend button, the Clients page lists the reported clients."""
    _, socks, _, _ = plane
    test_connected_clients_come_from_the_brokers_reports(plane)
    viewer = client_for("msg-viewer", operator=False)
    page = viewer.get("/clients/", {"cluster": CLUSTER, "topic": "Orders"})
    assert page.status_code == 200 and b'data-group="g1"' in page.content and b"c-1" in page.content
    refused = viewer.get("/messages/", {"cluster": CLUSTER, "topic": "Orders", "key": "a b"})
    assert refused.status_code == 200 and b"refused (HTTP 400)" in refused.content and b"key:" in refused.content
    a = Answering(socks["msg-a"], answers_of("msg-a"))
    try:
        dead = viewer.get("/dead-letters/", {"cluster": CLUSTER, "group": "g1"})
        assert dead.status_code == 200 and b"dead-letters" in dead.content and b"preview-button" not in dead.content
    finally:
        a.close()
    assert viewer.get("/messages/", {"cluster": "nope"}).status_code == 404
