"""The broker websocket is a router (controlplane/ws.py): each app registers its frames when it is
ready; a frame nobody registered gets an error frame, never a dropped connection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync

from controlplane import ws
from mqrules import validation
from tests.nameserver.test_websocket import call, connected

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

EACH_APPS_FRAMES = {
    "nameserver": {"register", "heartbeat", "unregister", "get_broker_member_group", "static_topic_sealed", "broker_status"},
    "controller": {
        "controller_heartbeat",
        "get_next_broker_id",
        "apply_broker_id",
        "register_broker_to_controller",
        "elect_master",
        "alter_sync_state_set",
        "get_replica_info",
    },
    "audits": {"offset_events"},
    "ground": {"rpc_reply"},  # brokers' answers to the control plane's requests (controlplane/broker_rpc.py)
}


def test_every_app_registered_its_frames_when_it_was_ready():
    assert set(ws.frame_types()) == {"ping"}.union(*EACH_APPS_FRAMES.values())
    owners = {t: ws._handlers[t].__module__ for t in ws.frame_types()}
    assert {owners[t] for t in EACH_APPS_FRAMES["nameserver"]} == {"nameserver.frames"}
    assert {owners[t] for t in EACH_APPS_FRAMES["controller"]} == {"controlplane.controller.frames"}
    assert {owners[t] for t in EACH_APPS_FRAMES["audits"]} == {"audits.frames"}
    assert {owners[t] for t in EACH_APPS_FRAMES["ground"]} == {"controlplane.broker_rpc"}


def test_a_second_handler_for_a_taken_frame_type_is_refused():
    async def other(connection, payload):
        return {}

    with pytest.raises(ValueError, match="already handled by nameserver.frames"):
        ws.register("heartbeat", other)
    ws.register("heartbeat", ws._handlers["heartbeat"])  # the same one again (a second ready()) is harmless


@pytest.fixture
def echo_frame():
    """A frame type registered for one test, as an app would in its ready()."""
    calls = []

    async def echo(connection, payload):
        calls.append((connection.caller.name, payload))
        if payload.get("bad"):
            raise validation.Invalid({"bad": ["must be false"]})
        return {"echo": payload}

    ws.register("test_echo", echo)
    yield calls
    ws._handlers.pop("test_echo")


def test_a_registered_frame_is_routed_and_answered_with_its_seq(broker_token, echo_frame):
    async def scenario():
        sock = await connected(broker_token)
        assert await call(sock, "test_echo", {"n": 1}, seq=41) == {
            "type": "test_echo_result",
            "seq": 41,
            "payload": {"echo": {"n": 1}},
        }
        reply = await call(sock, "test_echo", {"bad": True}, seq=42)
        assert reply["type"] == "error" and reply["seq"] == 42
        assert (reply["payload"]["code"], reply["payload"]["fields"]) == (29, {"bad": ["must be false"]})
        await sock.disconnect()

    async_to_sync(scenario)()
    assert echo_frame == [("token:test-broker", {"n": 1}), ("token:test-broker", {"bad": True})]


def test_an_unregistered_frame_type_gets_an_error_frame_and_the_socket_stays_open(broker_token):
    async def scenario():
        sock = await connected(broker_token)
        reply = await call(sock, "test_echo", {}, seq=5)  # registered by no app
        assert reply == {
            "type": "error",
            "seq": 5,
            "payload": {"code": 3, "name": "REQUEST_CODE_NOT_SUPPORTED", "detail": "unknown frame type 'test_echo'"},
        }
        await sock.send_to(text_data=json.dumps({"type": 7, "seq": 6}))
        assert (await sock.receive_json_from(timeout=10))["payload"]["code"] == 3
        assert await call(sock, "ping", seq=7) == {"type": "ping_result", "seq": 7, "payload": {}}
        await sock.disconnect()

    async_to_sync(scenario)()


def test_the_router_names_no_app_and_no_task_module():
    source = (Path(ws.__file__)).read_text()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    for app in ("nameserver", "controlplane.controller", "audits", "dashboards", "celery_tasks"):
        assert not [line for line in imports if f" {app}" in line], app


def test_a_closed_master_socket_enqueues_its_election_by_a_registered_task_name():
    from controlplane.celery import app
    from controlplane.controller.frames import ON_BROKER_INACTIVE

    app.loader.import_default_modules()  # what a worker does at start: autodiscovery of celery_tasks.tasks
    assert ON_BROKER_INACTIVE in app.tasks
