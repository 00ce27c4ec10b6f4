"""ACL 2.0 users and policies of a cluster over REST (nameserver/acl.py, docs/acl.md): the secret key shown
once and stored encrypted (a rotated key ring still reads it), hostile input refused with a problem per
field, dry runs that change nothing, the lockouts preview, the audit row written with the change (and
never the secret), the cluster binding, and the snapshot handed to brokers: in every registration answer
and pushed to a connected broker on every change."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from cryptography.fernet import Fernet, MultiFernet
from django.core.management import call_command
from rest_framework.test import APIClient

from controlplane.audit import request_params
from controlplane.models import ApiToken, OperatorAction
from nameserver.models import AclPolicy, AclUser, AclVersion

from .helpers import register_body
from .test_websocket import M, call, connected

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

USERS = "/api/v1/clusters/c1/acl/users"
POLICIES = "/api/v1/clusters/c1/acl/policies"
SECRET = "s3cret-Key_of-alice"


def make_user(api, username="alice", password=SECRET, **extra):
    r = api.post(USERS, {"username": username, **({"password": password} if password else {}), **extra}, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def grant(api, username="alice", entries=None):
    entries = entries or [{"resources": ["Topic:TopicA"], "actions": ["Pub", "Sub"]}]
    r = api.post(POLICIES, {"subject": f"User:{username}", "entries": entries}, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def audit_text() -> str:
    return json.dumps(list(OperatorAction.objects.values("action", "params", "before", "after", "detail")))


# --- users and the secret key ----------------------------------------------------------------------------


def test_a_users_secret_is_shown_once_stored_encrypted_and_never_audited(api, settings):
    made = make_user(api)
    assert made["applied"] is True and made["password"] == SECRET and made["version"] == 1
    assert made["user"]["username"] == "alice" and made["user"]["userType"] == "Normal"

    listed = api.get(USERS).json()
    one = api.get(f"{USERS}/alice").json()
    assert SECRET not in json.dumps(listed) + json.dumps(one)
    assert [u["username"] for u in listed["users"]] == ["alice"] and listed["version"] == 1

    column = AclUser.objects.get(username="alice").secret_key_encrypted
    assert SECRET not in column
    assert MultiFernet([Fernet(k) for k in settings.ACL_SECRET_KEYS]).decrypt(column.encode()).decode() == SECRET

    assert list(OperatorAction.objects.values_list("action", "cluster_name")) == [("createUser", "c1")]
    assert SECRET not in audit_text()


def test_a_secret_is_generated_when_none_is_given(api):
    made = make_user(api, "gen", password=None)
    assert len(made["password"]) >= 32
    assert made["password"] not in AclUser.objects.get(username="gen").secret_key_encrypted


@pytest.mark.parametrize("keys", [[], ["not-a-fernet-key"]], ids=["no-key", "not-a-key"])
def test_without_keys_creating_a_user_is_refused_and_nothing_changes(api, settings, keys):
    settings.ACL_SECRET_KEYS = keys
    r = api.post(USERS, {"username": "alice", "password": SECRET}, format="json")
    assert r.status_code == 503 and r.json()["name"] == "SYSTEM_ERROR" and "RMQHA_ACL_KEYS" in r.json()["detail"]
    assert not AclUser.objects.exists() and not AclVersion.objects.exists() and not OperatorAction.objects.exists()


def test_a_rotated_key_ring_reads_old_secrets_and_rotation_rewrites_them(api, settings):
    old_key = settings.ACL_SECRET_KEYS[0]
    make_user(api)
    before = AclUser.objects.get().secret_key_encrypted
    new_key = Fernet.generate_key().decode()
    settings.ACL_SECRET_KEYS = [new_key, old_key]
    assert api.get(f"{USERS}/alice").status_code == 200
    call_command("rotate_acl_keys")
    after = AclUser.objects.get().secret_key_encrypted
    assert after != before and Fernet(new_key).decrypt(after.encode()).decode() == SECRET
    settings.ACL_SECRET_KEYS = [new_key]  # the old key dropped: the secret still reads
    from nameserver import acl_selectors

    assert acl_selectors.snapshot_for("c1")["users"][0]["secretKey"] == SECRET


def test_update_and_delete_a_user_and_their_refusals(api):
    make_user(api)
    assert api.post(USERS, {"username": "alice"}, format="json").status_code == 409
    r = api.patch(f"{USERS}/alice", {"userType": "Super", "password": "another-one"}, format="json")
    assert r.status_code == 200 and r.json()["user"]["userType"] == "Super" and "password" not in r.json()
    assert "another-one" not in audit_text()
    for method, path in (("get", f"{USERS}/nobody"), ("patch", f"{USERS}/nobody"), ("post", f"{USERS}/nobody/delete")):
        r = getattr(api, method)(path, {"userStatus": "disable"} if method == "patch" else {}, format="json")
        assert r.status_code == 404 and r.json()["name"] == "USER_NOT_EXIST", (method, r.content)
    assert api.patch(f"{USERS}/alice", {"dryRun": True}, format="json").status_code == 400  # nothing to change
    grant(api)
    r = api.post(f"{USERS}/alice/delete", {}, format="json")
    assert r.status_code == 200 and r.json()["version"] == 4
    assert not AclUser.objects.exists() and not AclPolicy.objects.exists()


# --- policies, previews, lockouts ------------------------------------------------------------------------


def test_a_policy_is_merged_listed_and_deleted_by_resource(api):
    make_user(api)
    grant(api)
    merged = grant(api, entries=[{"resources": ["Topic:TopicA", "Group:G1"], "actions": ["Sub"], "decision": "Allow"}])
    by_resource = {e["resource"]: e for e in merged["policy"]["entries"]}
    assert by_resource["Topic:TopicA"]["actions"] == ["Sub"] and "Group:G1" in by_resource
    listed = api.get(POLICIES, {"resource": "Group"}).json()
    assert listed["policies"] == [{"subject": "User:alice", "username": "alice", "entries": [by_resource["Group:G1"]]}]
    r = api.patch(
        f"{POLICIES}/alice",
        {"entries": [{"resource": "Topic:B*", "actions": ["Pub"], "sourceIps": ["10.0.0.0/8"]}]},
        format="json",
    )
    assert r.status_code == 200 and len(r.json()["policy"]["entries"]) == 3
    r = api.post(f"{POLICIES}/alice/delete", {"resources": ["Topic:B*", "Group:G1"]}, format="json")
    assert r.status_code == 200 and [e["resource"] for e in r.json()["policy"]["entries"]] == ["Topic:TopicA"]
    assert api.post(f"{POLICIES}/alice/delete", {"resources": ["Topic:Nope"]}, format="json").status_code == 404
    r = api.post(f"{POLICIES}/alice/delete", {}, format="json")
    assert r.status_code == 200 and r.json()["policy"] is None and not AclPolicy.objects.exists()
    assert api.get(f"{POLICIES}/alice").json()["name"] == "POLICY_NOT_EXIST"
    assert api.patch(f"{POLICIES}/alice", {"entries": [{"resource": "*", "actions": ["All"]}]}, format="json").status_code == 404
    r = api.post(POLICIES, {"subject": "User:nobody", "entries": [{"resource": "*", "actions": ["All"]}]}, format="json")
    assert r.status_code == 404 and r.json()["name"] == "USER_NOT_EXIST"


def test_a_dry_run_changes_nothing_and_previews_the_lockouts(api, broker_token):
    APIClient(HTTP_AUTHORIZATION=f"Bearer {broker_token}").post(
        "/api/v1/nameserver/brokers/register", register_body(0, M), format="json"
    )  # the cluster's topics: TopicA, TopicB
    make_user(api)
    grant(api)
    actions_before = OperatorAction.objects.count()
    r = api.post(f"{USERS}/alice/delete", {"dryRun": True}, format="json")
    assert r.status_code == 200 and r.json() == {"applied": False, "version": 2, "lockouts": r.json()["lockouts"]}
    assert [(lo["resource"], lo["action"]) for lo in r.json()["lockouts"]] == [("Topic:TopicA", "Pub"), ("Topic:TopicA", "Sub")]
    deny = {"subject": "alice", "entries": [{"resource": "Topic:TopicA", "actions": ["Pub"], "decision": "Deny"}], "dryRun": True}
    r = api.post(POLICIES, deny, format="json")
    # The entry for Topic:TopicA is replaced whole (RocketMQ's updatePolicy): Sub goes with it.
    assert [(lo["resource"], lo["action"]) for lo in r.json()["lockouts"]] == [("Topic:TopicA", "Pub"), ("Topic:TopicA", "Sub")]
    assert AclUser.objects.exists() and AclVersion.objects.get().version == 2
    assert OperatorAction.objects.count() == actions_before
    r = api.post(POLICIES, {**deny, "dryRun": False}, format="json")
    assert r.json()["applied"] is True and r.json()["version"] == 3 and len(r.json()["lockouts"]) == 2
    row = OperatorAction.objects.filter(action="createAcl").latest("id")
    assert row.after["lockouts"][0]["resource"] == "Topic:TopicA" and row.after["version"] == 3


# --- hostile input ---------------------------------------------------------------------------------------

ENTRY = {"resources": ["Topic:A"], "actions": ["Pub"]}


@pytest.mark.parametrize(
    ("entries", "field"),
    [
        pytest.param([], "entries", id="no-entries"),
        pytest.param("Topic:A", "entries", id="not-a-list"),
        pytest.param([ENTRY] * 300, "entries", id="300-entries"),
        pytest.param([{**ENTRY, "resources": [f"Topic:T{i}" for i in range(65)]}], "entries[0].resources", id="65-resources"),
        pytest.param([{**ENTRY, "resources": ["Topic:" + "x" * 256]}], "entries[0].resources", id="oversized-resource"),
        pytest.param([{**ENTRY, "resources": ["Queue:A"]}], "entries[0].resources", id="unknown-resource-type"),
        pytest.param([{**ENTRY, "resources": ["Topic:A*B"]}], "entries[0].resources", id="inner-star"),
        pytest.param([{**ENTRY, "resources": ["Topic:é"]}], "entries[0].resources", id="not-ascii"),
        pytest.param([{**ENTRY, "resources": "Topic:A"}], "entries[0].resources", id="resources-not-a-list"),
        pytest.param([{**ENTRY, "resources": [7]}], "entries[0].resources", id="resource-not-a-string"),
        pytest.param([{"actions": ["Pub"]}], "entries[0].resources", id="no-resource"),
        pytest.param([{**ENTRY, "actions": ["Fly"]}], "entries[0].actions", id="unknown-action"),
        pytest.param([{**ENTRY, "actions": ["Any"]}], "entries[0].actions", id="any-is-no-grant"),
        pytest.param([{**ENTRY, "actions": []}], "entries[0].actions", id="no-actions"),
        pytest.param([{**ENTRY, "actions": "Pub"}], "entries[0].actions", id="actions-not-a-list"),
        pytest.param([{**ENTRY, "decision": "Maybe"}], "entries[0].decision", id="unknown-decision"),
        pytest.param([{**ENTRY, "decision": 1}], "entries[0].decision", id="decision-not-a-string"),
        pytest.param([{**ENTRY, "sourceIps": ["300.1.1.1"]}], "entries[0].sourceIps", id="bad-ip"),
        pytest.param([{**ENTRY, "sourceIps": None}], "entries[0].sourceIps", id="ips-null"),
        pytest.param([ENTRY, 5], "entries[1]", id="an-entry-not-an-object"),
        pytest.param(
            [{**ENTRY, "resources": [f"Topic:T{i}-{j}" for j in range(64)]} for i in range(5)],
            "entries",
            id="over-256-once-expanded",
        ),
    ],
)
def test_a_malformed_policy_is_refused_with_its_field_and_nothing_changes(api, entries, field):
    make_user(api)
    actions_before = OperatorAction.objects.count()
    r = api.post(POLICIES, {"subject": "User:alice", "entries": entries}, format="json")
    assert r.status_code == 400, r.content
    body = r.json()
    assert body["name"] == "INVALID_PARAMETER" and field in body["fields"], body
    assert not AclPolicy.objects.exists() and OperatorAction.objects.count() == actions_before
    assert AclVersion.objects.get().version == 1


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"username": "a b"}, id="space-in-username"),
        pytest.param({"username": 5}, id="username-not-a-string"),
        pytest.param({"username": "x" * 200}, id="long-username"),
        pytest.param({"username": "u", "password": "has space"}, id="password-with-space"),
        pytest.param({"username": "u", "password": "x" * 256}, id="long-password"),
        pytest.param({"username": "u", "userType": "Root"}, id="unknown-type"),
        pytest.param({"username": "u", "userStatus": True}, id="status-not-a-string"),
        pytest.param({"username": "u", "dryRun": "yes"}, id="dry-run-not-a-boolean"),
    ],
)
def test_a_malformed_user_is_refused(api, body):
    r = api.post(USERS, body, format="json")
    assert r.status_code == 400 and r.json()["fields"], r.content
    assert not AclUser.objects.exists()


def test_hostile_query_and_path_values_are_400_not_500(api):
    assert api.get(USERS, {"filter": "a\x00b"}).status_code == 400
    assert api.get(POLICIES, {"subject": "\x00"}).status_code == 400
    assert api.get("/api/v1/clusters/c%20x/acl/users").status_code == 400
    make_user(api)
    r = api.post(f"{POLICIES}/alice/delete", {"resources": ["Topic:"]}, format="json")
    assert r.status_code == 400 and "resources" in r.json()["fields"]
    assert api.post(f"{POLICIES}/alice/delete", {"resources": ["Topic:A"] * 65}, format="json").status_code == 400
    assert api.post(f"{USERS}/alice/delete", {"dryRun": "maybe"}, format="json").status_code == 400
    assert AclUser.objects.exists()


# --- who may -----------------------------------------------------------------------------------------------


def test_reads_for_any_caller_changes_for_operators_and_a_bound_token_for_its_cluster(api, read_token):
    make_user(api)
    reader = APIClient(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    assert reader.get(USERS).status_code == 200
    assert reader.post(USERS, {"username": "bob"}, format="json").status_code == 403
    assert APIClient().get(USERS).status_code == 401
    bound = APIClient(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('bound', 'admin', 'c2')[1]}")
    assert bound.get(USERS).status_code == 403
    assert bound.post("/api/v1/clusters/c2/acl/users", {"username": "bob"}, format="json").status_code == 200


def test_the_audit_middleware_never_keeps_a_secret():
    body = json.dumps({"username": "u", "password": "p4ss", "nested": {"secretKey": "sk"}}).encode()
    params = request_params(body, {"password": ["q"]}, "/api/x", "/api/x")
    assert "p4ss" not in json.dumps(params) and "sk" not in json.dumps(params["nested"]) and params["query"]["password"] != ["q"]
    raw = request_params(b'{"password": "p4ss"', {}, "/api/x", "/api/x")  # not JSON: not kept at all
    assert "p4ss" not in json.dumps(raw)


# --- what brokers get --------------------------------------------------------------------------------------


def test_registration_carries_the_snapshot_and_a_change_is_pushed_to_the_clusters_brokers(api, broker_token):
    async def scenario():
        ws = await connected(broker_token)
        first = await call(ws, "register", register_body(0, M))
        assert first["payload"]["acl"] == {"version": 0, "users": [], "policies": []}

        await sync_to_async(make_user)(api)
        push = await ws.receive_json_from(timeout=10)
        assert push["type"] == "acl_update" and push["payload"]["version"] == 1
        assert push["payload"]["users"] == [
            {"username": "alice", "secretKey": SECRET, "userType": "Normal", "userStatus": "enable"}
        ]

        await sync_to_async(grant)(api)
        push = await ws.receive_json_from(timeout=10)
        assert push["payload"]["version"] == 2
        assert push["payload"]["policies"] == [
            {
                "username": "alice",
                "entries": [{"resource": "Topic:TopicA", "actions": ["Pub", "Sub"], "decision": "Allow", "sourceIps": []}],
            }
        ]

        again = await call(ws, "register", register_body(0, M), seq=2)
        assert again["payload"]["acl"] == push["payload"]  # a lost push only delays

        other = await sync_to_async(api.post)("/api/v1/clusters/c9/acl/users", {"username": "zed"}, format="json")
        assert other.status_code == 200
        assert await ws.receive_nothing(timeout=0.5)  # another cluster's change is not this broker's
        await ws.disconnect()

    async_to_sync(scenario)()
