"""Live state updates across real processes: a page's websocket to a real ASGI server hears of an
election made in that server (REST) and of one made in another process (as a Celery worker's would
be): the electing process only notes the group, and the process that serves the page publishes."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack

import httpx
import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from websockets.sync.client import connect

from controlplane.controller import liveness, services
from controlplane.controller.config_store import update_config
from controlplane.controller.core.state import Trigger
from controlplane.models import ApiToken
from tests.controller.helpers import addr
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def session_cookie(user: User) -> str:
    session = SessionStore()
    session.update(
        {
            SESSION_KEY: str(user.pk),
            BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
            HASH_SESSION_KEY: user.get_session_auth_hash(),
        }
    )
    session.create()
    return session.session_key


def next_state(ws, master_epoch: int, timeout: float) -> tuple[dict, float]:
    """The first state update of g1 at this masterEpoch, and when it came."""
    deadline = time.monotonic() + timeout
    while True:
        message = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if message.get("kind") == "state" and message["data"]["masterEpoch"] == master_epoch:
            return message, time.monotonic()


def test_a_page_hears_elections_made_in_its_server_and_in_other_processes():
    for i in (1, 2):
        assert services.apply_broker_id("c1", "g1", i, f"{addr(i)};{i}").ok
        services.heartbeat(liveness.Beat("c1", "g1", i, addr(i), epoch=1, max_offset=100, heartbeat_timeout_millis=120_000))
    assert services.elect_master("g1", broker_id=1, designate=True, trigger=Trigger.OPERATOR).ok
    assert services.alter_sync_state_set(
        "g1", master_broker_id=1, master_epoch=1, new_sync_state_set={1, 2}, sync_state_set_epoch=1
    ).ok
    update_config({"enableElectUncleanMaster": True})  # the second switch-over goes outside the SyncStateSet
    admin = {"Authorization": f"Bearer {ApiToken.issue('live-admin', 'admin')[1]}"}
    viewer = User.objects.create_user("watcher", password="a-long-viewer-password")
    with uvicorn_server() as base, ExitStack() as stack:
        ws = stack.enter_context(
            connect(
                base.replace("http://", "ws://") + "/ws/dashboard/",
                open_timeout=10,
                additional_headers={"Origin": base, "Cookie": f"sessionid={session_cookie(viewer)}"},
            )
        )
        ws.send(json.dumps({"subscribe": "*"}))
        assert json.loads(ws.recv(timeout=10)) == {"type": "subscribed", "to": "*"}

        asked = time.monotonic()
        r = httpx.post(
            f"{base}/api/v1/controller/elect-master",
            headers=admin,
            timeout=10,
            json={"clusterName": "c1", "brokerName": "g1", "brokerId": 2, "designateElect": True},
        )
        assert r.status_code == 200 and r.json()["masterBrokerId"] == 2, r.text
        update, at = next_state(ws, 2, timeout=5)
        assert update["data"]["masterBrokerId"] == 2 and at - asked < 2.0  # the browser test's promise

        asked = time.monotonic()
        assert services.elect_master("g1", broker_id=1, designate=True, trigger=Trigger.OPERATOR).ok  # this process
        update, at = next_state(ws, 3, timeout=5)
        assert update["data"]["masterBrokerId"] == 1 and at - asked < 2.0
