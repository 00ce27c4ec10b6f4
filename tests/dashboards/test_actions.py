"""Operator actions (dashboards/action_views.py) against real Postgres and Redis: operators only,
CSRF, field errors, the audit log; elect (preview, designated, automatic), isolate (routes and
elections), write permission; the live websocket and the water-level samples."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.db import connections
from django.test import Client
from rest_framework.test import APIClient

from controlplane.controller.models import ReplicaGroup
from controlplane.models import ApiToken, OperatorAction
from dashboards import live, sampling
from dashboards.live import DashboardConsumer
from dashboards.models import WaterLevelSample
from dashboards.permissions import OPERATORS_GROUP
from nameserver import selectors as ns_selectors
from nameserver import water_levels
from tests.aio import run_scenario
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body
from tests.nameserver.helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def group():
    """A controller-managed group g1 (cluster c1) of three live replicas, 1 master, {1, 2} in sync,
    registered with the nameserver too (master as id 0, as controller-mode brokers do)."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('dash-broker', 'broker')[1]}")
    for i in (1, 2, 3):
        assert api.post(f"{CTL}/brokers/apply-broker-id", apply_body(i), format="json").status_code == 200
        assert (
            api.post(
                f"{CTL}/brokers/register",
                {"clusterName": "c1", "brokerName": "g1", "brokerId": i, "brokerAddress": addr(i)},
                format="json",
            ).status_code
            == 200
        )
        assert (
            api.post(f"{CTL}/brokers/heartbeat", heartbeat_body(i, max_offset=1000 - 100 * i), format="json").status_code == 200
        )
    assert (
        api.post(f"{CTL}/elect-master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1}, format="json").json()[
            "masterBrokerId"
        ]
        == 1
    )
    assert (
        api.post(
            f"{CTL}/alter-sync-state-set",
            {
                "clusterName": "c1",
                "brokerName": "g1",
                "masterBrokerId": 1,
                "masterEpoch": 1,
                "syncStateSet": [1, 2],
                "syncStateSetEpoch": 1,
            },
            format="json",
        ).status_code
        == 200
    )
    for i in (1, 2, 3):
        r = api.post(f"{NS}/brokers/register", register_body(0 if i == 1 else i, addr(i), name="g1", state=1), format="json")
        assert r.status_code == 200, r.content
    return api


def user(name: str, operator: bool) -> Client:
    u = User.objects.create_user(name, password="pw")
    if operator:
        u.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    c = Client()
    c.force_login(u)
    return c


def post(client: Client, url: str, body) -> tuple[int, dict]:
    r = client.post(url, json.dumps(body), content_type="application/json")
    return r.status_code, r.json() if r.headers.get("Content-Type", "").startswith("application/json") else {}


def test_viewers_and_anonymous_users_cannot_act(group):
    viewer = user("viewer", operator=False)
    for path, body in [
        ("elect", {"brokerId": 2}),
        ("isolate", {"brokerId": 2, "isolated": True}),
        ("write-perm", {"writable": False}),
    ]:
        status, payload = post(viewer, f"/groups/g1/{path}", body)
        assert (status, payload) == (403, {"detail": "operators only"})
        assert Client().post(f"/groups/g1/{path}", "{}", content_type="application/json").status_code == 302  # to login
    assert viewer.get("/groups/g1/elect-preview?brokerId=2").status_code == 403
    assert OperatorAction.objects.count() == 0 and ReplicaGroup.objects.get().master_broker_id == 1


def test_actions_need_the_csrf_token(group):
    u = User.objects.create_superuser("root", password="pw")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(u)
    r = strict.post("/groups/g1/elect", json.dumps({"brokerId": 2}), content_type="application/json")
    assert r.status_code == 403 and ReplicaGroup.objects.get().master_broker_id == 1
    strict.get("/groups/g1/elect-preview?brokerId=2")  # sets the cookie, as the pages do
    token = strict.cookies["csrftoken"].value
    r = strict.post("/groups/g1/elect", json.dumps({"brokerId": 2}), content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 200 and r.json()["ok"]


def test_bad_input_is_a_400_with_field_errors(group):
    op = user("op", operator=True)
    assert post(op, "/groups/g1/elect", {"brokerId": "two"}) == (
        400,
        {"detail": "invalid input", "fields": {"brokerId": [f"must be an integer from 0 to {2**63 - 1}"]}},
    )
    assert post(op, "/groups/g1/isolate", {"brokerId": 2})[1]["fields"] == {"isolated": ["must be true or false"]}
    assert post(op, "/groups/g1/isolate", {"brokerId": 9, "isolated": True})[0] == 400
    assert post(op, "/groups/g1/write-perm", [1])[0] == 400
    assert op.get("/groups/g1/elect-preview?brokerId=x").status_code == 400
    assert post(op, "/groups/nope/elect", {})[0] == 404


def test_elect_preview_then_a_designated_election_is_applied_and_audited(group):
    op = user("op", operator=True)
    clean = op.get("/groups/g1/elect-preview?brokerId=2").json()
    assert clean == {"winner": 2, "dataAtRiskBytes": 100, "unclean": False, "detail": clean["detail"]}
    outside = op.get("/groups/g1/elect-preview?brokerId=3").json()
    assert outside["unclean"] is True  # not in the SyncStateSet: refused unless unclean elections are enabled
    status, result = post(op, "/groups/g1/elect", {"brokerId": 2})
    assert status == 200 and result["ok"] and result["before"]["masterBrokerId"] == 1
    assert (result["after"]["masterBrokerId"], result["after"]["masterEpoch"]) == (2, 2)
    entry = OperatorAction.objects.get()
    assert (entry.actor, entry.action, entry.broker_name, entry.broker_id, entry.result) == ("op", "elect_master", "g1", 2, "ok")
    assert entry.before["masterBrokerId"] == 1 and entry.after["masterBrokerId"] == 2


def test_an_election_reads_the_state_outside_the_lock_and_records_it_in_the_elections_transaction(group, monkeypatch):
    """The page's election runs as the controller's api does (``elect_recorded``): the group's row lock
    lives only in the election's transaction, the state before and after is read outside any, and the
    record commits in it with the state the election answered."""
    from django.db import transaction

    from dashboards import selectors

    in_transaction = []
    read = selectors.group_state

    def watched(broker_name):
        in_transaction.append(transaction.get_connection().in_atomic_block)
        return read(broker_name)

    monkeypatch.setattr(selectors, "group_state", watched)
    status, result = post(user("op", operator=True), "/groups/g1/elect", {"brokerId": 2})
    assert status == 200 and result["ok"] and in_transaction == [False, False]
    entry = OperatorAction.objects.get()
    assert entry.after == result["after"]  # what the election answered is what a read after it shows
    assert (entry.after["masterBrokerId"], entry.after["masterEpoch"], entry.after["syncStateSet"]) == (2, 2, [2])
    assert entry.cluster_name == "c1" and entry.detail == ""


def test_isolating_a_broker_removes_it_from_routes_and_elections_until_lifted(group):
    op = user("op", operator=True)
    route = ns_selectors.topic_route("TopicA")
    assert addr(2) in route.broker_datas[0].broker_addrs.values()
    assert post(op, "/groups/g1/isolate", {"brokerId": 2, "isolated": True})[1]["result"] == "ok"
    assert addr(2) not in ns_selectors.topic_route("TopicA").broker_datas[0].broker_addrs.values()
    assert op.get("/groups/g1/elect-preview?brokerId=2").json()["winner"] is None  # not a candidate
    assert post(op, "/groups/g1/elect", {"brokerId": 2})[1]["ok"] is False
    assert post(op, "/groups/g1/isolate", {"brokerId": 2, "isolated": False})[1]["result"] == "ok"
    assert addr(2) in ns_selectors.topic_route("TopicA").broker_datas[0].broker_addrs.values()
    assert post(op, "/groups/g1/elect", {"brokerId": 2})[1]["ok"] is True
    actions = list(OperatorAction.objects.order_by("id").values_list("action", "result"))
    assert [a for a, _ in actions] == ["isolate", "elect_master", "unisolate", "elect_master"]
    assert actions[0][1] == actions[2][1] == actions[3][1] == "ok" and actions[1][1] != "ok"  # refused while isolated


def test_wiping_and_adding_write_permission(group):
    op = user("op", operator=True)
    assert post(op, "/groups/g1/write-perm", {"writable": False})[1]["topicsChanged"] == 2
    assert {q.perm for q in ns_selectors.topic_route("TopicA").queue_datas} == {4}
    assert post(op, "/groups/g1/write-perm", {"writable": True})[1]["ok"]
    assert {q.perm for q in ns_selectors.topic_route("TopicA").queue_datas} == {6}
    assert list(OperatorAction.objects.order_by("id").values_list("action", flat=True)) == ["wipe_write_perm", "add_write_perm"]


async def next_update(page: WebsocketCommunicator, kind: str) -> dict:
    """The next update of this kind (the fixture's own transitions may still be on their way)."""
    while True:
        message = json.loads(await page.receive_from(timeout=5))
        if message.get("kind") == kind:
            return message


def test_the_live_websocket_pushes_state_changes_to_subscribed_pages(group):
    viewer = User.objects.create_user("watcher", password="pw")

    async def scenario():
        page = WebsocketCommunicator(DashboardConsumer.as_asgi(), "/ws/dashboard/")
        page.scope["user"] = viewer
        connected, _ = await page.connect()
        assert connected
        await page.send_to(text_data=json.dumps({"subscribe": "g1"}))
        assert json.loads(await page.receive_from(timeout=5)) == {"type": "subscribed", "to": "g1"}
        await sync_to_async(live.publish_state)("g1")
        update = await next_update(page, "state")
        assert update["kind"] == "state" and update["brokerName"] == "g1"
        assert update["data"]["masterBrokerId"] == 1 and update["data"]["syncStateSet"] == [1, 2]
        # Water levels are throttled to one update per second per group; the latest wins.
        for n in range(3):
            await live.publish_async("water_levels", "g1", {"reports": [{"brokerAddr": addr(1), "maxOffset": n}]})
        first = await next_update(page, "water_levels")
        second = await next_update(page, "water_levels")
        assert first["data"]["reports"][0]["maxOffset"] == 0 and second["data"]["reports"][0]["maxOffset"] == 2
        assert second["sentAtMs"] - first["sentAtMs"] >= 900
        await page.disconnect()

        anonymous = WebsocketCommunicator(DashboardConsumer.as_asgi(), "/ws/dashboard/")
        from django.contrib.auth.models import AnonymousUser

        anonymous.scope["user"] = AnonymousUser()
        connected, _ = await anonymous.connect()
        assert not connected
        await sync_to_async(connections.close_all)()

    run_scenario(scenario)


def test_pages_hear_of_elections_and_isolations_through_the_controllers_announcement(group):
    """The election path does not publish: the controller announces ``replica_group_changed`` on commit
    and the dashboard's publisher thread sends the state (batched, throttled) to subscribed pages."""
    viewer = User.objects.create_user("watcher", password="pw")
    op = user("op", operator=True)
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('ops-tool', 'admin')[1]}")

    async def scenario():
        page = WebsocketCommunicator(DashboardConsumer.as_asgi(), "/ws/dashboard/")
        page.scope["user"] = viewer
        assert (await page.connect())[0]
        await page.send_to(text_data=json.dumps({"subscribe": "*"}))
        assert json.loads(await page.receive_from(timeout=5)) == {"type": "subscribed", "to": "*"}
        status, _ = await sync_to_async(post)(op, "/groups/g1/elect", {"brokerId": 2})
        assert status == 200
        # The fixture's own transitions may come first (the latest state wins); then the election's.
        update = await next_update(page, "state")
        while update["data"]["masterEpoch"] < 2:
            update = await next_update(page, "state")
        assert (update["brokerName"], update["data"]["masterBrokerId"], update["data"]["masterEpoch"]) == ("g1", 2, 2)
        r = await sync_to_async(admin.post)(
            "/api/v1/operations/brokers/isolate", {"brokerName": "g1", "brokerId": 3}, format="json"
        )
        assert r.status_code == 200
        # Updates of the election may still arrive (each announcement is one update); then the isolation's.
        update = await next_update(page, "state")
        while not update["data"]["isolated"]:
            assert update["data"]["masterEpoch"] == 2
            update = await next_update(page, "state")
        assert update["data"]["isolated"] == [3]
        await page.disconnect()
        await sync_to_async(connections.close_all)()

    run_scenario(scenario)


def test_water_levels_are_sampled_for_the_charts(group, settings):
    report = {
        "brokerName": "g1",
        "brokerId": 1,
        "role": "SYNC_MASTER",
        "masterEpoch": 1,
        "maxOffset": 900,
        "confirmOffset": 800,
        "minOffset": 0,
        "slaves": [
            {
                "brokerId": 2,
                "addr": addr(2),
                "ackOffset": 800,
                "lagBytes": 100,
                "lastCaughtUpMs": 1,
                "transferBytesPerS": 0.0,
                "inSyncStateSet": True,
            }
        ],
    }
    slave = {
        "brokerName": "g1",
        "brokerId": 2,
        "role": "SLAVE",
        "masterEpoch": 1,
        "maxOffset": 800,
        "confirmOffset": 800,
        "minOffset": 0,
        "slaves": [],
    }
    water_levels.store(
        [water_levels.WaterLevelReport("c1", addr(1), report), water_levels.WaterLevelReport("c1", addr(2), slave)]
    )
    assert sampling.sample() == 2
    assert sampling.sample() == 0  # one sample per interval, however many beats
    rows = {r.broker_id: r for r in WaterLevelSample.objects.all()}
    assert (rows[1].max_offset, rows[1].confirm_offset, rows[1].ack_offset) == (900, 800, None)
    assert (rows[2].max_offset, rows[2].ack_offset, rows[2].lag_bytes, rows[2].role) == (800, 800, 100, "SLAVE")


def test_operators_rest_calls_with_admin_tokens_are_audited_but_broker_protocol_calls_are_not(group):
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('ops-tool', 'admin')[1]}")
    assert admin.patch(f"{CTL}/config", {"scanInactiveMasterInterval": 800}, format="json").status_code == 200
    assert admin.post(f"{NS}/brokers/g1/wipe-write-perm", {}, format="json").status_code == 200
    assert admin.post(f"{CTL}/brokers/heartbeat", heartbeat_body(1), format="json").status_code == 200
    rows = list(OperatorAction.objects.order_by("id"))
    assert [r.action for r in rows] == ["PATCH /api/v1/controller/config", "POST /api/v1/nameserver/brokers/g1/wipe-write-perm"]
    assert rows[0].actor == "token:ops-tool" and rows[0].params == {"scanInactiveMasterInterval": 800} and rows[0].result == "ok"
    assert not any("heartbeat" in r.action for r in rows)
