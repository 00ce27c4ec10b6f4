"""The Access control page (dashboards/acl_admin.py) over real Postgres and Redis: users listed with
their policies and never a secret; operators only (a viewer gets 403, an anonymous user the login page),
CSRF; a preview is the service's dry run (nothing written, nothing audited, the lockouts shown); an
applied change is in the database and in the audit log under the operator's name; bad input answers
400 with a problem per field, as REST words them."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.models import OperatorAction
from mqrules import acl as rules
from nameserver import acl
from nameserver import services as nameserver
from nameserver.models import AclPolicy, AclUser, AclVersion
from tests.dashboards.admin_helpers import RW, client_for, post, register_set

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PAGE = reverse("dashboards:acl")
SECRET = "s3cret-of-alice"
TOPIC_A = {"subject": "User:alice", "entries": [{"resources": ["Topic:TopicA"], "actions": ["Pub", "Sub"]}]}


def url(name: str, cluster: str = "c1") -> str:
    return reverse(f"dashboards:acl-{name}", args=[cluster])


@pytest.fixture
def alice(db):
    """Cluster c1 (topic TopicA, registered) where alice may Pub and Sub on TopicA; cluster c2, empty."""
    register_set("c1", "a", 0, "127.0.0.1:10911")
    nameserver.create_or_update_topic("TopicA", read_queue_nums=4, write_queue_nums=4, perm=RW, broker_names=["a"])
    register_set("c2", "b", 0, "127.0.0.1:10921")
    acl.create_user("c1", "alice", SECRET, actor="setup")
    acl.create_acl("c1", "User:alice", rules.parse_entries(TOPIC_A["entries"])[0], actor="setup")


@pytest.fixture
def operator(db) -> Client:
    return client_for("ops", operator=True)


def state() -> tuple:
    """What a refused or previewed change must leave as it was."""
    return (
        list(AclUser.objects.order_by("username").values_list("username", "user_type", "user_status", "secret_key_encrypted")),
        list(AclPolicy.objects.order_by("user__username").values_list("user__username", "entries")),
        list(AclVersion.objects.values_list("cluster_name", "version")),
        OperatorAction.objects.count(),
    )


def test_the_page_lists_users_and_policies_per_cluster_never_a_secret(alice, operator):
    viewer = client_for("viewer", operator=False)
    page = viewer.get(PAGE).content.decode()
    assert 'data-username="alice"' in page and "Topic:TopicA" in page and "Pub, Sub" in page
    assert 'id="acl-version">2<' in page and 'name="cluster"' in page  # two clusters: a selector
    assert SECRET not in page and AclUser.objects.get().secret_key_encrypted not in page
    assert 'id="acl-create-user"' not in page and 'name="csrf-token"' not in page  # a viewer: no forms
    assert "No user in c2 yet" in viewer.get(PAGE, {"cluster": "c2"}).content.decode()
    assert viewer.get(PAGE, {"cluster": "nowhere"}).status_code == 404
    page = operator.get(PAGE).content.decode()
    for form in ("create-user", "update-user", "delete-user", "put-policy", "delete-policy"):
        assert f'id="acl-{form}"' in page
    assert SECRET not in page
    r = Client().get(PAGE)
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")


def test_a_viewers_change_is_refused_and_changes_nothing(alice):
    before = state()
    viewer = client_for("viewer", operator=False)
    for name, body in (
        ("create-user", {"username": "mallory"}),
        ("update-user", {"username": "alice", "userType": "Super"}),
        ("delete-user", {"username": "alice"}),
        ("put-policy", {**TOPIC_A, "subject": "User:alice"}),
        ("delete-policy", {"username": "alice"}),
    ):
        assert post(viewer, url(name), body) == (403, {"detail": "operators only"})
        r = Client().post(url(name), json.dumps(body), content_type="application/json")
        assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    strict = client_for("root", operator=True, enforce_csrf=True)
    assert strict.post(url("delete-user"), {"username": "alice"}, content_type="application/json").status_code == 403
    assert state() == before
    strict.get(PAGE)  # the page sets the cookie
    token = strict.cookies["csrftoken"].value
    assert post(strict, url("delete-user"), {"username": "alice", "preview": True}, HTTP_X_CSRFTOKEN=token)[0] == 200


def test_a_preview_changes_nothing_and_shows_the_lockouts(alice, operator):
    before = state()
    deny = {"subject": "alice", "entries": [{"resources": ["Topic:TopicA"], "actions": ["Pub"], "decision": "Deny"}]}
    for name, body in (
        ("delete-user", {"username": "alice"}),
        ("update-user", {"username": "alice", "userStatus": "disable"}),
        ("put-policy", deny),
        ("delete-policy", {"username": "alice", "resources": ["Topic:TopicA"]}),
    ):
        status, answer = post(operator, url(name), {**body, "preview": True})
        assert status == 200 and answer["applied"] is False and answer["result"] == "preview", (name, answer)
        assert answer["version"] == 2 and "user" not in answer and "password" not in answer
        assert {(lo["username"], lo["resource"], lo["action"]) for lo in answer["lockouts"]} == {
            ("alice", "Topic:TopicA", "Pub"),
            ("alice", "Topic:TopicA", "Sub"),
        }, name
        assert all(lo["reason"] for lo in answer["lockouts"])
    status, answer = post(operator, url("create-user"), {"username": "bob", "preview": True})
    assert status == 200 and answer["lockouts"] == [] and "password" not in answer
    assert state() == before


def test_an_applied_change_is_stored_and_audited_under_the_operator(alice, operator):
    status, made = post(operator, url("create-user"), {"username": "bob", "userType": "Normal"})
    assert status == 200 and made["applied"] and made["version"] == 3
    assert made["user"]["username"] == "bob" and len(made["password"]) >= 24  # generated, shown this once
    assert made["password"] not in operator.get(PAGE).content.decode()
    entry = {"resources": ["Topic:Orders*", "Group:billing"], "actions": ["Sub"], "sourceIps": ["10.0.0.0/8"]}
    status, granted = post(operator, url("put-policy"), {"subject": "User:bob", "entries": [entry]})
    assert status == 200 and [e["resource"] for e in granted["policy"]["entries"]] == ["Topic:Orders*", "Group:billing"]
    assert post(operator, url("update-user"), {"username": "bob", "userStatus": "disable"})[0] == 200
    status, cut = post(operator, url("delete-policy"), {"username": "bob", "resources": ["Group:billing"]})
    assert status == 200 and [e["resource"] for e in cut["policy"]["entries"]] == ["Topic:Orders*"]
    status, gone = post(operator, url("delete-user"), {"username": "alice"})
    assert status == 200 and len(gone["lockouts"]) == 2

    bob = AclUser.objects.get(cluster_name="c1", username="bob")
    assert bob.user_status == "disable" and [e["resource"] for e in bob.policy.entries] == ["Topic:Orders*"]
    assert not AclUser.objects.filter(username="alice").exists() and AclVersion.objects.get(cluster_name="c1").version == 7
    rows = OperatorAction.objects.filter(actor="ops").order_by("id")
    assert [r.action for r in rows] == ["createUser", "createAcl", "updateUser", "deleteAcl", "deleteUser"]
    assert rows[4].after["lockouts"][0]["username"] == "alice" and rows[0].cluster_name == "c1"
    assert made["password"] not in json.dumps(list(OperatorAction.objects.values("params", "before", "after", "detail")))


@pytest.mark.parametrize(
    ("name", "body", "fields"),
    [
        ("create-user", {"username": "bad name!"}, {"username"}),
        ("create-user", {"username": "carol", "password": "has spaces in it"}, {"password"}),
        ("create-user", {"username": "carol", "userType": "Root"}, {"userType"}),
        ("update-user", {"username": "alice"}, {"non_field_errors"}),
        ("update-user", {"username": "", "userType": "Super"}, {"username"}),
        (
            "put-policy",
            {"subject": "User:alice", "entries": [{"resources": ["Topic:A"], "actions": ["Fly"]}]},
            {"entries[0].actions"},
        ),
        (
            "put-policy",
            {"subject": "User:alice", "entries": [{"resources": ["Queue:A"], "actions": ["Pub"]}]},
            {"entries[0].resources"},
        ),
        ("put-policy", {"subject": "User:alice", "entries": []}, {"entries"}),
        ("delete-policy", {"username": "alice", "resources": ["nope"]}, {"resources"}),
        ("delete-user", {"username": "alice", "preview": "yes"}, {"preview"}),
    ],
)
def test_bad_input_gets_field_errors_and_changes_nothing(alice, operator, name, body, fields):
    before = state()
    status, answer = post(operator, url(name), body)
    assert status == 400 and set(answer["fields"]) == fields, answer
    assert state() == before


def test_refusals_answer_the_services_code_and_status(alice, operator):
    status, answer = post(operator, url("create-user"), {"username": "alice"})
    assert status == 409 and answer["detail"].startswith("29 INVALID_PARAMETER")
    status, answer = post(operator, url("delete-user"), {"username": "nobody", "preview": True})
    assert status == 404 and "USER_NOT_EXIST" in answer["detail"]
    assert post(operator, url("delete-policy"), {"username": "alice", "resources": ["Topic:Nope"]})[0] == 404
    r = operator.post(url("create-user"), "[1]", content_type="application/json")
    assert r.status_code == 400 and r.json()["detail"] == "the body must be a JSON object"
