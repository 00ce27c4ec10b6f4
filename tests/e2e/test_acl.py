"""Brokers enforce ACL 2.0 (issue 39 item 2; docs/acl.md) with real processes: the control plane (users
and policies over its REST API), a broker with authenticationEnabled and authorizationEnabled, the
official Python client with each user's credentials in a process of its own, ali-ons over remoting, and
hand-signed gRPC calls where a client cannot be made to misbehave (an old date, an ack by a stranger).

One set of processes serves every case (a module fixture; the cases run in file order, the restart
last). "Nothing stored" is read as the topic's end offsets, asked by a Super user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from chaos.remoting_clients import remoting_client
from controlplane.models import ApiToken
from mqrules.acl import DATE_TIME_FORMAT, grpc_signature, remoting_content, remoting_signature
from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand, encode_frame
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from testkit.procs import ROOT, python, wait_until
from testkit.remoting import RemotingClient
from tests.conftest import clear_redis
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.e2e.test_remoting_clients import alive_and, remoting_nameserver
from tests.procs import create_topic, uvicorn_server

# django_db: for pytest-django to create the test database; the cases write nothing of their own (the
# fixture's rows are committed before them and flushed after the last).
pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

CLUSTER, BROKER, TOPIC, QUEUES = "acl", "acl-a", "Orders", 4
UNAUTHORIZED, FORBIDDEN = pb.Code.UNAUTHORIZED, pb.Code.FORBIDDEN
SECRETS = {"root": "root-secret-1", "alice": "alice-secret-1", "bob": "bob-secret-1"}
POLICIES = {
    "alice": [
        {"resources": [f"Topic:{TOPIC}"], "actions": ["Pub", "Sub"]},
        {"resources": ["Group:alice-*"], "actions": ["Sub"]},
    ],
    "bob": [{"resources": [f"Topic:{TOPIC}"], "actions": ["Sub"]}, {"resources": ["Group:bob-g"], "actions": ["Sub"]}],
}


@dataclass
class Cluster:
    base: str
    admin: dict[str, str]
    namesrv: str
    conf: Path
    ports: BrokerPorts
    proc: subprocess.Popen
    log_dir: Path

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    def rest(self, method: str, path: str, body: dict | None = None) -> dict:
        r = httpx.request(method, f"{self.base}/api/v1/clusters/{CLUSTER}/acl/{path}", headers=self.admin, json=body, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture(autouse=True)
def clean_state():
    """Overrides tests/conftest.py's, which empties Redis before every case: here the cases share the
    module fixture's processes, whose liveness and websocket bindings (where the control plane's pushes
    go) must outlive each case. The module fixture starts from an empty Redis instead."""
    yield


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Cluster]:
    """The control plane with the users and policies, and one broker enforcing them. The tests touch no
    database of their own: what the fixture wrote stays for every case, and is flushed at the end."""
    tmp = tmp_path_factory.mktemp("acl")
    clear_redis()
    with django_db_blocker.unblock():
        broker_token = ApiToken.issue("acl-broker", "broker")[1]
        admin = {"Authorization": f"Bearer {ApiToken.issue('acl-admin', 'admin')[1]}"}
    try:
        with uvicorn_server() as base, remoting_nameserver() as namesrv:
            setup = Cluster(base, admin, namesrv, tmp / "broker.conf", BrokerPorts.reserve(), None, tmp)  # type: ignore[arg-type]
            for name, secret in SECRETS.items():
                user_type = "Super" if name == "root" else "Normal"
                setup.rest("POST", "users", {"username": name, "password": secret, "userType": user_type})
            for name, entries in POLICIES.items():
                setup.rest("POST", "policies", {"subject": f"User:{name}", "entries": entries})
            keys = broker_keys(
                BROKER,
                tmp / "store",
                setup.ports,
                base,
                cluster=CLUSTER,
                token=broker_token,
                mappedFileSizeCommitLog=1048576,
                authenticationEnabled="true",
                authorizationEnabled="true",
                authenticationSkewMillis=60_000,
            )
            write_broker_conf(setup.conf, keys)
            setup.proc = start_broker(setup.conf, BROKER)
            try:
                # the broker's gRPC port opens before its first registration answer brings the ACL
                ready = lambda: call(setup, "root", "QueryRoute", route_request()).status.code != UNAUTHORIZED  # noqa: E731
                wait_until(ready, 30, "the broker with the ACL", tolerate=(grpc.RpcError,))
                create_topic(base, admin, TOPIC, QUEUES, clusterName=CLUSTER)
                wait_for(lambda: call(setup, "root", "QueryRoute", route_request()).status.code == pb.Code.OK, 15, "the route")
                yield setup
            finally:
                stop(setup.proc)
    finally:
        with django_db_blocker.unblock():
            from django.core.management import call_command

            call_command("flush", interactive=False, verbosity=0)


# --- hand-made gRPC calls -------------------------------------------------------------------------------


def metadata(ak: str, sk: str, at: float | None = None) -> list[tuple[str, str]]:
    """What rocketmq-python-client's Signature.metadata sends, dated ``at`` (default now, in UTC)."""
    date_time = datetime.fromtimestamp(time.time() if at is None else at, UTC).strftime(DATE_TIME_FORMAT)
    header = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={grpc_signature(sk, date_time)}"
    return [("x-mq-date-time", date_time), ("authorization", header), ("x-mq-client-id", f"acl-test-{ak}")]


def call(c: Cluster, ak: str, rpc_name: str, request, sk: str | None = None, at: float | None = None):
    with grpc.insecure_channel(c.grpc_addr) as channel:
        method = getattr(rpc.MessagingServiceStub(channel), rpc_name)
        return method(request, metadata=metadata(ak, SECRETS.get(ak, "") if sk is None else sk, at), timeout=5)


def route_request() -> spb.QueryRouteRequest:
    return spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))


def send_request() -> spb.SendMessageRequest:
    message = pb.Message(
        topic=pb.Resource(name=TOPIC),
        body=b"hand-signed",
        system_properties=pb.SystemProperties(
            message_id=f"{time.time_ns():032X}", body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
        ),
    )
    return spb.SendMessageRequest(messages=[message])


def stored(c: Cluster) -> int:
    """Messages in the topic (the sum of its queues' end offsets), as a Super user reads them."""
    total = 0
    for q in range(QUEUES):
        mq = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=q, broker=pb.Broker(name=BROKER))
        answer = call(
            c, "root", "QueryOffset", spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.QueryOffsetPolicy.END)
        )
        assert answer.status.code == pb.Code.OK, answer.status
        total += answer.offset
    return total


# --- the official client, in a process of its own -----------------------------------------------------------


def official(c: Cluster, op: str, ak: str, sk: str | None = None, *options: str) -> dict:
    argv = python("-m", "tests.e2e.acl_client", op, "--access", c.grpc_addr, "--ak", ak, "--sk", sk or SECRETS[ak])
    argv += ["--topic", TOPIC, "--client-log", str(c.log_dir / f"client-{op}-{ak}.log"), *options]
    done = subprocess.run(argv, cwd=ROOT, env={**os.environ, "TZ": "UTC"}, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the cases ---------------------------------------------------------------------------------------------


def test_a_user_allowed_pub_sends_and_one_without_it_gets_40300_with_nothing_stored(cluster):
    before = stored(cluster)
    assert official(cluster, "send", "alice", None, "--count", "3") == {"sent": 3, "code": None, "error": None}
    assert stored(cluster) == before + 3
    refused = official(cluster, "send", "bob", None, "--count", "1")
    assert (refused["sent"], refused["code"]) == (0, FORBIDDEN), refused
    assert stored(cluster) == before + 3


@pytest.mark.parametrize(
    "ak, sk",
    [("alice", "not-alices-secret"), ("mallory", "whatever")],
    ids=["a wrong secret", "an unknown key"],
)
def test_bad_credentials_get_40100(cluster, ak, sk):
    """The official client cannot even start: its route query is refused (rocketmq-python-client 5.x logs
    the answer's code and raises "failed to fetch topic route"); the same credentials signed by hand show
    the broker's answer, 40100, for the route and for a send."""
    before = stored(cluster)
    refused = official(cluster, "send", ak, sk, "--count", "1")
    assert refused["sent"] == 0 and "route" in refused["error"], refused
    for rpc_name, request in (("QueryRoute", route_request()), ("SendMessage", send_request())):
        assert call(cluster, ak, rpc_name, request, sk=sk).status.code == UNAUTHORIZED
    assert stored(cluster) == before


def test_a_signature_dated_outside_the_window_is_refused(cluster):
    """authenticationSkewMillis is 60 s here: a header captured two minutes ago is not taken again."""
    before = stored(cluster)
    for at in (time.time() - 120, time.time() + 120):
        answer = call(cluster, "alice", "SendMessage", send_request(), at=at)
        assert answer.status.code == UNAUTHORIZED and "clock" in answer.status.message, answer.status
    assert call(cluster, "alice", "SendMessage", send_request()).status.code == pb.Code.OK  # the same, dated now
    assert stored(cluster) == before + 1


def test_sub_is_enforced_for_receive_and_ack(cluster):
    got = official(cluster, "receive", "alice", None, "--group", "alice-g", "--want", "3")
    assert (got["code"], got["received"] >= 3, got["acked"] == got["received"]) == (None, True, True), got
    # bob may Sub on the topic but not on alice's group
    refused = official(cluster, "receive", "bob", None, "--group", "alice-g", "--timeout-s", "5")
    assert (refused["received"], refused["code"]) == (0, FORBIDDEN), refused
    # an ack is authorized before its receipt handle is even read: a stranger's is FORBIDDEN, alice's
    # (a made-up handle) reaches the handler, which refuses the handle
    ack = spb.AckMessageRequest(
        group=pb.Resource(name="alice-g"),
        topic=pb.Resource(name=TOPIC),
        entries=[spb.AckMessageEntry(message_id="X", receipt_handle="not-a-handle")],
    )
    assert call(cluster, "bob", "AckMessage", ack).status.code == FORBIDDEN
    assert call(cluster, "alice", "AckMessage", ack).status.code not in (FORBIDDEN, UNAUTHORIZED)


@pytest.mark.parametrize("ak, allowed", [("alice", True), ("bob", False)], ids=["allowed Pub", "no Pub: NO_PERMISSION"])
def test_remoting_sends_with_ali_ons(cluster, ak, allowed):
    before = stored(cluster)
    options = ("--count", "2", "--timeout-ms", "3000", "--access-key", ak, "--secret-key", SECRETS[ak])
    with remoting_client("node", "produce", f"ali-ons-{ak}", cluster.log_dir, cluster.namesrv, TOPIC, *options) as (p, events):
        wait_for(lambda: alive_and(p, lambda: len(events.of("ack", "fail")) == 2), 60, "both sends answered")
    if allowed:
        assert events.of("fail") == [] and stored(cluster) == before + 2
        return
    # ali-ons retries a NO_PERMISSION answer, then throws "Send [n] times, still failed" without the
    # code: the same send signed by hand shows the broker's answer
    assert events.of("ack") == [] and len(events.of("fail")) == 2
    for sk in (SECRETS[ak], "not-bobs-secret"):
        answer = remoting_send(cluster, ak, sk)
        assert (answer.code, bool(answer.remark)) == (ResponseCode.NO_PERMISSION, True), answer
    assert stored(cluster) == before


def remoting_send(c: Cluster, ak: str, sk: str) -> RemotingCommand:
    """SEND_MESSAGE_V2 signed as ali-ons signs it (AccessKey, OnsChannel, Signature over the sorted fields and the body)."""
    body = b"hand-signed over remoting"
    fields = {"a": "hand-producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": str(int(time.time() * 1000))}
    fields |= {"h": "0", "i": "", "j": "0", "AccessKey": ak, "OnsChannel": "ALIYUN"}
    fields["Signature"] = remoting_signature(sk, remoting_content(fields, body))
    with RemotingClient(f"127.0.0.1:{c.ports.listen}") as client:
        command = replace(client.command(RequestCode.SEND_MESSAGE_V2, body=body), ext_fields=fields)
        client.sock.sendall(encode_frame(command))
        return client.answer(command.opaque, timeout=5)


def test_a_policy_change_reaches_the_running_broker(cluster):
    assert call(cluster, "bob", "SendMessage", send_request()).status.code == FORBIDDEN
    started = time.monotonic()
    cluster.rest("PATCH", "policies/bob", {"entries": [{"resources": [f"Topic:{TOPIC}"], "actions": ["Pub", "Sub"]}]})
    took = wait_for(lambda: call(cluster, "bob", "SendMessage", send_request()).status.code == pb.Code.OK, 10, "bob's Pub")
    print(f"the policy change took effect {took * 1000:.0f} ms after its REST call ({(time.monotonic() - started):.2f} s)")


def switch(c: Cluster, on: bool) -> dict:
    """updateBrokerConfig of both switches, through the control plane to the running broker."""
    value = "true" if on else "false"
    body = {"brokerName": BROKER, "updates": {"authenticationEnabled": value, "authorizationEnabled": value}}
    r = httpx.post(f"{c.base}/api/v1/operations/brokers/config", headers=c.admin, json=body, timeout=15)
    assert r.status_code == 200, r.text
    return r.json()


def test_access_control_switches_off_and_on_on_the_running_broker(cluster):
    """docs/acl.md's rollout: the switches change without a restart, and a client's connection sees each
    change at its next call."""
    assert call(cluster, "nobody", "SendMessage", send_request(), sk="guess").status.code == UNAUTHORIZED
    switch(cluster, False)
    before = stored(cluster)
    assert call(cluster, "nobody", "SendMessage", send_request(), sk="guess").status.code == pb.Code.OK
    assert stored(cluster) == before + 1
    switch(cluster, True)
    assert call(cluster, "nobody", "SendMessage", send_request(), sk="guess").status.code == UNAUTHORIZED
    assert stored(cluster) == before + 1


def test_a_broker_restarted_during_a_policy_change_enforces_the_latest_at_once(cluster):
    """The broker is down while alice loses Pub; from its first answer on it never lets her send: it
    refuses everything until its registration answer brings the snapshot (fail closed), then by it."""
    stop(cluster.proc)
    cluster.rest("PATCH", "policies/alice", {"entries": [{"resources": [f"Topic:{TOPIC}"], "actions": ["Sub"]}]})
    cluster.proc = start_broker(cluster.conf, BROKER)
    answers: list[tuple[int, str]] = []

    def refused_by_the_policy() -> bool:
        try:
            status = call(cluster, "alice", "SendMessage", send_request()).status
        except grpc.RpcError:
            return False  # not listening yet
        answers.append((status.code, status.message))
        return status.code == FORBIDDEN

    wait_for(refused_by_the_policy, 30, "alice's send refused by the new policy")
    print(f"answers after the restart: {answers}")
    assert {code for code, _ in answers} <= {UNAUTHORIZED, FORBIDDEN}, answers
    assert all("not received yet" in message for code, message in answers if code == UNAUTHORIZED), answers
    assert call(cluster, "alice", "QueryRoute", route_request()).status.code == pb.Code.OK  # Sub kept
