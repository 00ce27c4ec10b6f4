"""The operator audit log and the change it records commit together (controlplane/audit.py,
dashboards/actions.py), against real Postgres and Redis:

- whatever an admin call carries (long names and paths, NUL characters, lone surrogates, NaN, a
  body of megabytes) is recorded, as a faithful bounded rendering, and never turns an action that
  happened into an error;
- when the audit record cannot be written (a Postgres trigger refuses it), the change is rolled
  back: the caller gets a JSON 500 (an error frame on the broker websocket) that says nothing
  changed, and nothing did.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from controlplane.controller import services as ctl_services
from controlplane.controller.models import ControllerConfigEntry, Replica, ReplicaGroup, Transition
from controlplane.models import ApiToken, Isolation, OperatorAction
from dashboards.permissions import OPERATORS_GROUP
from nameserver import services as ns_services
from nameserver.models import BrokerGroup, NamesrvConfigEntry, TopicQueue
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body
from tests.nameserver.helpers import NS, register_body
from tests.nameserver.test_websocket import call, connected

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LONG = "g" * 110  # a valid broker set name (up to 127) that makes a long path
LONG_TOPIC = "T" * 127


def _set_up(broker_name: str) -> None:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('atomic-broker', 'broker')[1]}")
    for i in (1, 2):
        assert api.post(f"{CTL}/brokers/apply-broker-id", apply_body(i, name=broker_name), format="json").status_code == 200
        body = {"clusterName": "c1", "brokerName": broker_name, "brokerId": i, "brokerAddress": addr(i)}
        assert api.post(f"{CTL}/brokers/register", body, format="json").status_code == 200
        beat = heartbeat_body(i, name=broker_name, max_offset=1000)
        assert api.post(f"{CTL}/brokers/heartbeat", beat, format="json").status_code == 200
    elected = api.post(f"{CTL}/elect-master", {"brokerName": broker_name, "brokerId": 1}, format="json").json()
    assert elected["masterBrokerId"] == 1
    alter = {"brokerName": broker_name, "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, 2], "syncStateSetEpoch": 1}
    assert api.post(f"{CTL}/alter-sync-state-set", alter, format="json").status_code == 200
    topics = {
        "TopicA": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
        LONG_TOPIC: {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
    }
    for i in (1, 2):
        r = api.post(
            f"{NS}/brokers/register",
            register_body(0 if i == 1 else i, addr(i), name=broker_name, state=1, topics=topics),
            format="json",
        )
        assert r.status_code == 200, r.content


@pytest.fixture
def long_group():
    _set_up(LONG)
    return LONG


@pytest.fixture
def admin() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('ops', 'admin')[1]}")
    return client


@pytest.fixture
def operator() -> Client:
    user = User.objects.create_user("olga", password="pw")
    user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    client = Client()
    client.force_login(user)
    return client


def state() -> dict:
    """Everything an operator action can change."""
    return {
        "perms": sorted(TopicQueue.objects.values_list("topic", "group__broker_name", "perm")),
        "topics": sorted(TopicQueue.objects.values_list("topic", "read_queue_nums", "write_queue_nums")),
        "groups": sorted(BrokerGroup.objects.values_list("broker_name", "cluster_name")),
        "controller": sorted(
            ReplicaGroup.objects.values_list("broker_name", "master_broker_id", "master_epoch", "sync_state_set_epoch")
        ),
        "replicas": sorted(Replica.objects.values_list("group__broker_name", "broker_id")),
        "transitions": Transition.objects.count(),
        "controller_config": sorted(ControllerConfigEntry.objects.values_list("key", "value")),
        "namesrv_config": sorted(NamesrvConfigEntry.objects.values_list("key", "value")),
        "isolations": sorted(Isolation.objects.values_list("cluster_name", "broker_addr")),
    }


# --- whatever was asked is recorded, and the answer is the action's own ----------------------------


def test_a_long_broker_name_in_the_path_is_recorded_and_the_change_answered(long_group, admin):
    r = admin.post(f"{NS}/brokers/{LONG}/wipe-write-perm", {}, format="json")
    assert r.status_code == 200, r.content
    assert {perm for _, name, perm in state()["perms"] if name == LONG} == {4}
    row = OperatorAction.objects.get()
    assert row.action == f"POST {NS}/brokers/{LONG}/wipe-write-perm"  # fits the column whole
    assert (row.actor, row.broker_name, row.result) == ("token:ops", LONG, "ok")

    r = admin.post(f"{NS}/brokers/{LONG}/add-write-perm", {}, format="json")
    assert r.status_code == 200 and {p for _, n, p in state()["perms"] if n == LONG} == {6}
    assert OperatorAction.objects.count() == 2


def test_a_long_topic_name_in_the_path_is_recorded_with_the_query(long_group, admin):
    topic = "Z" * 127
    assert admin.post(f"{NS}/topics", {"topicName": topic, "brokerNames": [LONG]}, format="json").status_code == 200
    r = admin.delete(f"{NS}/topics/{topic}?brokerName={LONG}")
    assert r.status_code == 200, r.content
    assert not TopicQueue.objects.filter(topic=topic).exists()
    row = OperatorAction.objects.filter(action__startswith="DELETE").get()
    assert row.action == f"DELETE {NS}/topics/{topic}" and row.result == "ok"
    assert row.params == {"query": {"brokerName": [LONG]}}


def test_a_path_longer_than_the_action_column_is_kept_whole_in_the_params(long_group, admin):
    before = state()
    r = admin.post(f"{NS}/brokers/{'x' * 300}%00/wipe-write-perm", {}, format="json")
    assert 400 <= r.status_code < 500, r.content
    assert state() == before
    row = OperatorAction.objects.get()
    action_limit = OperatorAction._meta.get_field("action").max_length
    assert len(row.action) == action_limit and row.action.endswith("…")
    assert row.params["path"] == f"{NS}/brokers/{'x' * 300}\\x00/wipe-write-perm"  # NUL shown as an escape
    assert row.result == f"http {r.status_code}"


@pytest.mark.parametrize(
    "raw, shown",
    [
        ('{"brokerName": "g1", "brokerId": NaN}', "NaN"),
        ('{"brokerName": "g\\u0000x"}', "\\u0000"),
        ('{"brokerName": "g\\ud800x"}', "\\ud800"),
    ],
    ids=["nan", "nul", "lone-surrogate"],
)
@pytest.mark.parametrize(
    "method, path",
    [
        ("post", f"{CTL}/elect-master"),
        ("post", f"{CTL}/clean-broker-data"),
        ("patch", f"{CTL}/config"),
        ("patch", f"{NS}/config"),
        ("post", f"{NS}/topics"),
    ],
)
def test_bodies_postgres_cannot_store_are_recorded_as_sent_and_answered_cleanly(long_group, admin, method, path, raw, shown):
    before = state()
    r = getattr(admin, method)(path, raw, content_type="application/json")
    assert r.status_code < 500, r.content
    assert r.headers["Content-Type"].startswith("application/json") and {"code", "name", "detail"} <= set(r.json())
    assert state() == before  # each of these bodies is invalid: nothing may change
    row = OperatorAction.objects.get()
    assert row.action == f"{method.upper()} {path}" and row.result == f"http {r.status_code}"
    assert row.params["raw"] == raw and shown in row.params["raw"] and row.params["bytes"] == len(raw)


def test_a_body_too_large_to_keep_is_recorded_cut_with_its_size(long_group, admin):
    body = json.dumps({"topicName": "TopicBig", "brokerNames": [LONG], "padding": "x" * 100_000})
    r = admin.post(f"{NS}/topics", body, content_type="application/json")
    assert r.status_code == 200, r.content  # unknown keys are ignored
    row = OperatorAction.objects.get()
    assert row.result == "ok" and row.params["bytes"] == len(body) and row.params["truncated"] is True
    assert body.startswith(row.params["raw"][:-1]) and len(row.params["raw"]) <= 4000


def test_broker_protocol_calls_and_reads_are_not_operator_actions(long_group, admin):
    assert admin.post(f"{CTL}/brokers/heartbeat", heartbeat_body(1, name=LONG), format="json").status_code == 200
    assert admin.get(f"{NS}/cluster-info").status_code == 200
    assert OperatorAction.objects.count() == 0


def test_a_logged_in_operators_rest_calls_are_recorded_too(long_group, operator):
    r = operator.post(f"{NS}/brokers/{LONG}/wipe-write-perm", "{}", content_type="application/json")
    assert r.status_code == 200, r.content
    assert {p for _, n, p in state()["perms"] if n == LONG} == {4}
    row = OperatorAction.objects.get()
    assert (row.actor, row.action, row.result) == ("user:olga", f"POST {NS}/brokers/{LONG}/wipe-write-perm", "ok")


def test_a_session_call_without_csrf_is_refused_unchanged_and_recorded(long_group, operator):
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = operator.cookies
    before = state()
    r = strict.post(f"{NS}/brokers/{LONG}/wipe-write-perm", "{}", content_type="application/json")
    assert r.status_code == 403 and r.json()["name"] == "NO_PERMISSION"
    assert state() == before
    assert list(OperatorAction.objects.values_list("actor", "result")) == [("user:olga", "http 403")]


# --- the record cannot be written: nothing changes -------------------------------------------------


@pytest.fixture
def audit_log_down():
    """A real failure of the audit write: Postgres refuses every insert into the audit table."""
    table = OperatorAction._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            "CREATE OR REPLACE FUNCTION audit_down() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'audit log is down (test)'; END $$ LANGUAGE plpgsql"
        )
        cur.execute(f"CREATE TRIGGER audit_down BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION audit_down()")
    yield
    with connection.cursor() as cur:
        cur.execute(f"DROP TRIGGER IF EXISTS audit_down ON {table}")
        cur.execute("DROP FUNCTION IF EXISTS audit_down()")


REST_ACTIONS = [
    ("post", f"{NS}/brokers/{LONG}/wipe-write-perm", {}),
    ("post", f"{NS}/topics", {"topicName": "TopicNew", "brokerNames": [LONG]}),
    ("delete", f"{NS}/topics/TopicA", None),
    ("patch", f"{NS}/config", {"orderMessageEnable": True}),
    ("patch", f"{CTL}/config", {"scanInactiveMasterInterval": 900}),
    ("post", f"{CTL}/elect-master", {"brokerName": LONG, "brokerId": 2, "designateElect": True}),
    ("post", f"{CTL}/clean-broker-data", {"brokerName": LONG, "brokerControllerIdsToClean": "2", "isCleanLivingBroker": True}),
    ("post", "/api/v1/operations/brokers/isolate", {"brokerName": LONG, "brokerId": 2}),
]


@pytest.mark.parametrize("method, path, body", REST_ACTIONS, ids=[f"{m} {p.rsplit('/', 2)[-2:]}" for m, p, _ in REST_ACTIONS])
def test_an_admin_call_whose_record_fails_changes_nothing(long_group, admin, audit_log_down, method, path, body):
    before = state()
    kwargs = {"format": "json"} if body is not None else {}
    r = getattr(admin, method)(path, body, **kwargs) if body is not None else getattr(admin, method)(path)
    assert r.status_code == 500, r.content
    assert r.json()["name"] == "SYSTEM_ERROR" and "nothing was changed" in r.json()["detail"]
    assert state() == before
    assert OperatorAction.objects.count() == 0


def test_the_same_calls_change_state_when_the_record_is_written(long_group, admin):
    """The counterpart of the test above: each call of REST_ACTIONS does change something."""
    for method, path, body in REST_ACTIONS:
        before = state()
        r = getattr(admin, method)(path, body, format="json") if body is not None else getattr(admin, method)(path)
        assert r.status_code == 200, (path, r.content)
        assert state() != before, path
    assert OperatorAction.objects.count() == len(REST_ACTIONS)


@pytest.mark.parametrize(
    "action, body",
    [("elect", {"brokerId": 2}), ("isolate", {"brokerId": 2, "isolated": True}), ("write-perm", {"writable": False})],
)
def test_a_dashboard_action_whose_record_fails_changes_nothing(long_group, operator, audit_log_down, action, body):
    before = state()
    r = operator.post(f"/groups/{LONG}/{action}", json.dumps(body), content_type="application/json")
    assert r.status_code == 500 and "nothing was changed" in r.json()["detail"]
    assert state() == before


# --- an admin token electing over the broker websocket is an operator too --------------------------


def _elect_over_the_socket(token: str, body: dict) -> dict:
    async def scenario():
        ws = await connected(token)
        try:
            return await call(ws, "elect_master", body)
        finally:
            await ws.disconnect()

    return async_to_sync(scenario)()


def test_an_admin_election_over_the_socket_is_recorded_with_it(long_group):
    token = ApiToken.issue("ops-socket", "admin")[1]
    reply = _elect_over_the_socket(token, {"brokerName": LONG, "brokerId": 2, "designateElect": True})
    assert reply["type"] == "elect_master_result" and reply["payload"]["masterBrokerId"] == 2
    row = OperatorAction.objects.get()
    assert (row.actor, row.action, row.broker_name, row.result) == ("token:ops-socket", "frame elect_master", LONG, "ok")
    assert row.params == {"brokerName": LONG, "brokerId": 2, "designateElect": True}

    reply = _elect_over_the_socket(token, {"brokerName": LONG, "brokerId": 9, "designateElect": True})
    assert reply["type"] == "error"
    refused = OperatorAction.objects.exclude(pk=row.pk).get()
    assert refused.result == reply["payload"]["name"] and ReplicaGroup.objects.get().master_broker_id == 2


def test_an_admin_election_over_the_socket_whose_record_fails_changes_nothing(long_group, audit_log_down):
    before = state()
    reply = _elect_over_the_socket(
        ApiToken.issue("ops-socket", "admin")[1], {"brokerName": LONG, "brokerId": 2, "designateElect": True}
    )
    assert reply["type"] == "error" and reply["payload"]["name"] == "SYSTEM_ERROR"
    assert state() == before and OperatorAction.objects.count() == 0


# --- a value the config accepts keeps the scans running --------------------------------------------


def test_the_longest_scan_intervals_a_config_accepts_keep_the_scans_running(admin):
    longest = 2**63 - 1
    assert (
        admin.patch(
            f"{CTL}/config", {"scanNotActiveBrokerInterval": longest, "scanInactiveMasterInterval": longest}, format="json"
        ).status_code
        == 200
    )
    assert admin.patch(f"{NS}/config", {"scanNotActiveBrokerInterval": longest}, format="json").status_code == 200
    assert (ctl_services.scan_inactive_brokers(), ctl_services.scan_inactive_masters()) == ([], [])
    assert ns_services.scan_not_active_brokers() == []


def test_dashboard_pages_answer_hostile_paths_and_searches_without_an_error(long_group, operator):
    for url in (f"/groups/{LONG}%00/", "/groups/a%00b/water-levels.json", f"/groups/{'x' * 200}/", "/groups/a%00/elect"):
        assert operator.get(url).status_code == 404, url
    assert operator.get(f"/groups/{LONG}/").status_code == 200
    r = operator.get("/audit/?actor=a%00b&broker=%00&action=x%00")
    assert r.status_code == 200
