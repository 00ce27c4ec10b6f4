"""Replication water levels: sent with a heartbeat (websocket or REST), kept in Redis, served by
GET /api/v1/nameserver/water-levels. Real Postgres, Redis and Channels layer."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from rest_framework.test import APIClient

from controlplane.models import ApiToken
from controlplane.redis import sync_client
from nameserver import water_levels

from .helpers import NS, register_body
from .test_websocket import call, connected, run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

M, S1, S2 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"
URL = f"{NS}/water-levels"

SLAVE_1 = {
    "brokerId": 1,
    "addr": S1,
    "ackOffset": 10_400_000,
    "lagBytes": 85_760,
    "lastCaughtUpMs": 1_700_000_000_123,
    "transferBytesPerS": 1_048_576.5,
    "inSyncStateSet": True,
}
SLAVE_2 = {
    "brokerId": 2,
    "addr": S2,
    "ackOffset": 0,
    "lagBytes": 10_485_760,
    "lastCaughtUpMs": 0,
    "transferBytesPerS": 0,
    "inSyncStateSet": False,
}
MASTER_LEVELS = {
    "brokerName": "b1",
    "brokerId": 0,
    "role": "SYNC_MASTER",
    "masterEpoch": 3,
    "maxOffset": 2**62 + 1,  # beyond a double's precision: must come back exact
    "confirmOffset": 10_400_000,
    "minOffset": 0,
    "slaves": [SLAVE_1, SLAVE_2],
}
SLAVE_LEVELS = {
    "brokerName": "b1",
    "brokerId": 1,
    "role": "SLAVE",
    "masterEpoch": 3,
    "maxOffset": 10_400_000,
    "confirmOffset": 10_400_000,
    "minOffset": 0,
}  # no "slaves": served as []


def client(token: str | None) -> APIClient:
    c = APIClient()
    if token:
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return c


def served(token: str, **query) -> list[dict]:
    r = client(token).get(URL, query)
    assert r.status_code == 200, r.content
    return r.json()["waterLevels"]


def redis_now_ms() -> int:
    seconds, micros = sync_client().time()
    return seconds * 1000 + micros // 1000


def beat(addr: str, levels, *, name: str = "b1", cluster: str = "c1") -> dict:
    return {"clusterName": cluster, "brokerAddr": addr, "brokerName": name, "waterLevels": levels}


def as_served(levels: dict, addr: str, reported_at: int, cluster: str = "c1") -> dict:
    return {"slaves": [], **levels, "clusterName": cluster, "brokerAddr": addr, "reportedAtMs": reported_at}


def report(name: str, broker_id: int, addr: str, cluster: str = "c1") -> water_levels.WaterLevelReport:
    levels = {**SLAVE_LEVELS, "brokerName": name, "brokerId": broker_id, "role": "MASTER" if broker_id == 0 else "SLAVE"}
    return water_levels.WaterLevelReport(cluster, addr, {**levels, "slaves": []})


def stored_keys() -> list[str]:
    from django.conf import settings

    return list(sync_client().scan_iter(settings.REDIS_KEY_PREFIX + "ns:wl*"))


# --- the websocket heartbeat ---------------------------------------------------------------------


def test_water_levels_sent_over_the_socket_are_served_exactly_as_sent(broker_token, read_token):
    before = redis_now_ms()

    async def scenario():
        master, slave = await connected(broker_token), await connected(broker_token)
        assert (await call(master, "register", register_body(0, M)))["payload"]["code"] == 0
        assert (await call(slave, "register", register_body(1, S1)))["payload"]["code"] == 0
        reply = await call(master, "heartbeat", beat(M, MASTER_LEVELS), seq=2)
        assert reply == {"type": "heartbeat_result", "seq": 2, "payload": {"registered": True}}
        reply = await call(slave, "heartbeat", beat(S1, SLAVE_LEVELS), seq=2)
        assert reply == {"type": "heartbeat_result", "seq": 2, "payload": {"registered": True}}
        await master.disconnect()
        await slave.disconnect()

    run(scenario)
    after = redis_now_ms()
    levels = served(read_token, clusterName="c1")
    stamps = [r["reportedAtMs"] for r in levels]
    assert all(before <= t <= after for t in stamps)
    assert levels == [as_served(MASTER_LEVELS, M, stamps[0]), as_served(SLAVE_LEVELS, S1, stamps[1])]
    assert json.loads(client(read_token).get(URL, {"clusterName": "c1"}).content)["waterLevels"][0]["maxOffset"] == 2**62 + 1


def _announced_and_pushed(send_heartbeat) -> None:
    """A dashboard page subscribed to b1, then ``send_heartbeat()`` (async) sends MASTER_LEVELS: the
    nameserver announces them once (nameserver.signals) and the dashboard pushes them to the page."""
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth.models import User

    from dashboards.live import DashboardConsumer
    from nameserver.signals import water_levels_reported

    viewer = User.objects.create_user("watcher", password="x" * 12)
    heard: list[list[dict]] = []

    async def listener(sender, reports, **kwargs):
        heard.append(reports)

    water_levels_reported.connect(listener)
    try:

        async def scenario():
            page = WebsocketCommunicator(DashboardConsumer.as_asgi(), "/ws/dashboard/")
            page.scope["user"] = viewer
            assert (await page.connect())[0]
            await page.send_to(text_data=json.dumps({"subscribe": "b1"}))
            assert json.loads(await page.receive_from(timeout=5))["type"] == "subscribed"
            done = await send_heartbeat()
            update = json.loads(await page.receive_from(timeout=5))
            await done()
            await page.disconnect()
            return update

        update = run(scenario)
    finally:
        water_levels_reported.disconnect(listener)
    ((announced,),) = heard
    assert announced == {**MASTER_LEVELS, "clusterName": "c1", "brokerAddr": M, "reportedAtMs": announced["reportedAtMs"]}
    assert (update["kind"], update["brokerName"], update["data"]["reports"]) == ("water_levels", "b1", [announced])


def test_water_levels_from_the_socket_are_announced_and_reach_a_dashboard_page(broker_token):
    async def over_the_socket():
        master = await connected(broker_token)
        await call(master, "register", register_body(0, M))
        assert (await call(master, "heartbeat", beat(M, MASTER_LEVELS)))["payload"] == {"registered": True}
        return master.disconnect

    _announced_and_pushed(over_the_socket)


def test_a_heartbeat_without_water_levels_answers_as_before_and_stores_none(broker_token, read_token):
    async def scenario():
        ws = await connected(broker_token)
        await call(ws, "register", register_body(0, M))
        for levels in ({}, {"waterLevels": None}):
            reply = await call(ws, "heartbeat", {"clusterName": "c1", "brokerAddr": M, **levels}, seq=5)
            assert reply == {"type": "heartbeat_result", "seq": 5, "payload": {"registered": True}}
        await ws.disconnect()

    run(scenario)
    assert served(read_token, clusterName="c1") == [] and stored_keys() == []


def test_concurrent_heartbeats_from_many_sockets_are_all_stored(broker_token, read_token):
    addrs = [f"127.0.0.1:{11000 + 10 * i}" for i in range(20)]

    async def scenario():
        sockets = [await connected(broker_token) for _ in addrs]
        for i, (ws, addr) in enumerate(zip(sockets, addrs, strict=True)):  # all in flight before any reply
            levels = {**SLAVE_LEVELS, "brokerName": f"b{i:02d}", "brokerId": 0, "role": "MASTER", "maxOffset": i}
            await ws.send_to(
                text_data=json.dumps({"type": "heartbeat", "seq": 1, "payload": beat(addr, levels, name=f"b{i:02d}")})
            )
        replies = await asyncio.gather(*(ws.receive_json_from(timeout=10) for ws in sockets))
        assert {r["type"] for r in replies} == {"heartbeat_result"}
        for ws in sockets:
            await ws.disconnect()

    run(scenario)
    levels = served(read_token, clusterName="c1")
    assert [(r["brokerName"], r["brokerAddr"], r["maxOffset"]) for r in levels] == [
        (f"b{i:02d}", addr, i) for i, addr in enumerate(addrs)
    ]


def without(field: str) -> dict:
    return {k: v for k, v in MASTER_LEVELS.items() if k != field}


def with_slave(**patch) -> dict:
    return {**MASTER_LEVELS, "slaves": [{**SLAVE_1, **patch}]}


# (waterLevels sent, path of the expected error inside fields["waterLevels"])
INVALID = {
    "not an object": ("high", ()),
    "a list": ([MASTER_LEVELS], ()),
    "unknown role": ({**MASTER_LEVELS, "role": "LEADER"}, ("role",)),
    "role missing": (without("role"), ("role",)),
    "maxOffset missing": (without("maxOffset"), ("maxOffset",)),
    "masterEpoch below -1": ({**MASTER_LEVELS, "masterEpoch": -2}, ("masterEpoch",)),
    "negative maxOffset": ({**MASTER_LEVELS, "maxOffset": -1}, ("maxOffset",)),
    "offset beyond int64": ({**MASTER_LEVELS, "maxOffset": 2**63}, ("maxOffset",)),
    "offset as a string": ({**MASTER_LEVELS, "confirmOffset": "12"}, ("confirmOffset",)),
    "offset as a boolean": ({**MASTER_LEVELS, "minOffset": True}, ("minOffset",)),
    "fractional brokerId": ({**MASTER_LEVELS, "brokerId": 1.5}, ("brokerId",)),
    "bad brokerName": ({**MASTER_LEVELS, "brokerName": "bad/name"}, ("brokerName",)),
    "brokerName differs from the heartbeat's": ({**MASTER_LEVELS, "brokerName": "b2"}, ("brokerName",)),
    "slaves not a list": ({**MASTER_LEVELS, "slaves": "none"}, ("slaves",)),
    "65 slaves": ({**MASTER_LEVELS, "slaves": [{**SLAVE_1, "brokerId": i + 1} for i in range(65)]}, ("slaves",)),
    "a slave reporting slaves": ({**SLAVE_LEVELS, "slaves": [SLAVE_1]}, ("slaves",)),
    "one slave id twice": ({**MASTER_LEVELS, "slaves": [SLAVE_1, SLAVE_1]}, ("slaves",)),
    "slave not an object": ({**MASTER_LEVELS, "slaves": [7]}, ("slaves", "0")),
    "slave addr without port": (with_slave(addr="nope"), ("slaves", "0", "addr")),
    "negative lagBytes": (with_slave(lagBytes=-1), ("slaves", "0", "lagBytes")),
    "negative ackOffset": (with_slave(ackOffset=-5), ("slaves", "0", "ackOffset")),
    "negative lastCaughtUpMs": (with_slave(lastCaughtUpMs=-1), ("slaves", "0", "lastCaughtUpMs")),
    "rate as a string": (with_slave(transferBytesPerS="fast"), ("slaves", "0", "transferBytesPerS")),
    "negative rate": (with_slave(transferBytesPerS=-0.5), ("slaves", "0", "transferBytesPerS")),
    "inSyncStateSet as a string": (with_slave(inSyncStateSet="yes"), ("slaves", "0", "inSyncStateSet")),
    "slave field missing": ({**MASTER_LEVELS, "slaves": [{"brokerId": 1}]}, ("slaves", "0", "addr")),
}


def assert_field_error(fields: dict, path: tuple[str, ...]) -> None:
    error = fields["waterLevels"]
    for step in path:
        assert step in error, (path, fields)
        error = error[step]
    assert error, (path, fields)


@pytest.mark.parametrize("levels, path", INVALID.values(), ids=INVALID.keys())
def test_invalid_water_levels_over_the_socket_get_an_error_frame_and_nothing_is_stored(broker_token, levels, path):
    async def scenario():
        ws = await connected(broker_token)
        await call(ws, "register", register_body(0, M))
        reply = await call(ws, "heartbeat", beat(M, levels), seq=3)
        assert reply["type"] == "error" and reply["seq"] == 3
        assert reply["payload"]["code"] == 29 and reply["payload"]["name"] == "INVALID_PARAMETER"
        assert_field_error(reply["payload"]["fields"], path)
        assert (await call(ws, "ping", seq=4))["type"] == "ping_result"  # the socket stays open
        await ws.disconnect()

    run(scenario)
    assert stored_keys() == []


@pytest.mark.parametrize("rate", ["NaN", "Infinity"])
def test_a_non_finite_rate_over_the_socket_is_refused(broker_token, rate):
    # Python's json (the server's frame parser) accepts NaN and Infinity; JSON answers cannot carry them.
    raw = json.dumps({"type": "heartbeat", "seq": 1, "payload": beat(M, with_slave())}).replace("1048576.5", rate)

    async def scenario():
        ws = await connected(broker_token)
        await ws.send_to(text_data=raw)
        reply = await ws.receive_json_from(timeout=10)
        assert reply["type"] == "error" and reply["payload"]["code"] == 29
        assert_field_error(reply["payload"]["fields"], ("slaves", "0", "transferBytesPerS"))
        await ws.disconnect()

    run(scenario)
    assert stored_keys() == []


def test_identity_and_water_level_errors_are_reported_together(broker_token):
    async def scenario():
        ws = await connected(broker_token)
        reply = await call(ws, "heartbeat", {"brokerAddr": M, "waterLevels": {**MASTER_LEVELS, "role": "X"}})
        assert {"clusterName", "waterLevels"} <= set(reply["payload"]["fields"])
        await ws.disconnect()

    run(scenario)


# --- the REST heartbeat --------------------------------------------------------------------------


def test_water_levels_sent_over_rest_are_served(broker_token, read_token):
    broker = client(broker_token)
    assert broker.post(f"{NS}/brokers/register", register_body(0, M), format="json").status_code == 200
    before = redis_now_ms()
    r = broker.post(f"{NS}/brokers/heartbeat", beat(M, MASTER_LEVELS), format="json")
    assert r.status_code == 200 and r.json() == {"code": 0, "name": "SUCCESS", "registered": True}
    (levels,) = served(read_token, clusterName="c1")
    assert before <= levels["reportedAtMs"] <= redis_now_ms()
    assert levels == as_served(MASTER_LEVELS, M, levels["reportedAtMs"])


def test_water_levels_sent_over_rest_are_announced_and_reach_a_dashboard_page(broker_token):
    # As over the socket: the nameserver announces (nameserver.signals), the dashboard pushes to its pages.
    from django.db import connections

    broker = client(broker_token)
    assert broker.post(f"{NS}/brokers/register", register_body(0, M), format="json").status_code == 200

    async def over_rest():
        # A sync view under an event loop, as the ASGI server runs it.
        r = await sync_to_async(broker.post)(f"{NS}/brokers/heartbeat", beat(M, MASTER_LEVELS), format="json")
        assert r.status_code == 200 and r.json()["registered"] is True
        return sync_to_async(connections.close_all)

    _announced_and_pushed(over_rest)


def test_a_rest_heartbeat_without_water_levels_answers_as_before(broker_token, read_token):
    broker = client(broker_token)
    broker.post(f"{NS}/brokers/register", register_body(0, M), format="json")
    for body in ({"clusterName": "c1", "brokerAddr": M}, beat(M, None)):
        r = broker.post(f"{NS}/brokers/heartbeat", body, format="json")
        assert r.status_code == 200 and r.json()["registered"] is True
    assert served(read_token, clusterName="c1") == [] and stored_keys() == []


@pytest.mark.parametrize("levels, path", INVALID.values(), ids=INVALID.keys())
def test_invalid_water_levels_over_rest_are_400_and_nothing_is_stored(broker_token, levels, path):
    r = client(broker_token).post(f"{NS}/brokers/heartbeat", beat(M, levels), format="json")
    assert r.status_code == 400, r.content
    body = r.json()
    assert body["code"] == 29 and body["name"] == "INVALID_PARAMETER"
    assert_field_error(body["fields"], path)
    assert stored_keys() == []


# --- reading -------------------------------------------------------------------------------------


def test_reports_are_sorted_by_broker_name_and_id_and_filtered_by_set_and_cluster(read_token):
    water_levels.store(
        [
            report("b2", 0, "127.0.0.1:20911"),
            report("b1", 1, S1),
            report("b1", 0, M),
            report("b3", 0, "127.0.0.1:30911", cluster="c2"),
        ]
    )
    assert [(r["brokerName"], r["brokerId"]) for r in served(read_token, clusterName="c1")] == [("b1", 0), ("b1", 1), ("b2", 0)]
    assert [(r["brokerName"], r["brokerAddr"]) for r in served(read_token, clusterName="c1", brokerName="b2")] == [
        ("b2", "127.0.0.1:20911")
    ]
    assert [r["clusterName"] for r in served(read_token, clusterName="c2")] == ["c2"]
    assert served(read_token, clusterName="c1", brokerName="b3") == []
    assert served(read_token, clusterName="nowhere") == []


def test_a_new_report_replaces_the_brokers_previous_one():
    water_levels.store([report("b1", 0, M)])
    water_levels.store([water_levels.WaterLevelReport("c1", M, {**MASTER_LEVELS, "maxOffset": 99})])
    (levels,) = water_levels.latest_reports("c1")
    assert levels["maxOffset"] == 99 and levels["slaves"] == MASTER_LEVELS["slaves"]


def test_the_async_reader_agrees_with_the_sync_one():
    water_levels.store([report("b1", 0, M), report("b2", 0, S1)])

    async def read():
        return await water_levels.latest_reports_async("c1", "b2")

    assert run(read) == water_levels.latest_reports("c1", "b2")


def test_reports_carry_a_ttl():
    water_levels.store([report("b1", 0, M)])
    ttl = sync_client().pttl(water_levels.record_key("c1", M))
    assert 0 < ttl <= water_levels.TTL_MILLIS
    assert all(sync_client().pttl(k) > 0 for k in stored_keys())  # the per-cluster index too


def test_a_broker_that_stops_reporting_drops_out_after_the_ttl(monkeypatch):
    monkeypatch.setattr(water_levels, "TTL_MILLIS", 50)
    water_levels.store([report("b1", 0, M)])
    assert len(water_levels.latest_reports("c1")) == 1
    time.sleep(0.15)
    assert water_levels.latest_reports("c1") == [] and stored_keys() == []


def test_any_read_or_admin_token_may_read(read_token, admin_token):
    water_levels.store([report("b1", 0, M)])
    assert len(served(read_token, clusterName="c1")) == len(served(admin_token, clusterName="c1")) == 1


@pytest.mark.parametrize("token", [None, "rmq_not-a-real-token"])
def test_reading_without_a_valid_token_is_401(token):
    r = client(token).get(URL, {"clusterName": "c1"})
    assert r.status_code == 401 and r.json()["code"] == 16


def test_a_cluster_bound_token_reads_only_its_cluster():
    _, raw = ApiToken.issue("bound-reader", "read", "c1")
    assert served(raw, clusterName="c1") == []
    r = client(raw).get(URL, {"clusterName": "c2"})
    assert r.status_code == 403 and r.json()["code"] == 16


@pytest.mark.parametrize(
    "query, field",
    [
        ({}, "clusterName"),
        ({"clusterName": "bad/name"}, "clusterName"),
        ({"clusterName": "c1", "brokerName": "bad name"}, "brokerName"),
    ],
)
def test_bad_queries_are_400_with_field_errors(read_token, query, field):
    r = client(read_token).get(URL, query)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == 29 and field in r.json()["fields"]


def test_the_endpoint_is_in_the_openapi_schema(anon):
    schema = anon.get("/api/schema/").content
    assert b"getWaterLevels" in schema and b"/api/v1/nameserver/water-levels" in schema and b"transferBytesPerS" in schema
