"""rmqha's ACL verbs (controlplane/cli/acl.py) against a real control plane (uvicorn): createUser shows the
secret key once, createAcl/listAcl/listUser, a change that locks a user out previewed and refused without
a terminal unless --yes, confirmed at a terminal, --dry-run changing nothing, and refusals in one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controlplane.cli import acl as cli_acl
from controlplane.cli import main
from controlplane.models import ApiToken
from tests.nameserver.helpers import register_over_rest
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def plane():
    broker = ApiToken.issue("cli-acl-broker", "broker")[1]
    admin = ApiToken.issue("cli-acl-admin", "admin")[1]
    viewer = ApiToken.issue("cli-acl-viewer", "read")[1]
    with uvicorn_server() as base:
        register_over_rest(base, broker, {"acl-a": "127.0.0.1:10911"}, "cli")
        yield base, admin, viewer


def rmqha(base: str, token: str, *args: str, stdin: str | None = None):
    return CliRunner().invoke(main, ["--url", base, *args], input=stdin, env={"RMQHA_TOKEN": token}, catch_exceptions=False)


def test_users_and_policies_from_the_command_line(plane, monkeypatch):
    base, admin, viewer = plane
    made = rmqha(base, admin, "createUser", "-c", "cli", "-u", "alice", "-p", "alice-Secret-1")
    assert made.exit_code == 0, made.output
    assert "user alice  type Normal  status enable" in made.output and "alice-Secret-1" in made.output
    generated = json.loads(rmqha(base, admin, "--json", "createUser", "-c", "cli", "-u", "bob", "-t", "super").output)
    assert generated["user"]["userType"] == "Super" and len(generated["password"]) >= 32

    listed = rmqha(base, viewer, "listUser", "-c", "cli")
    assert listed.exit_code == 0 and "alice" in listed.output and "bob" in listed.output
    assert "alice-Secret-1" not in listed.output and generated["password"] not in listed.output

    granted = rmqha(base, admin, "createAcl", "-c", "cli", "-s", "User:alice", "-r", "Topic:Orders,Group:G*", "-a", "Pub,Sub")
    assert granted.exit_code == 0, granted.output
    assert "Topic:Orders" in granted.output and "Group:G*" in granted.output
    shown = rmqha(base, viewer, "listAcl", "-c", "cli", "-r", "Topic")
    assert "User:alice  Topic:Orders" in shown.output and "Group:G*" not in shown.output

    # Orders is a topic the cluster knows once a broker registers it; alice may Pub and Sub on it now.
    register = {"Orders": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}
    _register_topics(base, register)
    dry = rmqha(base, admin, "deleteAcl", "-c", "cli", "-s", "alice", "-r", "Topic:Orders", "--dry-run")
    assert dry.exit_code == 0 and "would lock out 2 permission(s)" in dry.output and "Topic:Orders" in dry.output
    refused = rmqha(base, admin, "deleteAcl", "-c", "cli", "-s", "alice", "-r", "Topic:Orders")
    assert refused.exit_code == 1 and "locks users out; nothing changed" in refused.output and "give --yes" in refused.output
    monkeypatch.setattr(cli_acl, "_interactive", lambda: True)
    declined = rmqha(base, admin, "deleteAcl", "-c", "cli", "-s", "alice", "-r", "Topic:Orders", stdin="n\n")
    assert declined.exit_code == 0 and "nothing changed" in declined.output
    assert "Topic:Orders" in rmqha(base, viewer, "listAcl", "-c", "cli").output
    applied = rmqha(base, admin, "deleteAcl", "-c", "cli", "-s", "alice", "-r", "Topic:Orders", stdin="y\n")
    assert applied.exit_code == 0 and "locked out 2 permission(s)" in applied.output
    assert "Topic:Orders" not in rmqha(base, viewer, "listAcl", "-c", "cli").output

    disabled = rmqha(base, admin, "updateUser", "-c", "cli", "-u", "bob", "-s", "disable", "--yes")
    assert disabled.exit_code == 0 and "status disable" in disabled.output
    gone = rmqha(base, admin, "deleteUser", "-c", "cli", "-u", "alice", "--yes")
    assert gone.exit_code == 0 and "user alice deleted" in gone.output

    missing = rmqha(base, admin, "deleteUser", "-c", "cli", "-u", "alice", "--yes")
    assert missing.exit_code == 1 and "3001 USER_NOT_EXIST" in missing.output
    bad = rmqha(base, admin, "createAcl", "-c", "cli", "-s", "bob", "-r", "Queue:X", "-a", "Pub", "--yes")
    assert bad.exit_code == 1 and "entries[0].resources" in bad.output
    forbidden = rmqha(base, viewer, "createUser", "-c", "cli", "-u", "carol")
    assert forbidden.exit_code == 1 and "HTTP 403" in forbidden.output
    nothing = rmqha(base, admin, "updateUser", "-c", "cli", "-u", "bob")
    assert nothing.exit_code == 2 and "give -p/--password" in nothing.output


def _register_topics(base: str, topics: dict) -> None:
    import httpx

    from tests.nameserver.helpers import NS, register_body

    broker = ApiToken.issue("cli-acl-broker-2", "broker")[1]
    body = register_body(0, "127.0.0.1:10911", name="acl-a", cluster="cli", topics=topics, counter=2)
    r = httpx.post(f"{base}{NS}/brokers/register", headers={"Authorization": f"Bearer {broker}"}, json=body, timeout=10)
    assert r.status_code == 200, r.text
