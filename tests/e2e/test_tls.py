"""TLS between every pair of parts (issue 39 item 3, docs/acl.md "TLS"), with real processes: a control
plane over https / wss (its certificate checked by the brokers against the cluster CA), a master and a
slave with ``tlsServerMode=enforcing`` and ``tlsReplicationEnable``, each with its own broker
certificate.

- gRPC: a plaintext client is refused; the official Python client with ``tls_enable`` and the CA in
  ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (its own process) sends and receives.
- The HA link: a stranger slave (plaintext, a self-signed certificate, or a CA-signed certificate of
  another replica group) gets no byte of the log from the master; a real slave pointed at a fake master
  whose certificate the CA did not sign copies nothing from it; the real slave's log is the master's,
  byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from brokers.ha.packets import SlaveHandshake
from brokers.topics import TopicConfig, TopicConfigManager
from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, broker_process, unreachable_control_plane, write_broker_conf
from testkit.certs import CertFiles, broker_tls_conf, create_ca, issue, issue_broker
from testkit.controlplane import running_web
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_replication import Replica, stop_all
from tests.procs import ARTIFACTS, ROOT, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

CLUSTER = "repl"  # tests.e2e.test_replication.Replica's cluster; its brokers are of group-a
MESSAGES = 20

# The official client in a process of its own (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH is read by gRPC's core).
CLIENT = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
endpoint, count = sys.argv[1], int(sys.argv[2])
config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
consumer = SimpleConsumer(config, "TlsGroup", {"Replicated": FilterExpression("*")}, tls_enable=True)
consumer.startup()
producer = Producer(config, ("Replicated",), tls_enable=True)
producer.startup()
sent = set()
for i in range(count):
    m = Message()
    m.topic, m.body = "Replicated", f"tls-{i}".encode()
    sent.add(producer.send(m).message_id)
got, errors, deadline = set(), [], time.time() + 40
while got != sent and time.time() < deadline:
    try:
        for m in consumer.receive(32, 15) or []:
            consumer.ack(m)
            got.add(m.message_id)
    except Exception as exc:
        errors.append(str(exc))
        time.sleep(0.5)
print(errors, file=sys.stderr)
producer.shutdown()
consumer.shutdown()
print(json.dumps({"sent": len(sent), "received": len(got & sent)}))
"""


@pytest.fixture
def pki(tmp_path) -> dict[str, CertFiles]:
    root = tmp_path / "pki"
    ca = create_ca(root)
    return {
        "ca": ca,
        "control-plane": issue(ca, root, "control-plane", "rmqha control plane"),
        "master": issue_broker(ca, root, CLUSTER, "group-a", 0),
        "slave": issue_broker(ca, root, CLUSTER, "group-a", 1),
        "lost": issue_broker(ca, root, CLUSTER, "group-a", 2),
        "other-group": issue_broker(ca, root, CLUSTER, "group-b", 1),
        "self-signed": issue(None, root, "self-signed", f"{CLUSTER}/group-a/3"),
    }


def _broker_tls(pki, name: str) -> dict[str, str]:
    return broker_tls_conf(pki["ca"], pki[name]) | {"controlPlaneCaPath": str(pki["ca"].cert)}


def _run_official_client(grpc_port: int, ca: Path) -> dict:
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(ca), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, f"127.0.0.1:{grpc_port}", str(MESSAGES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _plaintext_refused(grpc_port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=3)
        except grpc.FutureTimeoutError:
            return True
    return False


async def _stranger_reads(port: int, tls: ssl.SSLContext | None) -> bytes:
    """What a stranger posing as slave 7 gets from the master's HA port within 3 s."""
    got = b""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None), 3
        )
        writer.write(SlaveHandshake(False, False, 7).encode())
        await writer.drain()
        while chunk := await asyncio.wait_for(reader.read(65536), 3):
            got += chunk
    except (OSError, TimeoutError, ssl.SSLError):
        pass
    return got


def _stranger_context(pki, cert: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if cert is not None:
        ctx.load_cert_chain(str(pki[cert].cert), str(pki[cert].key))
    return ctx


class FakeMaster:
    """An HA server with a self-signed certificate: counts the bytes a slave sends it after a
    handshake (none, if the slave checks the CA)."""

    def __init__(self, cert: CertFiles):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert.cert), str(cert.key))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.attempts, self.handshakes, self.received = 0, 0, 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.attempts += 1
            conn.settimeout(3)
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    self.handshakes += 1
                    self.received += len(tls.recv(65536))
            except (OSError, ssl.SSLError):
                pass

    def close(self) -> None:
        self.sock.close()


def test_tls_everywhere_refuses_strangers_and_keeps_the_replicas_identical(tmp_path, pki):
    token = ApiToken.issue("tls-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('tls-admin', 'admin')[1]}"}
    ca = pki["ca"].cert
    fake = FakeMaster(pki["self-signed"])
    with running_web(child_env(), ARTIFACTS, tls=pki["control-plane"], ca=ca) as base:
        assert base.startswith("https://")
        master = Replica(tmp_path, "master", 0, "ASYNC_MASTER", base, token, **_broker_tls(pki, "master"))
        slave = Replica(tmp_path, "slave", 1, "SLAVE", base, token, **_broker_tls(pki, "slave"))
        lost = Replica(
            tmp_path, "lost", 2, "SLAVE", base, token, haMasterAddress=f"127.0.0.1:{fake.port}", **_broker_tls(pki, "lost")
        )
        try:
            for r in (master, slave):
                r.start()
            verify = ssl.create_default_context(cafile=str(ca))

            def registered() -> set[int]:
                r = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5, verify=verify)
                return set(r.json()["brokerAddrTable"].get("group-a", {}).get("brokerAddrs", {}))

            # the brokers reached the control plane over https / wss, its certificate checked
            wait_for(lambda: len(registered()) == 2, 30, "both brokers registered over wss")

            assert _plaintext_refused(master.grpc_port), "a plaintext gRPC client was served under enforcing"
            assert _run_official_client(master.grpc_port, ca) == {"sent": MESSAGES, "received": MESSAGES}

            wait_for(lambda: slave.log_size() > 0 and slave.log_size() == master.log_size(), 30, "the slave at the master's end")
            assert slave.log_bytes() == master.log_bytes(), "the replicas' commit logs differ"

            strangers = {
                "plaintext": None,
                "no-certificate": _stranger_context(pki, None),
                "self-signed": ssl.create_default_context(cafile=str(ca)),
                "other-group": _stranger_context(pki, "other-group"),
            }
            strangers["self-signed"].load_cert_chain(str(pki["self-signed"].cert), str(pki["self-signed"].key))
            for who, ctx in strangers.items():
                assert asyncio.run(_stranger_reads(master.ha_port, ctx)) == b"", f"the master shipped to a stranger ({who})"

            # a third replica pointed at a master whose certificate the CA did not sign (started last: a
            # slave without the log would answer the client's reads of its queues with nothing)
            lost.start()
            wait_for(lambda: fake.attempts >= 2, 20, "the lost slave trying the fake master")
            assert fake.handshakes == fake.received == 0, "a slave sent its handshake to a master the CA did not sign"
            assert lost.log_size() == 0, "a slave copied a log from a master the CA did not sign"
        finally:
            stop_all(master, slave, lost)
            fake.close()


def test_permissive_mode_serves_plaintext_and_tls_on_one_port(tmp_path, pki):
    """``tlsServerMode=permissive`` (the step between plaintext and enforcing, docs/acl.md): the one gRPC
    port answers a plaintext client and a TLS client alike, through the broker's front."""

    root = tmp_path / "permissive"
    TopicConfigManager(root / "config" / "topics.json").update(TopicConfig("Mixed", 4, 4, 6))
    ports = BrokerPorts.reserve()
    tls = broker_tls_conf(pki["ca"], pki["master"], "permissive")
    keys = broker_keys("mixed", root, ports, unreachable_control_plane(), mappedFileSizeCommitLog=1048576, **tls)
    broker = broker_process("mixed", write_broker_conf(root / "broker.conf", keys), root / "broker.log").start()
    target = f"127.0.0.1:{ports.grpc}"

    def send(channel: grpc.Channel, n: int) -> int:
        message = pb.Message(
            topic=pb.Resource(name="Mixed"),
            body=b"mixed",
            system_properties=pb.SystemProperties(
                message_id=f"{n:032X}", body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
            ),
        )
        answer = rpc.MessagingServiceStub(channel).SendMessage(spb.SendMessageRequest(messages=[message]), timeout=10)
        return answer.status.code

    try:
        credentials = grpc.ssl_channel_credentials(root_certificates=pki["ca"].cert.read_bytes())
        with grpc.insecure_channel(target) as plain, grpc.secure_channel(target, credentials) as secure:
            wait_for(lambda: _answers(lambda: send(plain, 0)), 30, "the broker's gRPC port")
            assert [send(plain, 1), send(secure, 2), send(plain, 3), send(secure, 4)] == [pb.Code.OK] * 4
    finally:
        broker.stop(30)


def _answers(call) -> bool:
    try:
        call()
        return True
    except grpc.RpcError:
        return False
