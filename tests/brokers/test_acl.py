"""The broker's access control (brokers/acl.py) and its two edges (brokers/grpc/guard.py,
brokers/remoting/guard.py): snapshots taken by version and never logged, fail closed until the first,
the official client's signature within the clock window, and a refused request answered its protocol's
code before any handler runs."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from brokers.acl import AccessControl
from brokers.core.access import GrpcCall, GrpcNames, grpc_asks
from brokers.grpc.guard import guarded, peer_ip
from brokers.remoting import guard as remoting_guard
from mqrules.acl import (
    DATE_TIME_FORMAT,
    Decision,
    PolicyEntry,
    Resource,
    User,
    UserType,
    Verdict,
    grpc_signature,
    remoting_content,
    remoting_signature,
    snapshot_wire,
)
from mqrules.acl import Action as A
from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand

pytestmark = pytest.mark.unit

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp()
SECRET = "alice-very-secret-key"


def wire(version: int, *, alice_pub: bool = True, alice_sub: bool = True) -> dict:
    users = [User("alice", SECRET), User("root", "root-secret", UserType.SUPER), User("bob", "bob-secret")]
    entries = []
    if alice_pub:
        entries.append(PolicyEntry(Resource.topic("Orders"), frozenset({A.PUB})))
    if alice_sub:
        entries += [
            PolicyEntry(Resource.topic("Orders"), frozenset({A.SUB})),
            PolicyEntry(Resource.parse("Group:g*"), frozenset({A.SUB})),
        ]
    entries.append(PolicyEntry(Resource.topic("Secret"), frozenset({A.ALL}), Decision.DENY))
    return snapshot_wire(version, users, {"alice": entries, "bob": []})


def access(*, authentication=True, authorization=True, now=NOW, skew_ms=60_000) -> AccessControl:
    clock = [now]
    control = AccessControl(authentication, authorization, skew_ms, clock=lambda: clock[0])
    control.clock_value = clock  # type: ignore[attr-defined]  # the test's hand on the clock
    return control


def signed(ak: str = "alice", sk: str = SECRET, at: float = NOW) -> list[tuple[str, str]]:
    date_time = datetime.fromtimestamp(at, UTC).strftime(DATE_TIME_FORMAT)
    header = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={grpc_signature(sk, date_time)}"
    return [("x-mq-date-time", date_time), ("authorization", header), ("x-mq-client-id", "c")]


SEND = grpc_asks(GrpcCall.SEND_MESSAGE, GrpcNames(("Orders",)))
RECEIVE = grpc_asks(GrpcCall.RECEIVE_MESSAGE, GrpcNames(("Orders",), "g1"))


# --- snapshots ----------------------------------------------------------------------------------------


def test_fail_closed_until_the_first_snapshot():
    control = access()
    judgement = control.check_grpc(signed(), "127.0.0.1", SEND)
    assert (judgement.verdict, judgement.detail) == (Verdict.UNAUTHENTICATED, "access-control data not received yet")
    control.registered({"registered": True, "acl": wire(1)})
    assert control.check_grpc(signed(), "127.0.0.1", SEND).allowed


@pytest.mark.parametrize(
    "second, kept",
    [(2, 2), (1, 1), (0, 1)],
    ids=["a newer version is taken", "the same version is ignored", "an older one is ignored"],
)
def test_the_highest_version_is_kept(second, kept):
    control = access()
    control.apply(wire(1), "push")
    asyncio.run(control.pushed(wire(second, alice_pub=False)))
    assert control.version == kept
    assert control.check_grpc(signed(), "127.0.0.1", SEND).allowed is (kept == 1)


def test_a_registration_answer_without_acl_keeps_what_is_held():
    control = access()
    control.registered({"acl": wire(3)})
    control.registered({"registered": True})
    assert control.version == 3


@pytest.mark.parametrize(
    "raw",
    [
        "not an object",
        {"version": 5},
        {"version": "9", "users": [], "policies": []},
        {"version": 5, "users": [{"username": "eve", "secretKey": "leaked-secret-zz"}], "policies": []},
        {"version": 5, "users": [], "policies": [{"username": "x", "entries": [{"resource": "Nope:x", "actions": "Pub"}]}]},
    ],
    ids=["not an object", "no users", "a version that is no count", "a user without a type", "a bad policy"],
)
def test_a_malformed_snapshot_is_ignored_and_its_secrets_never_logged(raw, caplog):
    control = access()
    control.apply(wire(1), "push")
    with caplog.at_level(logging.DEBUG, logger="brokers.acl"):
        assert control.apply(raw, "push") is False
    assert control.version == 1
    assert "ignored" in caplog.text
    assert "leaked-secret-zz" not in caplog.text and SECRET not in caplog.text


def test_taking_a_snapshot_logs_no_secret(caplog):
    with caplog.at_level(logging.DEBUG, logger="brokers.acl"):
        access().apply(wire(7), "registration answer")
    assert "version 7" in caplog.text
    assert SECRET not in caplog.text and "root-secret" not in caplog.text


# --- gRPC checks ----------------------------------------------------------------------------------------

CASES = [
    ("allowed Pub", signed(), SEND, Verdict.ALLOWED),
    ("allowed Sub on the group and topic", signed(), RECEIVE, Verdict.ALLOWED),
    ("no Pub on another topic", signed(), grpc_asks(GrpcCall.SEND_MESSAGE, GrpcNames(("Bills",))), Verdict.FORBIDDEN),
    ("denied topic", signed(), grpc_asks(GrpcCall.SEND_MESSAGE, GrpcNames(("Secret",))), Verdict.FORBIDDEN),
    ("a group outside the prefix", signed(), grpc_asks(GrpcCall.RECEIVE_MESSAGE, GrpcNames(("Orders",), "h")), Verdict.FORBIDDEN),
    ("a user without policies", signed("bob", "bob-secret"), SEND, Verdict.FORBIDDEN),
    ("a super user", signed("root", "root-secret"), grpc_asks(GrpcCall.SEND_MESSAGE, GrpcNames(("Secret",))), Verdict.ALLOWED),
    ("a wrong secret", signed(sk="wrong"), SEND, Verdict.UNAUTHENTICATED),
    ("an unknown key", signed("mallory", "x"), SEND, Verdict.UNAUTHENTICATED),
    ("no credentials", [], SEND, Verdict.UNAUTHENTICATED),
    ("a date outside the window (replayed)", signed(at=NOW - 61), SEND, Verdict.UNAUTHENTICATED),
    ("a date ahead of the window", signed(at=NOW + 61), SEND, Verdict.UNAUTHENTICATED),
    ("a date within the window", signed(at=NOW - 59), SEND, Verdict.ALLOWED),
    ("authentication only asks nothing more", signed("bob", "bob-secret"), (), Verdict.ALLOWED),
]


@pytest.mark.parametrize("metadata, asks, verdict", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_grpc(metadata, asks, verdict):
    control = access()
    control.apply(wire(1), "push")
    assert control.check_grpc(metadata, "10.0.0.1", asks).verdict is verdict


def test_a_cached_credential_is_still_held_to_the_window():
    control = access()
    control.apply(wire(1), "push")
    metadata = signed()
    assert control.check_grpc(metadata, "10.0.0.1", SEND).allowed
    control.clock_value[0] = NOW + 61  # the same header, replayed a minute later
    assert control.check_grpc(metadata, "10.0.0.1", SEND).verdict is Verdict.UNAUTHENTICATED


def test_a_new_snapshot_takes_effect_on_the_next_call_despite_the_caches():
    control = access()
    control.apply(wire(1), "push")
    assert control.check_grpc(signed(), "10.0.0.1", SEND).allowed
    control.apply(wire(2, alice_pub=False), "push")
    assert control.check_grpc(signed(), "10.0.0.1", SEND).verdict is Verdict.FORBIDDEN


@pytest.mark.parametrize(
    "authentication, authorization, metadata, asks, verdict",
    [
        (True, False, signed(), grpc_asks(GrpcCall.SEND_MESSAGE, GrpcNames(("Secret",))), Verdict.ALLOWED),
        (True, False, signed(sk="wrong"), SEND, Verdict.UNAUTHENTICATED),
        (False, True, signed(sk="wrong"), SEND, Verdict.ALLOWED),
        (False, True, signed(sk="wrong"), grpc_asks(GrpcCall.SEND_MESSAGE, GrpcNames(("Bills",))), Verdict.FORBIDDEN),
        (False, True, [], SEND, Verdict.UNAUTHENTICATED),
    ],
    ids=[
        "authentication only: any action",
        "authentication only: a bad signature",
        "authorization only: the claimed user's policies",
        "authorization only: refused",
        "authorization only: nobody claimed",
    ],
)
def test_either_switch_alone(authentication, authorization, metadata, asks, verdict):
    control = access(authentication=authentication, authorization=authorization)
    control.apply(wire(1), "push")
    assert control.check_grpc(metadata, "10.0.0.1", asks).verdict is verdict


@pytest.mark.parametrize(
    "peer, ip",
    [("ipv4:10.1.2.3:5678", "10.1.2.3"), ("ipv6:[::1]:5678", "::1"), ("ipv6:%5B::1%5D:5678", "::1"), ("unix:/tmp/s", None)],
)
def test_peer_ip(peer, ip):
    assert peer_ip(peer) == ip


# --- the gRPC edge -----------------------------------------------------------------------------------------


class Context:
    def __init__(self, metadata):
        self.metadata = metadata

    def invocation_metadata(self):
        return tuple(self.metadata)

    def peer(self):
        return "ipv4:10.0.0.1:40000"


class Handler:
    def __init__(self):
        self.ran = []

    async def SendMessage(self, request, context):
        self.ran.append("send")
        return spb.SendMessageResponse(status=pb.Status(code=pb.Code.OK))

    async def ReceiveMessage(self, request, context):
        self.ran.append("receive")
        yield spb.ReceiveMessageResponse(status=pb.Status(code=pb.Code.OK))

    async def Telemetry(self, request_iterator, context):
        self.ran.append("telemetry")
        yield spb.TelemetryCommand(status=pb.Status(code=pb.Code.OK))


def send_request(topic: str) -> spb.SendMessageRequest:
    request = spb.SendMessageRequest()
    request.messages.add().topic.name = topic
    return request


@pytest.mark.parametrize(
    "sk, topic, code",
    [(SECRET, "Orders", pb.Code.OK), (SECRET, "Bills", pb.Code.FORBIDDEN), ("x", "Orders", pb.Code.UNAUTHORIZED)],
    ids=["allowed: the handler answers", "forbidden before the handler", "unauthorized before the handler"],
)
def test_a_refused_send_never_reaches_its_handler(sk, topic, code):
    control, handler = access(), Handler()
    control.apply(wire(1), "push")
    response = asyncio.run(guarded(control, handler.SendMessage)(send_request(topic), Context(signed(sk=sk))))
    assert response.status.code == code
    assert handler.ran == (["send"] if code == pb.Code.OK else [])


def test_a_refused_receive_answers_one_status_and_a_refused_telemetry_ends():
    control, handler = access(), Handler()
    control.apply(wire(1, alice_sub=False), "push")
    request = spb.ReceiveMessageRequest()
    request.group.name, request.message_queue.topic.name = "g1", "Orders"

    async def run():
        received = [r async for r in guarded(control, handler.ReceiveMessage)(request, Context(signed()))]
        telemetry = [c async for c in guarded(control, handler.Telemetry)(iter(()), Context(signed(sk="x")))]
        return received, telemetry

    received, telemetry = asyncio.run(run())
    assert [r.status.code for r in received] == [pb.Code.FORBIDDEN]
    assert [c.status.code for c in telemetry] == [pb.Code.UNAUTHORIZED]
    assert handler.ran == []


def test_access_control_switches_on_and_off_on_a_running_broker():
    """updateBrokerConfig of authenticationEnabled / authorizationEnabled: the wrapped edges read the
    switch at every call, and the snapshot taken while off is there when it is switched on."""
    handler = Handler()
    control = access(authentication=False, authorization=False)
    control.apply(wire(1), "registration answer")
    send = guarded(control, handler.SendMessage)

    async def stored(request, connection):
        return request.response(ResponseCode.SUCCESS)

    remoting = remoting_guard.guarded(control, {RequestCode.SEND_MESSAGE_V2: stored})
    refused = send_request("Bills")

    def codes() -> tuple[int, int]:
        grpc_code = asyncio.run(send(refused, Context(signed(sk="x")))).status.code
        request = remoting_request(RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "Bills"}, b"x", sk="x")
        return grpc_code, asyncio.run(remoting[RequestCode.SEND_MESSAGE_V2](request, Connection())).code

    assert codes() == (pb.Code.OK, ResponseCode.SUCCESS)  # off: every call reaches its handler
    control.switch(True, True)
    assert codes() == (pb.Code.UNAUTHORIZED, ResponseCode.NO_PERMISSION)
    control.switch(False, False)
    assert codes() == (pb.Code.OK, ResponseCode.SUCCESS)
    assert guarded(None, handler.SendMessage) == handler.SendMessage


# --- the remoting edge -------------------------------------------------------------------------------------


class Connection:
    remote = "10.0.0.1:40001"


def remoting_request(code: int, fields: dict, body: bytes, ak: str = "alice", sk: str = SECRET) -> RemotingCommand:
    fields = {**fields, "AccessKey": ak, "OnsChannel": "ALIYUN"}
    fields["Signature"] = remoting_signature(sk, remoting_content(fields, body))
    return RemotingCommand(code=code, opaque=7, ext_fields=fields, body=body)


@pytest.mark.parametrize(
    "topic, sk, code",
    [
        ("Orders", SECRET, ResponseCode.SUCCESS),
        ("Bills", SECRET, ResponseCode.NO_PERMISSION),
        ("Orders", "x", ResponseCode.NO_PERMISSION),
    ],
    ids=["allowed", "forbidden: NO_PERMISSION", "a bad signature: NO_PERMISSION"],
)
def test_a_remoting_send_is_checked_before_its_handler(topic, sk, code):
    control = access()
    control.apply(wire(1), "push")
    ran = []

    async def handler(request, connection):
        ran.append(request.code)
        return request.response(ResponseCode.SUCCESS)

    handlers = remoting_guard.guarded(control, {RequestCode.SEND_MESSAGE_V2: handler})
    request = remoting_request(RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": topic}, b"body", sk=sk)
    reply = asyncio.run(handlers[RequestCode.SEND_MESSAGE_V2](request, Connection()))
    assert reply.code == code
    assert ran == ([RequestCode.SEND_MESSAGE_V2] if code == ResponseCode.SUCCESS else [])
    if code != ResponseCode.SUCCESS:
        assert reply.remark


def test_an_unreadable_body_is_refused_no_permission():
    control = access()
    control.apply(wire(1), "push")

    async def handler(request, connection):
        raise AssertionError("not reached")

    handlers = remoting_guard.guarded(control, {RequestCode.HEART_BEAT: handler})
    reply = asyncio.run(handlers[RequestCode.HEART_BEAT](remoting_request(RequestCode.HEART_BEAT, {}, b"{nope"), Connection()))
    assert (reply.code, reply.remark.startswith("parse authorization context error")) == (ResponseCode.NO_PERMISSION, True)
