"""Access control and TLS on the data path (issue 39; docs/acl.md): what they cost a producer, and how
fast a policy change reaches a running broker.

A control plane of this run's own (web only) and three single-replica broker sets of one cluster, each
serving topic Bench (8 queues): ``open`` (no access control, plaintext), ``acl``
(``authenticationEnabled`` and ``authorizationEnabled``), ``tls`` (``tlsServerMode=enforcing`` with a
CA of the run's own). A user ``bench`` may Pub on Topic:Bench.

Figures (the last line printed is one JSON object):
  acl_send_ratio            gRPC sends/s to ``acl`` (every request signed as the official clients sign
                            it, checked and authorized) over sends/s to ``open``, the same load: the
                            ratio of the medians of ``--runs`` alternating runs each (goal >= 0.9)
  tls_send_ratio            the same, ``tls`` (a TLS channel trusting the run's CA) over ``open``
                            (goal >= 0.8)
  policy_propagation_ms_p99 a policy change (Allow and Deny of Pub on Topic:Bench for user ``flip``, by
                            turns, from Deny) from the REST call's start to the first send to ``acl`` that
                            follows it (polled every 5 ms); p99 of ``--changes`` changes (goal < 2000)

The load: ``--count`` 1 KB messages, ``--batch`` per SendMessage (1: as the official clients send),
``--in-flight`` requests at a time, from one process.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/acl.py [--count 20000 --runs 3 --changes 30]

Uses a database and Redis key prefix of its own (testkit/controlplane.py); logs and stores in
test-artifacts/bench-acl/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import grpc
import httpx
from cryptography.fernet import Fernet
from rocketmq import ClientConfiguration, Credentials
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc
from rocketmq.v5.util.signature import Signature

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.produce import grpc_send_rate  # noqa: E402
from brokers.topics import TopicConfig, TopicConfigManager  # noqa: E402
from testkit.brokers import BrokerPorts, broker_keys, broker_process, write_broker_conf  # noqa: E402
from testkit.certs import broker_tls_conf, create_ca, issue_broker  # noqa: E402
from testkit.controlplane import ControlPlane, fresh_standalone_env  # noqa: E402
from testkit.procs import ARTIFACTS, stop_all, wait_until  # noqa: E402

CLUSTER = "DefaultCluster"
TOPIC = "Bench"
GOALS = {"acl_send_ratio": 0.9, "tls_send_ratio": 0.8, "policy_propagation_ms_p99": 2000}


def note(text: str) -> None:
    print(f"[acl] {text}", flush=True)


def signer(ak: str, sk: str):
    """Each call's metadata as rocketmq-python-client makes it (a fresh date and signature per call)."""
    config = ClientConfiguration("127.0.0.1:1", Credentials(ak, sk))
    return lambda: tuple(Signature.metadata(config, "bench-acl"))


class Api:
    def __init__(self, url: str, token: str):
        headers = {"Authorization": f"Bearer {token}"}
        self.http = httpx.Client(base_url=url + f"/api/v1/clusters/{CLUSTER}/acl", headers=headers, timeout=30)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        response = self.http.request(method, path, json=body)
        if response.status_code >= 300:
            raise SystemExit(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    def create_user(self, username: str, password: str) -> None:
        self.call("POST", "/users", {"username": username, "password": password, "userType": "Normal"})

    def set_policy(self, username: str, decision: str, create: bool = False) -> None:
        entries = [{"resources": [f"Topic:{TOPIC}"], "actions": ["Pub"], "decision": decision}]
        if create:
            self.call("POST", "/policies", {"subject": f"User:{username}", "entries": entries})
        else:  # updateAcl: the entry of the resource it names is replaced
            self.call("PATCH", f"/policies/{username}", {"entries": entries})


def start_broker(root: Path, name: str, url: str, token: str, **keys: object) -> tuple[BrokerPorts, object]:
    root.mkdir(parents=True)
    TopicConfigManager(root / "config" / "topics.json").update(TopicConfig(TOPIC, 8, 8, 6))
    ports = BrokerPorts.reserve()
    conf = write_broker_conf(root / "broker.conf", broker_keys(name, root, ports, url, cluster=CLUSTER, token=token, **keys))
    return ports, broker_process(name, conf, root / "broker.log", log_level="WARNING").start()


def probe(n: int) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=TOPIC),
                body=b"probe",
                system_properties=pb.SystemProperties(
                    message_id=f"{n:032X}", body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
                ),
            )
        ]
    )


def sends_ok(port: int, metadata) -> bool:
    """Whether one signed send is stored (False while the broker is not up yet)."""

    async def send() -> int:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            response = await rpc.MessagingServiceStub(channel).SendMessage(probe(time.time_ns()), timeout=10, metadata=metadata())
            return response.status.code

    try:
        return asyncio.run(send()) == pb.Code.OK
    except grpc.aio.AioRpcError:
        return False


async def propagation(api: Api, port: int, metadata, changes: int) -> list[float]:
    """ms from each policy change's REST call to the first send answered as the change says."""
    times = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        for i in range(changes):
            decision, expected = ("Deny", pb.Code.FORBIDDEN) if i % 2 == 0 else ("Allow", pb.Code.OK)  # it starts allowed
            started = time.perf_counter()
            await asyncio.to_thread(api.set_policy, "flip", decision)
            while (await stub.SendMessage(probe(time.time_ns()), timeout=10, metadata=metadata())).status.code != expected:
                if time.perf_counter() - started > 30:
                    raise SystemExit(f"change {i} ({decision}) not in effect after 30 s")
                await asyncio.sleep(0.005)
            times.append((time.perf_counter() - started) * 1000)
    return times


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def alternate(label: str, runs: int, open_rate, other_rate) -> tuple[list[float], list[float]]:
    opened, other = [], []
    for i in range(runs):
        opened.append(open_rate())
        other.append(other_rate())
        note(f"{label} run {i + 1}: open {opened[-1]:,.0f} msgs/s, {label} {other[-1]:,.0f} msgs/s")
    return opened, other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--changes", type=int, default=30)
    args = parser.parse_args()

    out = ARTIFACTS / "bench-acl"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = fresh_standalone_env("acl") | {"RMQHA_ACL_KEYS": Fernet.generate_key().decode()}
    control = ControlPlane(env, out)
    processes = []
    try:
        control.start_web()
        admin, broker_token = control.issue_token("bench-admin", "admin"), control.issue_token("bench-broker", "broker")
        api = Api(control.url, admin)
        ca = create_ca(out / "certs")
        tls_cert = issue_broker(ca, out / "certs", CLUSTER, "tls", 0)
        api.create_user("bench", "bench-secret")
        api.create_user("flip", "flip-secret")
        api.set_policy("bench", "Allow", create=True)
        api.set_policy("flip", "Allow", create=True)
        on = {"authenticationEnabled": "true", "authorizationEnabled": "true"}
        started = {
            "open": start_broker(out / "open", "open", control.url, broker_token),
            "acl": start_broker(out / "acl", "acl", control.url, broker_token, **on),
            "tls": start_broker(out / "tls", "tls", control.url, broker_token, **broker_tls_conf(ca, tls_cert)),
        }
        processes = [p for _, p in started.values()]
        ports = {name: p.grpc for name, (p, _) in started.items()}
        bench_sign, flip_sign = signer("bench", "bench-secret"), signer("flip", "flip-secret")
        wait_until(lambda: sends_ok(ports["acl"], bench_sign), 60, "the acl broker's first policy")
        wait_until(lambda: sends_ok(ports["open"], bench_sign), 60, "the open broker")
        tls = grpc.ssl_channel_credentials(root_certificates=ca.cert.read_bytes())
        load = dict(count=args.count, batch=args.batch, in_flight=args.in_flight, topic=TOPIC)

        def open_rate() -> float:
            return grpc_send_rate(ports["open"], **load, metadata=bench_sign)

        acl_open, acl_on = alternate(
            "acl", args.runs, open_rate, lambda: grpc_send_rate(ports["acl"], **load, metadata=bench_sign)
        )
        tls_open, tls_on = alternate(
            "tls", args.runs, open_rate, lambda: grpc_send_rate(ports["tls"], **load, metadata=bench_sign, tls=tls)
        )
        times = asyncio.run(propagation(api, ports["acl"], flip_sign, args.changes))
    finally:
        stop_all(processes)
        control.stop()

    figures = {
        "acl_send_ratio": round(statistics.median(acl_on) / statistics.median(acl_open), 3),
        "tls_send_ratio": round(statistics.median(tls_on) / statistics.median(tls_open), 3),
        "policy_propagation_ms_p99": round(p99(times), 1),
        "policy_propagation_ms_median": round(statistics.median(times), 1),
        "sends_per_s": {"open": acl_open + tls_open, "acl": acl_on, "tls": tls_on},
        "load": load,
    }
    figures["goals_met"] = (
        figures["acl_send_ratio"] >= GOALS["acl_send_ratio"]
        and figures["tls_send_ratio"] >= GOALS["tls_send_ratio"]
        and figures["policy_propagation_ms_p99"] < GOALS["policy_propagation_ms_p99"]
    )
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
