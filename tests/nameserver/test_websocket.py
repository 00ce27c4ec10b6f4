"""The broker websocket through Channels with the real Redis channel layer and real Postgres."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.asgi import application
from mqrules.codes import CLOSE_BROKER_RECONNECTING
from nameserver import liveness
from nameserver.models import BrokerMember
from nameserver.settings_store import update_config

from .helpers import register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ORIGIN = (b"origin", b"http://127.0.0.1")
M, S1, S2 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"


def communicator(token: str | None, *, origin: bool = True, query: str = "") -> WebsocketCommunicator:
    headers = [ORIGIN] if origin else []
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return WebsocketCommunicator(application, "/ws/broker/" + query, headers=headers)


async def call(ws: WebsocketCommunicator, kind: str, payload=None, seq: int = 1) -> dict:
    await ws.send_to(text_data=json.dumps({"type": kind, "seq": seq, "payload": payload or {}}))
    return await ws.receive_json_from(timeout=10)


async def connected(token: str) -> WebsocketCommunicator:
    ws = communicator(token)
    ok, _ = await ws.connect(timeout=10)
    assert ok
    return ws


def run(coro_fn):
    return async_to_sync(coro_fn)()


# --- handshake -----------------------------------------------------------------------------------


@pytest.mark.parametrize("token_kind", ["none", "unknown", "read"])
def test_handshake_without_a_broker_token_is_refused(token_kind, read_token):
    token = {"none": None, "unknown": "rmq_nope", "read": read_token}[token_kind]

    async def scenario():
        ok, code = await communicator(token).connect(timeout=10)
        assert not ok

    run(scenario)


def test_handshake_without_origin_is_refused(broker_token):
    async def scenario():
        ok, _ = await communicator(broker_token, origin=False).connect(timeout=10)
        assert not ok

    run(scenario)


def test_token_in_the_query_string_is_accepted(broker_token):
    async def scenario():
        ws = communicator(None, query=f"?token={broker_token}")
        ok, _ = await ws.connect(timeout=10)
        assert ok
        assert (await call(ws, "ping"))["type"] == "ping_result"
        await ws.disconnect()

    run(scenario)


# --- frames --------------------------------------------------------------------------------------


def test_register_then_heartbeat_over_the_socket(broker_token):
    async def scenario():
        ws = await connected(broker_token)
        reply = await call(ws, "register", register_body(0, M), seq=7)
        assert reply == {
            "type": "register_result",
            "seq": 7,
            "payload": {
                "code": 0,
                "name": "SUCCESS",
                "masterAddr": None,
                "haServerAddr": None,
                "isolated": False,
                "staticTopics": [],
                "acl": {"version": 0, "users": [], "policies": []},
            },
        }
        reply = await call(ws, "heartbeat", {"clusterName": "c1", "brokerAddr": M, "brokerName": "b1"}, seq=8)
        assert reply == {"type": "heartbeat_result", "seq": 8, "payload": {"registered": True}}
        reply = await call(ws, "heartbeat", {"clusterName": "c1", "brokerAddr": S1}, seq=9)
        assert reply["payload"] == {"registered": False}
        await ws.disconnect()

    run(scenario)


@pytest.mark.parametrize(
    "raw, code, fields",
    [
        ("{not json", 29, None),
        ("[1, 2]", 29, None),
        (json.dumps({"type": "teleport", "seq": 3}), 3, None),
        (json.dumps({"type": "heartbeat", "seq": 3, "payload": {"brokerAddr": "x"}}), 29, {"clusterName", "brokerAddr"}),
        (json.dumps({"type": "heartbeat", "seq": 3, "payload": "nope"}), 29, None),
        (json.dumps({"type": "register", "seq": 3, "payload": {"brokerId": -5}}), 29, {"brokerId", "clusterName"}),
    ],
)
def test_bad_frames_get_an_error_frame_and_the_socket_stays_open(broker_token, raw, code, fields):
    async def scenario():
        ws = await connected(broker_token)
        await ws.send_to(text_data=raw)
        reply = await ws.receive_json_from(timeout=10)
        assert reply["type"] == "error" and reply["payload"]["code"] == code
        if fields:
            assert fields <= set(reply["payload"]["fields"])
        assert (await call(ws, "ping", seq=4)) == {"type": "ping_result", "seq": 4, "payload": {}}
        await ws.disconnect()

    run(scenario)


def test_a_stale_master_registering_over_the_socket_gets_2000(broker_token):
    async def scenario():
        ws = await connected(broker_token)
        assert (await call(ws, "register", register_body(0, M, state=3)))["payload"]["code"] == 0
        other = await connected(broker_token)
        reply = await call(other, "register", register_body(0, S1, state=2))
        assert reply["type"] == "error" and reply["payload"]["code"] == 2000
        await ws.disconnect()
        await other.disconnect()

    run(scenario)


# --- pushes and close ----------------------------------------------------------------------------


def test_min_broker_id_change_is_pushed_to_the_sets_brokers(broker_token):
    update_config({"notifyMinBrokerIdChanged": True})

    async def scenario():
        s1, s2, m = await connected(broker_token), await connected(broker_token), await connected(broker_token)
        await call(s1, "register", register_body(1, S1))
        await call(s2, "register", register_body(2, S2))
        assert await s1.receive_nothing(timeout=0.3)  # no change of minimum yet
        reply = await call(m, "register", register_body(0, M))
        assert reply["payload"]["code"] == 0
        expected = {
            "minBrokerId": 0,
            "brokerName": "b1",
            "minBrokerAddr": M,
            "offlineBrokerAddr": None,
            "haBrokerAddr": "127.0.0.1:10912",
        }
        for ws in (s1, s2):
            push = await ws.receive_json_from(timeout=10)
            assert push["type"] == "notify_min_broker_id_change" and push["payload"] == expected
            assert isinstance(push["seq"], int)
        assert await m.receive_nothing(timeout=0.3)  # the new minimum is not told of itself

        # The master's socket closes: it is unregistered at once and the survivors hear of it.
        await m.disconnect()
        for ws in (s1, s2):
            push = await ws.receive_json_from(timeout=10)
            assert push["payload"]["offlineBrokerAddr"] == M and push["payload"]["minBrokerId"] == 1
        addrs = await sync_to_async(lambda: sorted(BrokerMember.objects.values_list("broker_addr", flat=True)))()
        assert addrs == [S1, S2]
        await s1.disconnect()
        await s2.disconnect()

    run(scenario)


def test_closing_the_socket_unregisters_the_broker_at_once(broker_token):
    async def scenario():
        ws = await connected(broker_token)
        await call(ws, "register", register_body(0, M))
        assert await sync_to_async(BrokerMember.objects.filter(broker_addr=M).exists)()
        await ws.disconnect()

    run(scenario)
    assert not BrokerMember.objects.filter(broker_addr=M).exists()
    assert liveness.last_heartbeats([liveness.member("c1", M)])[liveness.member("c1", M)] is None


@pytest.mark.parametrize("code", [1012, CLOSE_BROKER_RECONNECTING])
def test_a_socket_closed_by_the_servers_own_shutdown_or_a_link_reset_leaves_the_broker_registered(broker_token, code):
    # uvicorn closes every socket with 1012 (service restart) when it stops, and a broker whose call
    # timed out resets its link with 4000: the broker is not gone, it reconnects; liveness judges it.
    async def scenario():
        ws = await connected(broker_token)
        await call(ws, "register", register_body(0, M))
        await ws.disconnect(code=code)

    run(scenario)
    assert BrokerMember.objects.filter(broker_addr=M).exists()


def test_a_socket_closing_while_the_nameserver_cannot_hear_most_brokers_is_left_to_expiry(broker_token, api):
    for i, addr in ((1, S1), (2, S2), (3, "127.0.0.1:10941")):
        assert api.post("/api/v1/nameserver/brokers/register", register_body(i, addr), format="json").status_code == 200
        liveness.heartbeat([liveness.member("c1", addr)], now_ms=liveness.HEARING.view().now - 60_000)  # unheard for 60 s

    async def scenario():
        ws = await connected(broker_token)
        await call(ws, "register", register_body(0, M))
        assert (await sync_to_async(liveness.hearing)()).blind_now  # one of four heard: blind
        await ws.disconnect()

    run(scenario)
    assert set(BrokerMember.objects.values_list("broker_addr", flat=True)) == {M, S1, S2, "127.0.0.1:10941"}


def test_an_old_socket_closing_after_a_reconnect_does_not_unregister(broker_token):
    async def scenario():
        old = await connected(broker_token)
        await call(old, "register", register_body(0, M))
        new = await connected(broker_token)
        assert (await call(new, "heartbeat", {"clusterName": "c1", "brokerAddr": M}))["payload"]["registered"]
        await old.disconnect()
        assert (await call(new, "heartbeat", {"clusterName": "c1", "brokerAddr": M}))["payload"]["registered"]
        await new.disconnect()

    run(scenario)
    assert not BrokerMember.objects.filter(broker_addr=M).exists()  # the last socket closed


def test_explicit_unregister_frame(broker_token):
    async def scenario():
        ws = await connected(broker_token)
        await call(ws, "register", register_body(0, M))
        assert (await call(ws, "unregister", {"clusterName": "c1", "brokerAddr": M}))["payload"] == {"unregistered": True}
        await ws.disconnect()

    run(scenario)
    assert not BrokerMember.objects.exists()


def test_topic_created_through_the_api_is_pushed_to_the_sets_brokers(broker_token, api):
    async def scenario():
        ws = await connected(broker_token)
        await call(ws, "register", register_body(0, M))
        r = await sync_to_async(api.post)(
            "/api/v1/nameserver/topics",
            {"topicName": "Orders", "clusterName": "c1", "perm": 6, "attributes": {"+message.type": "DELAY"}},
            format="json",
        )
        assert r.status_code == 200
        push = await ws.receive_json_from(timeout=10)
        assert push["type"] == "update_topic" and push["payload"]["topicName"] == "Orders"
        assert push["payload"]["attributes"] == {"message.type": "DELAY"}  # the whole set the broker stores
        await ws.disconnect()

    run(scenario)
