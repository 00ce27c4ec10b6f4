"""``get_broker_member_group`` on the broker websocket (docs/websocket.md, reference §3.7): the same
answer as ``GET /api/v1/nameserver/brokers/member-group``, following registrations and
unregistrations, and a cluster-bound token's binding checked as for every other frame."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from controlplane.models import ApiToken
from tests.nameserver.helpers import NS, register_body
from tests.nameserver.test_websocket import S1, S2, M, call, connected

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def frame(token: str, *frames: tuple[str, dict]) -> list[dict]:
    """The replies to ``frames`` sent in order on one socket."""

    async def scenario():
        ws = await connected(token)
        try:
            return [await call(ws, kind, payload, seq=seq) for seq, (kind, payload) in enumerate(frames, 1)]
        finally:
            await ws.disconnect()

    return async_to_sync(scenario)()


def member_group(token: str, payload: dict) -> dict:
    (reply,) = frame(token, ("get_broker_member_group", payload))
    return reply


def register(api, *args, **kw) -> None:
    """Over REST: a socket that closes unregisters its brokers at once."""
    resp = api.post(f"{NS}/brokers/register", register_body(*args, **kw), format="json")
    assert resp.status_code == 200 and resp.json()["code"] == 0, resp.content


def rest_member_group(api, query: dict) -> dict:
    resp = api.get(f"{NS}/brokers/member-group", query)
    assert resp.status_code == 200, resp.content
    return resp.json()


@pytest.mark.parametrize(
    "query",
    [
        pytest.param({"clusterName": "c1", "brokerName": "b1"}, id="its cluster"),
        pytest.param({"brokerName": "b1"}, id="no cluster"),
        pytest.param({"clusterName": "other", "brokerName": "b1"}, id="looked up by brokerName only"),
        pytest.param({"clusterName": "c1", "brokerName": "nobody"}, id="an unknown set has no members"),
        pytest.param({"brokerName": "nobody"}, id="an unknown set, no cluster"),
    ],
)
def test_the_frame_answers_as_rest_does(broker_token, api, query):
    register(api, 0, M)
    register(api, 1, S1)
    reply = member_group(broker_token, query)
    assert reply["type"] == "get_broker_member_group_result" and reply["seq"] == 1
    assert reply["payload"] == rest_member_group(api, query)
    if query["brokerName"] == "b1":
        assert reply["payload"] == {"cluster": "c1", "brokerName": "b1", "brokerAddrs": {"0": M, "1": S1}}
    else:
        assert reply["payload"]["brokerAddrs"] == {}


def test_the_answer_follows_registrations_and_unregistrations(broker_token):
    """Answers are cached per registry version: every change shows in the next answer."""
    ask = ("get_broker_member_group", {"clusterName": "c1", "brokerName": "b1"})
    replies = frame(
        broker_token,
        ("register", register_body(1, S1)),
        ask,
        ("register", register_body(0, M)),
        ("register", register_body(2, S2)),
        ask,
        ("unregister", {"clusterName": "c1", "brokerAddr": M, "brokerName": "b1"}),
        ask,
    )
    assert [replies[i]["payload"]["brokerAddrs"] for i in (1, 4, 6)] == [
        {"1": S1},
        {"0": M, "1": S1, "2": S2},
        {"1": S1, "2": S2},
    ]


@pytest.mark.parametrize(
    "payload, fields",
    [
        pytest.param({}, {"brokerName"}, id="brokerName required"),
        pytest.param({"brokerName": "b/1"}, {"brokerName"}, id="a name by the name rule"),
        pytest.param({"brokerName": "b1", "clusterName": "c 1"}, {"clusterName"}, id="clusterName by the name rule"),
    ],
)
def test_bad_payloads_get_29_and_the_socket_stays_open(broker_token, payload, fields):
    reply, pong = frame(broker_token, ("get_broker_member_group", payload), ("ping", {}))
    assert reply["type"] == "error" and reply["payload"]["code"] == 29, reply
    assert fields <= set(reply["payload"]["fields"])
    assert pong["type"] == "ping_result"


@pytest.mark.parametrize(
    "payload, refused",
    [
        pytest.param({"clusterName": "cA", "brokerName": "a1"}, False, id="its own cluster and set"),
        pytest.param({"brokerName": "a1"}, False, id="its own set, no cluster"),
        pytest.param({"brokerName": "a9"}, False, id="a set known nowhere"),
        pytest.param({"clusterName": "cB", "brokerName": "a1"}, True, id="another cluster named"),
        pytest.param({"brokerName": "b1"}, True, id="a set kept in another cluster"),
        pytest.param({"clusterName": "cA", "brokerName": "b1"}, True, id="another cluster's set, claiming its own"),
    ],
)
def test_a_cluster_bound_token_reads_only_its_clusters_groups(api, payload, refused):
    register(api, 0, M, cluster="cA", name="a1")
    register(api, 0, S2, cluster="cB", name="b1")
    bound = ApiToken.issue("bound-to-cA", "broker", "cA")[1]
    # Twice on one socket: a remembered set stays its own, another cluster's is refused every time.
    replies = frame(bound, ("get_broker_member_group", payload), ("get_broker_member_group", payload))
    for reply in replies:
        if refused:
            assert reply["type"] == "error" and reply["payload"]["code"] == 16, reply
            assert reply["payload"]["name"] == "NO_PERMISSION"
        else:
            assert reply["type"] == "get_broker_member_group_result", reply
            assert reply["payload"]["brokerAddrs"] == ({"0": M} if payload["brokerName"] == "a1" else {})
