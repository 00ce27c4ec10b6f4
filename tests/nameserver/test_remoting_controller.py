"""The embedded controller's reads on the nameserver's remoting endpoint (issue 36 item 5), over a real
socket against real Postgres and Redis: mqadmin's getControllerMetaData (1005) and getSyncStateSet
(1006), with the response header and body read back by the tables transcribed from apache/rocketmq
(GetMetaDataResponseHeader, BrokerReplicasInfo); the controller's writes refused, nothing stored.
The endpoint gets the controller's handlers from its caller (``serve_remoting``), as RocketMQ's
namesrv serves its controller with ``enableControllerInNamesrv``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator

import pytest
from django.test import override_settings

from controlplane.controller import remoting as controller_remoting
from controlplane.controller.models import ReplicaGroup, Transition
from controlplane.operations.management.commands.serve_remoting import advertised_address, extra_handlers
from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand, SerializeType
from mqrules.remoting.headers import GET_METADATA_RESPONSE, parse_header
from testkit.controlplane import remoting_argv
from testkit.ports import free_port
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body

from .test_remoting import Served, call

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ADVERTISED = "10.1.2.3:9876"  # where clients reach the endpoint: the controller names it as its leader

# BrokerReplicasInfo's fields as fastjson writes them (nulls left out): what mqadmin's reader maps.
REPLICAS_INFO_FIELDS = {
    "masterBrokerId",
    "masterAddress",
    "masterEpoch",
    "syncStateSetEpoch",
    "inSyncReplicas",
    "notInSyncReplicas",
}
REPLICA_IDENTITY_FIELDS = {"brokerName", "brokerId", "brokerAddress", "alive"}


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served(controller_remoting.handlers(ADVERTISED))
    try:
        yield s
    finally:
        s.stop()


def ask(served: Served, code: int, body: bytes = b"", serialize_type=SerializeType.JSON) -> RemotingCommand:
    """A request as mqadmin sends it: ``createRequestCommand(code, null)``, no extFields."""
    with served.connect() as sock:
        return call(sock, RemotingCommand(code, opaque=11, body=body, serialize_type=serialize_type))


def ok(r):
    assert r.status_code == 200, r.content
    return r.json()


def join(broker_api, broker_id: int, name: str = "g1") -> None:
    """What a controller-mode broker does on start (reference §2.1): apply an id, register, heartbeat."""
    ok(broker_api.post(f"{CTL}/brokers/apply-broker-id", apply_body(broker_id, name), format="json"))
    ok(
        broker_api.post(
            f"{CTL}/brokers/register",
            {"clusterName": "c1", "brokerName": name, "brokerId": broker_id, "brokerAddress": addr(broker_id)},
            format="json",
        )
    )
    ok(broker_api.post(f"{CTL}/brokers/heartbeat", heartbeat_body(broker_id, name), format="json"))


@pytest.fixture
def broker_set(api) -> None:
    """g1: replicas 1, 2, 3 alive; 1 elected master (its SyncStateSet: itself)."""
    for broker_id in (1, 2, 3):
        join(api, broker_id)
    body = {"clusterName": "c1", "brokerName": "g1", "brokerId": 1, "designateElect": True}
    ok(api.post(f"{CTL}/elect-master", body, format="json"))


# --- 1005 CONTROLLER_GET_METADATA_INFO -----------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", list(SerializeType), ids=lambda t: t.name)
def test_metadata_names_this_endpoint_as_the_leader(served, serialize_type):
    reply = ask(served, RequestCode.CONTROLLER_GET_METADATA_INFO, serialize_type=serialize_type)
    assert (reply.code, reply.body) == (ResponseCode.SUCCESS, b"")
    header = parse_header(GET_METADATA_RESPONSE, reply.ext_fields)
    # Postgres is the consensus point: every control-plane process leads; mqadmin sends 1006 to this address
    assert header["controllerLeaderAddress"] == ADVERTISED
    assert header["isLeader"] is True and header["group"] and header["controllerLeaderId"]
    assert not header["peers"]  # no peers: no Raft group ("" in JSON; the binary header's Java null)


# --- 1006 CONTROLLER_GET_SYNC_STATE_DATA ---------------------------------------------------------------


def test_sync_state_data_is_broker_replicas_info_of_the_sets_asked(api, served, broker_set):
    reply = ask(served, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, json.dumps(["g1", "unknown"]).encode())
    assert reply.code == ResponseCode.SUCCESS
    doc = json.loads(reply.body)
    assert set(doc) == {"replicasInfoTable"}
    table = doc["replicasInfoTable"]
    assert list(table) == ["g1"]  # an unknown set is absent, as ReplicasInfoManager skips it
    info = table["g1"]
    assert set(info) == REPLICAS_INFO_FIELDS
    assert (info["masterBrokerId"], info["masterAddress"]) == (1, addr(1))
    assert info["masterEpoch"] >= 1 and info["syncStateSetEpoch"] >= 1
    replicas = info["inSyncReplicas"] + info["notInSyncReplicas"]
    assert all(set(r) == REPLICA_IDENTITY_FIELDS and r["brokerName"] == "g1" for r in replicas)
    assert [(r["brokerId"], r["brokerAddress"], r["alive"]) for r in info["inSyncReplicas"]] == [(1, addr(1), True)]
    assert [(r["brokerId"], r["alive"]) for r in info["notInSyncReplicas"]] == [(2, True), (3, True)]
    # the REST answer's, from the same selector
    rest = ok(api.get(f"{CTL}/sync-state-data", {"brokerName": ["g1", "unknown"]}))["brokerReplicasInfo"]
    assert rest == table


def test_a_set_without_a_master_leaves_the_master_fields_out(api, served):
    join(api, 1)  # registered, never elected
    reply = ask(served, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, b'["g1"]')
    info = json.loads(reply.body)["replicasInfoTable"]["g1"]
    assert "masterBrokerId" not in info and "masterAddress" not in info  # fastjson leaves nulls out
    assert [r["brokerId"] for r in info["notInSyncReplicas"]] == [1]


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b'"g1"', b'["g1", 7]', b"\xff", b"[" * 20_000],
    ids=["no body", "no names", "not a list", "not all strings", "not UTF-8", "nested too deep"],
)
def test_sync_state_data_without_a_list_of_names_is_a_system_error(served, body):
    reply = ask(served, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body)
    assert reply.code == ResponseCode.SYSTEM_ERROR and "JSON list of broker names" in reply.remark


def test_too_many_names_at_once_is_an_invalid_parameter(served):
    names = [f"g{i}" for i in range(controller_remoting.SYNC_STATE_DATA_MAX_NAMES + 1)]
    reply = ask(served, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, json.dumps(names).encode())
    assert reply.code == ResponseCode.INVALID_PARAMETER


# --- writes, and a process without the controller ------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "where"),
    [
        (1002, "POST /api/v1/controller/elect-master"),
        (1001, "POST /api/v1/controller/alter-sync-state-set"),
        (1011, "POST /api/v1/controller/clean-broker-data"),
        (1009, "PATCH /api/v1/controller/config"),
    ],
    ids=["CONTROLLER_ELECT_MASTER", "CONTROLLER_ALTER_SYNC_STATE_SET", "CLEAN_BROKER_DATA", "UPDATE_CONTROLLER_CONFIG"],
)
def test_a_controller_write_is_refused_naming_the_rest_endpoint(served, broker_set, code, where):
    before = (Transition.objects.count(), list(ReplicaGroup.objects.values_list("master_broker_id", "master_epoch")))
    reply = ask(served, code, json.dumps({"brokerName": "g1"}).encode())
    assert reply.code == ResponseCode.NO_PERMISSION and where in reply.remark
    assert (Transition.objects.count(), list(ReplicaGroup.objects.values_list("master_broker_id", "master_epoch"))) == before


def test_without_the_controller_role_its_codes_are_not_supported():
    with override_settings(CONTROLPLANE_ROLES=frozenset({"nameserver"})):
        assert extra_handlers(ADVERTISED) == {}
    plain = Served()
    try:
        reply = ask(plain, RequestCode.CONTROLLER_GET_METADATA_INFO)
    finally:
        plain.stop()
    assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "1005" not in reply.remark.split("served:")[1]


def test_an_unsupported_code_lists_the_controllers_codes_among_the_served(served):
    reply = ask(served, 9999)
    assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert {"105", "1005", "1006"} <= set(reply.remark.split("served: ")[1].rstrip(")").split(", "))


def test_a_wildcard_bind_advertises_this_machines_address():
    assert advertised_address("127.0.0.1", 9876) == "127.0.0.1:9876"
    host, port = advertised_address("0.0.0.0", 9876).rsplit(":", 1)
    assert port == "9876" and host not in ("0.0.0.0", "")


def test_the_command_serves_the_controllers_reads():
    """``manage.py serve_remoting`` brings the controller's handlers to the nameserver's endpoint and
    names its own address as the leader's."""
    port = free_port()
    proc = subprocess.Popen(remoting_argv(port), env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        assert any(b"remoting endpoint on" in line for line in proc.stderr), "the command did not start"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            reply = call(sock, RemotingCommand(RequestCode.CONTROLLER_GET_METADATA_INFO, opaque=3))
        assert reply.code == ResponseCode.SUCCESS
        assert parse_header(GET_METADATA_RESPONSE, reply.ext_fields)["controllerLeaderAddress"] == f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    assert code == 0
