"""Logical queues (issue 18; docs/static-topics.md): moving a static topic's queues costs a mapping
change, whatever the data behind them.

Three single-replica broker sets (a, b, c) and a control plane of this run's own. Per phase, a static
topic of 8 logical queues on a and b, each queue preloaded with ``--small-mb`` (10) or ``--big-mb``
(1024) of old data (1 MB messages over plain gRPC); then, while the official Python Producer (in this
process) sends, 4 queues move to c and then a is drained. A third phase repeats the small one with the
official SimpleConsumer receiving too (from offset 0 of every queue, old data included), for the
checks below.

Figures (the last line printed is one JSON object):
  migrate_s_10mb, migrate_s_1gb  the request for the first move -> a message sent to a moved queue's
                                 new owner is stored there (the move decided); the median over the
                                 two moves of the phase (per move in ``phases``)
  migrate_size_ratio             migrate_s_1gb / migrate_s_10mb (goal <= 1.2)
  (the rest from the third phase)
  send_gap_s_max                 the longest time without an acknowledged send of the producer, from
                                 1 s before the first move to 5 s after the drain (goal <= 1)
  lost                           acknowledged sends the consumer never received (goal 0)
  duplicated                     messages received twice on their first delivery attempt (goal 0)
  stored_twice                   sends stored twice (a send retried after its first try was stored)
  order_violations_per_queue     the most places, in one logical queue read from offset 0 by a
                                 second group, where the next offset is not the one after (goal 0)

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/logical_queues.py [--small-mb 10 --big-mb 1024]
    quick: --big-mb 100

Uses a database and Redis key prefix of its own (testkit/controlplane.py); logs and broker stores in
test-artifacts/bench-logical-queues/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

import grpc
import httpx
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from brokers.core.fifo import queue_of_group  # noqa: E402
from testkit.brokers import BrokerPorts, broker_keys, broker_process, write_broker_conf  # noqa: E402
from testkit.controlplane import ControlPlane, fresh_standalone_env  # noqa: E402
from testkit.procs import ARTIFACTS, stop_all, wait_until  # noqa: E402
from testkit.static_topics import (  # noqa: E402
    ProducerLoad,
    create,
    mapping,
    migrate,
    order_violations,
    query_offset,
    read_queue,
    routed,
    settled,
)

SETS = ("broker-a", "broker-b", "broker-c")
QUEUES = 8
CHUNK = 1024 * 1024


def note(text: str) -> None:
    print(f"[logical-queues] {text}", flush=True)


def preload(port: int, topic: str, lid: int, mb: int) -> None:
    """``mb`` MB of old data into logical queue ``lid`` (sent to its owner: FIFO groups pick the queue)."""
    group = next(f"g{lid}-{i}" for i in range(10_000) if queue_of_group(f"g{lid}-{i}", QUEUES) == lid)
    body = b"x" * CHUNK
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        stub = rpc.MessagingServiceStub(channel)
        for n in range(mb):
            m = pb.Message(topic=pb.Resource(name=topic), body=body)
            sp = m.system_properties
            # a NORMAL message with a message group: stored on the group's queue
            sp.message_id, sp.message_type, sp.message_group = f"old-{topic}-{lid}-{n}", pb.MessageType.NORMAL, group
            sp.born_timestamp.GetCurrentTime()
            r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), timeout=30)
            assert r.status.code == pb.Code.OK, r.status


class Consume:
    """The official SimpleConsumer receiving and acking everything, in a thread."""

    def __init__(self, access: str, topic: str):
        self.consumer = SimpleConsumer(
            ClientConfiguration(access, Credentials()), "bench", {topic: FilterExpression()}, await_duration=1
        )
        self.received: dict[str, int] = {}
        self.first_twice = 0
        self.twice: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for m in self.consumer.receive(32, 30):
                    if m.message_id in self.received and m.delivery_attempt == 1:
                        self.first_twice += 1
                        self.twice.append(f"{m.message_id}@{m.endpoints}")
                    self.received[m.message_id] = self.received.get(m.message_id, 0) + 1
                    self.consumer.ack(m)
            except Exception:
                time.sleep(0.1)

    def start(self) -> None:
        self.consumer.startup()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.consumer.shutdown()


def landed_after(base: str, admin: dict, topic: str, port_of: dict, lid: int, asked: float) -> float:
    """Seconds from ``asked`` until a send to ``lid``'s new owner is stored there (the move decided)."""
    group = next(f"probe-{i}" for i in range(10_000) if queue_of_group(f"probe-{i}", QUEUES) == lid)
    owner = mapping(base, admin, topic)["queues"][lid]["segments"][-1]["brokerName"]
    with grpc.insecure_channel(f"127.0.0.1:{port_of[owner]}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        n = 0
        while True:
            m = pb.Message(topic=pb.Resource(name=topic), body=f"probe-{lid}-{asked}-{n}".encode())
            sp = m.system_properties
            sp.message_id, sp.message_type, sp.message_group = f"probe-{topic}-{lid}-{asked}-{n}", pb.MessageType.NORMAL, group
            sp.born_timestamp.GetCurrentTime()
            n += 1
            # x-static-hop: the owner stores it or refuses, never hands it on (brokers/grpc/logical.py)
            r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), timeout=10, metadata=(("x-static-hop", "1"),))
            if r.status.code == pb.Code.OK:
                return time.time() - asked
            if time.time() - asked > 30:
                raise RuntimeError(f"no send landed on {owner} for queue {lid}: {r.status}")


def phase(base: str, admin: dict, port_of: dict, mb: int, consumer: bool, name: str) -> dict:
    """Preload, then both moves under the producer's load (and the consumer's: ``consumer``)."""
    topic = f"Lq{name}{mb}mb"
    create(base, admin, topic, QUEUES, ["broker-a", "broker-b"])
    wait_until(lambda: routed(base, admin, topic, 2), 30, f"the route of {topic}")
    start = time.time()
    for lid in range(QUEUES):
        owner = mapping(base, admin, topic)["queues"][lid]["segments"][-1]["brokerName"]
        preload(port_of[owner], topic, lid, mb)
    note(f"{topic}: {mb} MB per queue preloaded in {time.time() - start:.1f} s")
    access = f"127.0.0.1:{port_of['broker-b']}"
    load, consume = ProducerLoad(access, topic), (Consume(access, topic) if consumer else None)
    load.start()
    if consume is not None:
        consume.start()
    time.sleep(3)
    moves = []
    first_move = time.time()
    asked = time.time()
    migrate(base, admin, topic, {"moves": [{"queueId": q, "brokerName": "broker-c"} for q in (0, 1, 2, 3)]})
    moves.append(landed_after(base, admin, topic, port_of, 0, asked))
    wait_until(lambda: settled(base, admin, topic), 30, "the first move decided")
    asked = time.time()
    drained = migrate(base, admin, topic, {"drain": {"brokerName": "broker-a"}})
    moves.append(landed_after(base, admin, topic, port_of, drained["moves"][0]["queueId"], asked))
    wait_until(lambda: settled(base, admin, topic), 30, "the drain decided")
    out = {"topic": topic, "mb_per_queue": mb, "migrate_s": [round(s, 4) for s in moves]}
    if consume is None:
        load.close()
    else:
        time.sleep(5)
        drain_end = time.time()
        load.close()
        acked = set(load.sent)
        deadline = time.time() + 120
        while not acked <= set(consume.received) and time.time() < deadline:
            time.sleep(0.5)
        consume.stop()
        times = [t for t, _, _ in load.acked if first_move - 1 <= t <= drain_end]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        violations, bodies = [], []
        for lid in range(QUEUES):
            end = query_offset(port_of["broker-b"], topic, lid, pb.QueryOffsetPolicy.END)
            got = read_queue(port_of["broker-b"], topic, "auditor", lid, end, timeout_s=300)
            violations.append(order_violations([o for o, _ in got]) + (0 if len(got) == end else 1))
            bodies += [b for _, b in got if not b.startswith(b"x")]  # the load's and the probes' (the old data: x...)
        out |= {
            "acked": len(acked),
            "send_errors": len(load.errors),
            "send_gap_s_max": round(max(gaps), 3) if gaps else None,
            "lost": len(acked - set(consume.received)),
            "duplicated": consume.first_twice,
            "duplicated_ids": consume.twice[:5],
            "stored_twice": len(bodies) - len(set(bodies)),  # a send stored twice (a retried send)
            "stored_twice_bodies": sorted({b.decode() for b in bodies if bodies.count(b) > 1})[:5],
            "order_violations_per_queue": max(violations),
        }
    note(json.dumps(out))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-mb", type=int, default=10)
    parser.add_argument("--big-mb", type=int, default=1024)
    args = parser.parse_args()
    run_dir = ARTIFACTS / "bench-logical-queues"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    env = fresh_standalone_env("logical_queues")
    cp = ControlPlane(env, run_dir)
    procs = []
    try:
        cp.start_web()
        token = cp.issue_token("lq-broker", "broker")
        admin = {"Authorization": f"Bearer {cp.issue_token('lq-admin', 'admin')}"}
        port_of = {}
        for name in SETS:
            ports = BrokerPorts.reserve()
            keys = broker_keys(name, run_dir / name, ports, cp.url, cluster="lq", token=token, brokerId=0)
            conf = write_broker_conf(run_dir / f"{name}.conf", keys)
            procs.append(broker_process(f"broker-{name}", conf, run_dir / f"{name}.log").start())
            port_of[name] = ports.grpc

        def registered() -> bool:
            info = httpx.get(f"{cp.url}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
            return set(info["brokerAddrTable"]) == set(SETS)

        wait_until(registered, 60, "three broker sets")
        # the two sizes under the same load (the producer's); then every check under both clients
        small = phase(cp.url, admin, port_of, args.small_mb, consumer=False, name="Small")
        big = phase(cp.url, admin, port_of, args.big_mb, consumer=False, name="Big")
        checked = phase(cp.url, admin, port_of, args.small_mb, consumer=True, name="Checked")
    finally:
        stop_all(procs)
        cp.stop()
    m_small, m_big = statistics.median(small["migrate_s"]), statistics.median(big["migrate_s"])
    figures = {
        "migrate_s_10mb": round(m_small, 4),
        "migrate_s_1gb": round(m_big, 4),
        "migrate_size_ratio": round(m_big / m_small, 3) if m_small else None,
        "send_gap_s_max": checked["send_gap_s_max"],
        "lost": checked["lost"],
        "duplicated": checked["duplicated"],
        "order_violations_per_queue": checked["order_violations_per_queue"],
        "acked": checked["acked"],
        "send_errors": checked["send_errors"],
        "small_mb": args.small_mb,
        "big_mb": args.big_mb,
        "phases": [small, big, checked],
    }
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
