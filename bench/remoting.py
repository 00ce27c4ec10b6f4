"""RocketMQ's remoting protocol against our brokers (issue 36, "Measure it"), with the C++ client (PyPI
``rocketmq`` 0.4.4, clients/remoting-py/client.py in processes of its own) finding the brokers through
the nameserver's remoting endpoint (``manage.py serve_remoting``).

Beds: ``controller`` (phases sends, pull, kills) is chaos/harness.py's group, a master with two
slaves in controller mode, all-ack (allAckInSyncStateSet=true, controllerHeartBeatTimeoutMills=3000);
the kills phase adds a second broker set, ``chaos-b`` (one classic ASYNC_MASTER, no slaves), to the
cluster. ``classic`` (phase acting) is the same group in classic mode (brokerId 0 SYNC_MASTER, two
SLAVEs, all three acknowledge) with enableSlaveActingMaster and the nameserver's supportActingMaster.

Phases (``--phases``, comma-separated, default all; ``failover`` = kills,acting):
  sends   ``--senders`` (4) processes sending 1 KiB bodies one at a time, synchronously, as fast as
          they are answered: first the C++ client's (send_sync), then the official Python gRPC
          client's (rocketmq-python-client, chaos/official_client.py, every replica's gRPC address as
          its access point), each for ``--send-s`` (20) after all processes had an answer and
          ``--warmup-s`` (3) more. remoting_sends_per_s / grpc_sends_per_s count the answers with
          SEND_OK / a receipt inside that window; remoting_vs_grpc is their ratio (goal >= 2). Where
          the time goes: each kind's latency (p50, p99) and the CPU per send of the master, the whole
          group and the senders, beside the group's CPU with no client (``idle_cpu_pct``).
  pull    ``--messages`` (200,000) 1 KiB messages preloaded into a topic of ``--pull-queues`` (8)
          queues (batched gRPC SendMessage to the master, 32 a request), replicated everywhere; then
          the C++ push consumer of a new group drains them. pull_msgs_per_s: messages over the time
          from its first delivery to its last (goal >= 50,000); drain_s from its start, with the CPU
          the master and the consumer process spent per message meanwhile. The consumer writes a
          progress event every 200 ms, not a line per delivery (clients/remoting-py/client.py).
          ``--pull-consumers`` N starts N such processes in the group (the queues split among them):
          one process is bound by its own Python callback (about 35 us of CPU a message).
  kills   the C++ producer sends (``--interval-ms`` 5 between answers) to a topic on both broker
          sets; ``--kills`` (10) kill -9 of chaos-a's master, each restarted and back in sync before
          the next, which waits until the producer's sends reach chaos-a's new master (the client
          polls its routes every 30 s). send_gap_s_median: per kill, the longest time without a
          SEND_OK from the kill to ``--window-s`` (10) after it (goal <= 1: the client's retries go
          to chaos-b); acked_lost: acknowledged ids a new consumer group never receives (goal 0).
          A send in flight to the master when it dies waits for the client's send timeout
          (``--send-timeout-ms``, 3,000 by default as in the client) before it is retried: the C++
          client 1.2.x sees its connection close but fails the request only at its timeout.
  acting  the C++ push consumer runs caught up; per trial (``--kills`` of them): the consumer is
          held (SIGSTOP) at a random point (``--seed``) of its 30 s route poll cycle (it reads the
          route that names the slave id 0 only at its next poll), ``--backlog`` (1,000) messages
          are sent to the master, the master is killed (kill -9) and the consumer let go
          (SIGCONT); then the master is restarted and,
          ``--restart-after-s`` (35: the client's route poll + its offset persist interval) after
          the route names it id 0 again, the consumer is restarted: it takes its offsets from the
          master, which took them back from the acting slave at pre-online and got the client's
          later commits once the client's route named it again. With ``--restart-after-s 0`` the
          new consumer gets again what the old one consumed after the master's pre-online sync (its
          commits went to the slave, which refuses them once it no longer acts).
          consume_resumed_s_median: the kill -> the first delivery the master cannot have served,
          a queue offset at least ``PULLED_BEFORE_KILL`` (32) past that queue's end before the backlog
          (the held consumer had at most one pull of 32 per queue answered; goal <= the client's
          route poll interval + 2 s = 32 s); redelivered_ratio: deliveries of a (queue, offset)
          already delivered / deliveries (goal <= 0.001).

The last line printed is one JSON object (goals under ``goals``; per-trial details in the run
folder's report.json). Default run time: about 25 minutes on an idle machine (sends 1 min, pull 1-2
min, kills 3-5 min, acting 12-14 min, starting the two beds 2 min). Quick:
``--phases sends,pull --messages 20000 --send-s 5`` or ``--phases failover --kills 1``.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/remoting.py [--phases sends,pull,kills,acting]

Each bed uses a database and Redis key prefix of its own (testkit/controlplane.py); logs, broker
stores and the clients' event files in test-artifacts/bench-remoting-*/. Everything runs on
127.0.0.1 and is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import process_cpu_s  # noqa: E402
from chaos.client_load import ClientKill9, group_whole, longest_quiet  # noqa: E402
from chaos.harness import QUEUES, TOPIC, Harness  # noqa: E402
from chaos.official_client import EventLog, client_process, padded  # noqa: E402
from chaos.remoting_clients import remoting_py_process  # noqa: E402
from chaos.replicas import CLUSTER, GROUP, GroupSettings  # noqa: E402
from mqrules.remoting.codes import RequestCode  # noqa: E402
from testkit.brokers import BrokerPorts, broker_keys, broker_process, write_broker_conf  # noqa: E402
from testkit.controlplane import fresh_standalone_env, remoting_nameserver  # noqa: E402
from testkit.procs import ARTIFACTS, Process, stop_all, wait_until  # noqa: E402
from testkit.remoting import RemotingClient  # noqa: E402
from testkit.stats import rounded_median, rounded_percentile  # noqa: E402

PHASES = ("sends", "pull", "kills", "acting")
BODY_BYTES = 1024
PULL_TOPIC = "RemotingPull"
KILLS_TOPIC = "RemotingKills"
SET_B = "chaos-b"
ROUTE_POLL_S = 30.0  # the C++ client's nameserver poll interval (rocketmq-client-cpp 1.2.x)
# The held consumer may have had one pull per queue answered by the master before the kill (its
# next pull waits for that answer to be handled), of at most 32 messages (the C++ client's pull
# batch): that far past a queue's end, a message can only have come from the slave.
PULLED_BEFORE_KILL = 32
START_TIMEOUT_S = 60.0
TRIAL_TIMEOUT_S = ROUTE_POLL_S + 60.0
GOALS = {"remoting_vs_grpc": 2.0, "pull_msgs_per_s": 50_000, "send_gap_s_median": 1.0, "redelivered_ratio": 0.001}


def log(text: str) -> None:
    print(f"[remoting {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- figures (pure) --------------------------------------------------------------------------------------


def answered_in(events: list[dict], start: float, end: float) -> int:
    """Events stamped within [start, end)."""
    return sum(1 for e in events if start <= e["t"] < end)


def first_past(deliveries: list[dict], after: float, ends: dict[int, int], margin: int) -> float | None:
    """The time of the first delivery after ``after`` whose queue offset is ``margin`` or more past its
    queue's end in ``ends`` (queue id -> offset), None when there is none."""
    return min(
        (d["t"] for d in deliveries if d["t"] > after and d["queue_offset"] >= ends.get(d["queue_id"], 0) + margin),
        default=None,
    )


def redeliveries(deliveries: list[dict]) -> int:
    """Deliveries of a (queue id, queue offset) delivered before (one replica group: the pair names a message)."""
    return len(deliveries) - len({(d["queue_id"], d["queue_offset"]) for d in deliveries})


# --- processes ------------------------------------------------------------------------------------------


def cpp_client(role: str, name: str, log_dir: Path, namesrv: str, topic: str, *options: str) -> tuple[Process, EventLog]:
    """A C++ client process (not started) and its events."""
    out = log_dir / f"{name}.jsonl"
    proc = remoting_py_process(role, name, log_dir, "--namesrv", namesrv, "--topic", topic, "--out", str(out), *options)
    return proc, EventLog(out)


def grpc_client(
    name: str, log_dir: Path, env: dict[str, str], access: str, topic: str, *options: str
) -> tuple[Process, EventLog]:
    """An official gRPC client producer process (not started) and its events."""
    out = log_dir / f"{name}.jsonl"
    proc = client_process("produce", name, log_dir, env, "--access", access, "--topic", topic, "--out", str(out), *options)
    return proc, EventLog(out)


def preload(addr: str, topic: str, count: int, prefix: str, batch: int = 32, in_flight: int = 8) -> float:
    """``count`` messages of BODY_BYTES (the id padded with "."), batched SendMessage to ``addr``;
    returns messages per second. Raises on any answer but OK."""

    def request(first: int) -> spb.SendMessageRequest:
        ids = [f"{prefix}{n:09d}" for n in range(first, min(count, first + batch))]
        return spb.SendMessageRequest(
            messages=[
                pb.Message(
                    topic=pb.Resource(name=topic),
                    body=padded(i, BODY_BYTES),
                    system_properties=pb.SystemProperties(
                        message_id=i, body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
                    ),
                )
                for i in ids
            ]
        )

    async def run() -> float:
        async with grpc.aio.insecure_channel(addr) as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            stub = rpc.MessagingServiceStub(channel)
            firsts = list(range(0, count, batch))
            firsts.reverse()

            async def sender() -> None:
                while firsts:
                    resp = await stub.SendMessage(request(firsts.pop()), timeout=60)
                    if resp.status.code != pb.Code.OK:
                        raise RuntimeError(f"preload to {addr}: {pb.Code.Name(resp.status.code)} {resp.status.message}")

            start = time.perf_counter()
            await asyncio.gather(*(sender() for _ in range(in_flight)))
            return count / (time.perf_counter() - start)

    return asyncio.run(run())


def max_offsets(addr: str, topic: str, queues: int) -> dict[int, int]:
    """GET_MAX_OFFSET (30) of each queue, over remoting."""
    with RemotingClient(addr) as c:
        return {
            q: int(c.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q}).ext_fields["offset"])
            for q in range(queues)
        }


def stored(addr: str, topic: str, queues: int) -> int:
    """Messages a broker holds in ``topic`` (the C++ client's send result names no broker: its
    ``msg_id`` is the client's UNIQ_KEY)."""
    return sum(max_offsets(addr, topic, queues).values())


# --- the beds -------------------------------------------------------------------------------------------


@dataclass
class Bed:
    h: Harness
    namesrv: str
    logs: Path

    @property
    def access(self) -> str:
        return ";".join(n.grpc_addr for n in self.h.nodes)

    def create_topic(self, topic: str, queues: int, broker_names: tuple[str, ...] = (GROUP,)) -> None:
        for name in broker_names:
            self.h.api.create_topic(topic, name, queues)

        def everywhere() -> bool:
            route = self.h.api.route(topic) or {}
            return {b["brokerName"] for b in route.get("brokerDatas", [])} >= set(broker_names) and all(
                (p := n.root / "config" / "topics.json").exists() and topic in json.loads(p.read_text())["topicConfigTable"]
                for n in self.h.nodes
            )

        wait_until(everywhere, START_TIMEOUT_S, f"topic {topic} on every broker and in the route")


@contextmanager
def bed(name: str, settings: GroupSettings, run_dir: Path, quiet: bool) -> Iterator[Bed]:
    """A harness (control plane, group, ChaosTopic) and the nameserver's remoting endpoint; stopped on the way out."""
    h = Harness(settings, run_dir / name, fresh_standalone_env(f"remoting_{name}"), verbose=not quiet)
    try:
        h.start()
        if not h.controller_mode:
            h.api.update_nameserver_config({"supportActingMaster": True, "notifyMinBrokerIdChanged": True})
        with remoting_nameserver(h.env, h.run_dir / "logs") as namesrv:
            log(f"bed {name}: nameserver remoting endpoint {namesrv}")
            yield Bed(h, namesrv, h.run_dir / "logs")
    finally:
        h.stop()


# --- sends ----------------------------------------------------------------------------------------------


def cpu_s(procs: list[Process]) -> float:
    """User + system CPU seconds the processes used so far."""
    return sum(process_cpu_s(p.pid if p.alive() else None) or 0.0 for p in procs)


def send_rate(procs: list[tuple[Process, EventLog]], h: Harness, warmup_s: float, send_s: float, label: str) -> dict:
    """Start the processes, wait until each had an answer, then count the acks of the next ``send_s``;
    with the CPU the master, the whole group and the senders spent per send meanwhile."""
    senders = [p for p, _ in procs]
    master = h.master_node().process
    brokers = [n.process for n in h.nodes]
    try:
        for p in senders:
            p.start()
        wait_until(
            lambda: all(p.check_alive() and ev.of("ack") for p, ev in procs), START_TIMEOUT_S, f"an ack in every {label} sender"
        )
        start = time.time() + warmup_s
        end = start + send_s
        time.sleep(start - time.time())
        cpu = [cpu_s([master]), cpu_s(brokers), cpu_s(senders)]
        time.sleep(end - time.time())
        cpu = [after - before for after, before in zip([cpu_s([master]), cpu_s(brokers), cpu_s(senders)], cpu, strict=True)]
        time.sleep(0.5)
    finally:
        stop_all(senders)
    acks = [e for _, ev in procs for e in ev.of("ack")]
    fails = [e for _, ev in procs for e in ev.of("fail")]
    latencies = [(e["t"] - e["sent"]) * 1000 for e in acks if start <= e["t"] < end]
    count = answered_in(acks, start, end)
    per_send = [round(c / count * 1e6) if count else None for c in cpu]
    out = {
        "sends_per_s": round(count / send_s, 1),
        "send_ms_p50": rounded_percentile(latencies, 50, 2),
        "send_ms_p99": rounded_percentile(latencies, 99, 2),
        "failed": answered_in(fails, start, end),
        "master_cpu_us_per_send": per_send[0],
        "group_cpu_us_per_send": per_send[1],
        "client_cpu_us_per_send": per_send[2],
    }
    log(f"  {label}: {out}")
    return out


def idle_cpu_pct(h: Harness, seconds: float = 3.0) -> dict[str, float]:
    """The CPU the master and the whole group use with no client at all (heartbeats, HA, timers), in
    percent of one core: what the CPU per send includes besides the sends."""
    master, brokers = [h.master_node().process], [n.process for n in h.nodes]
    before = [cpu_s(master), cpu_s(brokers)]
    time.sleep(seconds)
    after = [cpu_s(master), cpu_s(brokers)]
    return {"master": round((after[0] - before[0]) / seconds * 100, 1), "group": round((after[1] - before[1]) / seconds * 100, 1)}


def sends_phase(b: Bed, args) -> dict:
    idle = idle_cpu_pct(b.h)
    log(f"sends: idle CPU (% of a core) {idle}")
    log(f"sends: {args.senders} C++ client processes, send_sync of {BODY_BYTES} B, {args.send_s:g} s")
    opts = ("--interval-ms", "0", "--body-bytes", str(BODY_BYTES))
    cpp = [
        cpp_client(
            "produce", f"cpp-sender-{i}", b.logs, b.namesrv, TOPIC, *opts, "--group", f"bench-sender-{i}", "--id-prefix", f"c{i}-"
        )
        for i in range(args.senders)
    ]
    remoting = send_rate(cpp, b.h, args.warmup_s, args.send_s, "C++ (remoting)")
    log(f"sends: {args.senders} official gRPC client processes, Producer.send of {BODY_BYTES} B, {args.send_s:g} s")
    grpcs = [
        grpc_client(f"grpc-sender-{i}", b.logs, b.h.env, b.access, TOPIC, *opts, "--id-prefix", f"g{i}-")
        for i in range(args.senders)
    ]
    grpc_ = send_rate(grpcs, b.h, args.warmup_s, args.send_s, "official (gRPC)")
    ratio = remoting["sends_per_s"] / grpc_["sends_per_s"] if grpc_["sends_per_s"] else None
    return {
        "remoting_sends_per_s": remoting["sends_per_s"],
        "grpc_sends_per_s": grpc_["sends_per_s"],
        "remoting_vs_grpc": None if ratio is None else round(ratio, 2),
        "sends": {"remoting": remoting, "grpc": grpc_, "senders": args.senders, "send_s": args.send_s, "idle_cpu_pct": idle},
    }


# --- pull -----------------------------------------------------------------------------------------------


def pull_phase(b: Bed, args) -> dict:
    h = b.h
    b.create_topic(PULL_TOPIC, args.pull_queues)
    master = h.master_node()
    log(f"pull: preloading {args.messages} x {BODY_BYTES} B into {PULL_TOPIC} ({args.pull_queues} queues) on {master.name}")
    rate = preload(master.grpc_addr, PULL_TOPIC, args.messages, "p-")
    log(f"  preloaded at {rate:.0f} msgs/s; waiting for the slaves to copy it")
    wait_until(h.converged, 300, "every replica at the master's offset")
    opts = ("--group", "bench-pull", "--thread-count", str(args.pull_threads), "--progress-ms", "200")
    pullers = [cpp_client("consume", f"cpp-puller-{n}", b.logs, b.namesrv, PULL_TOPIC, *opts) for n in range(args.pull_consumers)]
    procs = [proc for proc, _ in pullers]

    def progress() -> list[dict]:
        out = []
        for _, events in pullers:
            seen = events.of("progress")
            out.append(seen[-1] if seen else {"distinct": 0, "received": 0})
        return out

    def distinct() -> int:  # (the queues are split among the group's consumers: each pulls its own)
        return sum(p["distinct"] for p in progress())

    master_cpu = cpu_s([master.process])
    started = time.time()
    for proc in procs:
        proc.start()
    try:
        wait_until(
            lambda: all(proc.check_alive() for proc in procs) and distinct() >= args.messages,
            args.messages / 2000 + 120,
            "every message pulled",
        )
        drain_s = time.time() - started
        cpu = [cpu_s([master.process]) - master_cpu, cpu_s(procs)]
    finally:
        for proc in procs:
            proc.stop()
    last = [p for p in progress() if p["distinct"]]
    pull_rate = sum(p["distinct"] for p in last) / (max(p["last"] for p in last) - min(p["first"] for p in last))
    out = {
        "pull_msgs_per_s": round(pull_rate, 1),
        "pull": {
            "messages": args.messages,
            "queues": args.pull_queues,
            "consumers": args.pull_consumers,
            "consume_threads": args.pull_threads,
            "delivered": sum(p["received"] for p in last),
            "drain_s": round(drain_s, 2),
            "first_delivery_s": round(min(p["first"] for p in last) - started, 2),
            "preload_msgs_per_s": round(rate, 1),
            # the drain's CPU (from the consumer's start): the broker's side and the client's
            "master_cpu_us_per_msg": round(cpu[0] / args.messages * 1e6, 1),
            "consumer_cpu_us_per_msg": round(cpu[1] / args.messages * 1e6, 1),
            "consumer_cpu_pct": round(cpu[1] / drain_s * 100, 1),  # of one core, the consumers together
        },
    }
    log(f"  {out}")
    return out


# --- kills: two broker sets, kill -9 of chaos-a's master under the C++ producer ----------------------------


@contextmanager
def second_set(b: Bed) -> Iterator[int]:
    """chaos-b: one classic master in the cluster, until the block ends; yields its remoting port."""
    h = b.h
    ports = BrokerPorts.reserve()
    root = h.run_dir / "brokers" / "b1"
    keys = broker_keys(
        SET_B,
        root,
        ports,
        h.controlplane.url,
        cluster=CLUSTER,
        token=h.broker_token,
        brokerId=0,
        brokerRole="ASYNC_MASTER",
        mappedFileSizeCommitLog=h.settings.segment_bytes,
        brokerHeartbeatInterval=h.settings.heartbeat_interval_ms,
    )
    proc = broker_process("broker-b1", write_broker_conf(root / "broker.conf", keys), b.logs / "broker-b1.log", h.env)
    try:
        proc.start()
        addr = f"127.0.0.1:{ports.listen}"
        wait_until(
            lambda: proc.check_alive() and addr in h.api.cluster_members(CLUSTER, SET_B).values(),
            START_TIMEOUT_S,
            f"{SET_B} registered",
        )
        yield ports.listen
    finally:
        proc.stop()


@dataclass
class KillTrial:
    at: float
    election_s: float | None
    heal_s: float | None
    send_gap_s: float | None = None
    send_gap_from_s: float | None = None
    failed_sends: int = 0
    problems: tuple[str, ...] = ()


def kills_phase(b: Bed, args) -> dict:
    h = b.h
    trials: list[KillTrial] = []
    problems: list[str] = []
    with second_set(b) as set_b_port:
        b.create_topic(KILLS_TOPIC, QUEUES, (GROUP, SET_B))
        opts = (
            "--interval-ms",
            str(args.interval_ms),
            "--body-bytes",
            str(BODY_BYTES),
            "--timeout-ms",
            str(args.send_timeout_ms),
            "--group",
            "bench-kills",
            "--id-prefix",
            "k-",
        )
        producer, sent = cpp_client("produce", "cpp-kills-producer", b.logs, b.namesrv, KILLS_TOPIC, *opts)

        set_b = f"127.0.0.1:{set_b_port}"

        def on_master() -> int:
            """What chaos-a's master holds of the topic (-1 while there is none)."""
            master = h.master_node()
            return -1 if master is None else stored(f"127.0.0.1:{master.listen_port}", KILLS_TOPIC, QUEUES)

        producer.start()
        try:
            wait_until(lambda: producer.check_alive() and on_master() > 0, START_TIMEOUT_S, "a send stored on chaos-a")
            wait_until(lambda: stored(set_b, KILLS_TOPIC, QUEUES) > 0, START_TIMEOUT_S, "a send stored on chaos-b")
            for i in range(args.kills):
                before = on_master()
                try:
                    wait_until(
                        lambda before=before: producer.check_alive() and on_master() > before,
                        TRIAL_TIMEOUT_S,
                        "the producer sending to chaos-a's master",
                    )
                except TimeoutError as exc:  # report the trials made
                    problems.append(f"before kill {i + 1}: {exc}")
                    break
                fault = ClientKill9(h, sent)
                r = fault.run()
                trials.append(KillTrial(r.at_wall, r.detect_s, r.heal_s, problems=tuple(r.problems)))
                log(f"kill {i + 1}/{args.kills}: election {r.detect_s}, healed {r.heal_s}, problems {r.problems}")
                if r.problems:
                    wait_until(lambda: group_whole(h), START_TIMEOUT_S, "the group whole again after a failed trial")
                time.sleep(max(0.0, r.at_wall + args.window_s - time.time()))
        finally:
            code = producer.stop()
        stopped = time.time()
        master = h.master_node()
        stored_on_sets = {
            GROUP: stored(f"127.0.0.1:{master.listen_port}", KILLS_TOPIC, QUEUES) if master else None,
            SET_B: stored(set_b, KILLS_TOPIC, QUEUES),
        }
        acks = sent.of("ack")
        ack_times = sorted(e["t"] for e in acks)
        fail_times = sorted(e["t"] for e in sent.of("fail"))
        for i, t in enumerate(trials):
            end = min(t.at + args.window_s, trials[i + 1].at if i + 1 < len(trials) else stopped)
            gap, gap_from = longest_quiet(ack_times, t.at, end)
            t.send_gap_s, t.send_gap_from_s = round(gap, 3), round(gap_from - t.at, 3)
            t.failed_sends = sum(1 for f in fail_times if t.at <= f < end)
        log(f"kills: producer stopped (exit code {code}) after {len(acks)} acks; a new consumer group drains {KILLS_TOPIC}")
        acked = {e["id"] for e in acks}
        consumer, got = cpp_client(
            "consume", "cpp-kills-consumer", b.logs, b.namesrv, KILLS_TOPIC, "--group", "bench-kills-check"
        )
        consumer.start()
        try:
            wait_until(
                lambda: consumer.check_alive() and acked <= {e["id"] for e in got.of("delivery")}, args.drain_s, "every acked id"
            )
        except TimeoutError as exc:
            log(f"  {exc}")
        finally:
            consumer.stop()
    lost = acked - {e["id"] for e in got.of("delivery")}
    gaps = [t.send_gap_s for t in trials if t.send_gap_s is not None]
    return {
        "send_gap_s_median": rounded_median(gaps),
        "acked_lost": len(lost),
        "kills": {
            "trials": len(trials),
            "send_gap_s_max": max(gaps, default=None),
            "failed_sends": len(fail_times),
            "acked": len(acked),
            "stored_on_sets": stored_on_sets,
            "problems": problems,
            "election_s_median": rounded_median([t.election_s for t in trials if t.election_s is not None]),
            "lost_sample": sorted(lost)[:5],
            "detail": [asdict(t) for t in trials],
        },
    }


# --- acting: classic mode, the C++ consumer through kill -9 of the master -----------------------------------


@dataclass
class ActingTrial:
    at: float
    resumed_s: float | None = None
    backlog_delivered_s: float | None = None
    master_back_s: float | None = None
    problems: tuple[str, ...] = ()


class ActingBed:
    """The classic bed's master, its slaves and the C++ push consumer of one group on ChaosTopic."""

    def __init__(self, b: Bed, seed: int):
        self.h = b.h
        self.rng = random.Random(seed)
        self.master, self.slaves = b.h.nodes[0], b.h.nodes[1:]
        self.master_remoting = f"127.0.0.1:{self.master.listen_port}"
        self.consumer, self.got = cpp_client(
            "consume", "cpp-acting-consumer", b.logs, b.namesrv, TOPIC, "--group", "bench-acting"
        )
        self.sent = 0  # messages in ChaosTopic, all queues

    def caught_up(self) -> bool:
        delivered = {(d["queue_id"], d["queue_offset"]) for d in self.got.of("delivery")}
        return self.consumer.check_alive() and len(delivered) >= self.sent

    def master_routed(self) -> bool:
        """The route names the master id 0 again and every slave is in sync with it."""
        addr = self.h.api.master_grpc_addr_from_route(TOPIC, GROUP)
        return addr == self.master.grpc_addr and all(self.h.in_sync(n) for n in self.slaves)

    def start(self) -> None:
        self.consumer.start()
        wait_until(lambda: self.consumer.check_alive() and self.got.of("route_ok"), START_TIMEOUT_S, "the consumer's route")
        self.sent = sum(max_offsets(self.master_remoting, TOPIC, QUEUES).values())
        preload(self.master.grpc_addr, TOPIC, 100, "w-")
        self.sent += 100
        wait_until(self.caught_up, START_TIMEOUT_S, "the first 100 messages delivered")

    def trial(self, i: int, backlog: int, restart_after_s: float) -> ActingTrial:
        """Hold the caught-up consumer, send ``backlog``, kill -9 the master, let the consumer go; wait
        for a delivery the master cannot have served and for the backlog; restart the master, wait
        until it is id 0 again, and ``restart_after_s`` later restart the consumer, then send it a
        marker per queue (a consumer that delivered those is up: the next trial may hold it)."""
        wait_until(self.caught_up, TRIAL_TIMEOUT_S, "the consumer caught up")
        # The client polls its routes every 30 s from its start: the kill at a random point of that cycle.
        time.sleep(self.rng.uniform(0, ROUTE_POLL_S))
        ends = max_offsets(self.master_remoting, TOPIC, QUEUES)
        self.consumer.pause()
        preload(self.master.grpc_addr, TOPIC, backlog, f"a{i}-")
        self.sent = sum(ends.values()) + backlog
        self.master.process.kill9()
        t = ActingTrial(time.time())
        self.consumer.resume()
        try:
            wait_until(
                lambda: first_past(self.got.of("delivery"), t.at, ends, PULLED_BEFORE_KILL),
                TRIAL_TIMEOUT_S,
                "a delivery from the slave",
            )
            t.resumed_s = round(first_past(self.got.of("delivery"), t.at, ends, PULLED_BEFORE_KILL) - t.at, 3)
            wait_until(self.caught_up, TRIAL_TIMEOUT_S, "the backlog delivered")
            t.backlog_delivered_s = round(time.time() - t.at, 3)
        except TimeoutError as exc:
            t.problems += (str(exc),)
        self.master.process.start()
        wait_until(self.master_routed, TRIAL_TIMEOUT_S, "the master back as id 0")
        t.master_back_s = round(time.time() - t.at, 3)
        time.sleep(restart_after_s)
        self.consumer.stop()  # a new one takes the group's offsets from the master
        self.consumer.start()
        preload(self.master.grpc_addr, TOPIC, QUEUES, f"r{i}-")
        self.sent = sum(max_offsets(self.master_remoting, TOPIC, QUEUES).values())
        return t


def acting_phase(b: Bed, args) -> dict:
    bed_ = ActingBed(b, args.seed)
    trials: list[ActingTrial] = []
    try:
        bed_.start()
        for i in range(args.kills):
            trials.append(bed_.trial(i, args.backlog, args.restart_after_s))
            log(f"acting trial {i + 1}/{args.kills}: {asdict(trials[-1])}")
        wait_until(bed_.caught_up, TRIAL_TIMEOUT_S, "the consumer caught up at the end")
        time.sleep(args.settle_s)  # a late redelivery shows
    finally:
        bed_.consumer.stop()
    deliveries = bed_.got.of("delivery")
    redelivered = redeliveries(deliveries)
    resumed = [t.resumed_s for t in trials if t.resumed_s is not None]
    return {
        "consume_resumed_s_median": rounded_median(resumed),
        "redelivered_ratio": round(redelivered / len(deliveries), 6) if deliveries else None,
        "acting": {
            "trials": len(trials),
            "consume_resumed_s_max": max(resumed, default=None),
            # the kill -> the whole backlog delivered (the C++ client resumes each queue on its own)
            "backlog_delivered_s_median": rounded_median(
                [t.backlog_delivered_s for t in trials if t.backlog_delivered_s is not None]
            ),
            "deliveries": len(deliveries),
            "redelivered": redelivered,
            "messages": bed_.sent,
            "detail": [asdict(t) for t in trials],
        },
    }


# --- the run --------------------------------------------------------------------------------------------


def goals(out: dict) -> dict[str, bool | None]:
    def check(key: str, ok) -> bool | None:
        return None if out.get(key) is None else ok(out[key])

    return {
        "remoting_vs_grpc_ok": check("remoting_vs_grpc", lambda v: v >= GOALS["remoting_vs_grpc"]),
        "pull_ok": check("pull_msgs_per_s", lambda v: v >= GOALS["pull_msgs_per_s"]),
        "send_gap_ok": check("send_gap_s_median", lambda v: v <= GOALS["send_gap_s_median"]),
        "acked_lost_zero": check("acked_lost", lambda v: v == 0),
        "consume_resumed_ok": check("consume_resumed_s_median", lambda v: v <= ROUTE_POLL_S + 2),
        "redelivered_ok": check("redelivered_ratio", lambda v: v <= GOALS["redelivered_ratio"]),
    }


def phases_of(text: str) -> list[str]:
    wanted = {p.strip() for p in text.split(",") if p.strip()}
    if "failover" in wanted:
        wanted = (wanted - {"failover"}) | {"kills", "acting"}
    unknown = wanted - set(PHASES) - {"all"}
    if unknown:
        raise SystemExit(f"unknown phases {sorted(unknown)}: choose from {', '.join(PHASES)}, failover, all")
    return list(PHASES) if "all" in wanted else [p for p in PHASES if p in wanted]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phases", default="all", help=f"comma-separated: {', '.join(PHASES)}, failover (= kills,acting), all")
    p.add_argument("--senders", type=int, default=4, help="sends: client processes of each kind")
    p.add_argument("--send-s", type=float, default=20.0, help="sends: the measured window")
    p.add_argument("--warmup-s", type=float, default=3.0, help="sends: after every sender had an answer")
    p.add_argument("--messages", type=int, default=200_000, help="pull: messages to drain")
    p.add_argument("--pull-queues", type=int, default=8)
    p.add_argument("--pull-threads", type=int, default=2, help="pull: the push consumer's consume threads")
    p.add_argument(
        "--pull-consumers", type=int, default=1, help="pull: push-consumer processes of one group (the queues split among them)"
    )
    p.add_argument("--kills", type=int, default=10, help="kills and acting: trials of each")
    p.add_argument("--window-s", type=float, default=10.0, help="kills: a trial's window for the send gap")
    p.add_argument("--interval-ms", type=float, default=5.0, help="kills: the producer's pause after each answer")
    p.add_argument("--send-timeout-ms", type=int, default=3000, help="kills: the C++ producer's send timeout (its default)")
    p.add_argument("--drain-s", type=float, default=180.0, help="kills: the checking consumer's time to receive every ack")
    p.add_argument("--backlog", type=int, default=1000, help="acting: messages sent while the consumer is held")
    p.add_argument(
        "--restart-after-s",
        type=float,
        default=ROUTE_POLL_S + 5,
        help="acting: the master back as id 0 -> the consumer's restart (0: at once, before it can commit to the master)",
    )
    p.add_argument("--seed", type=int, default=36, help="acting: where in the client's route poll cycle each kill falls")
    p.add_argument("--settle-s", type=float, default=8.0, help="acting: after the last trial, before counting redeliveries")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    phases = phases_of(args.phases)

    started = time.monotonic()
    run_dir = ARTIFACTS / f"bench-remoting-{time.strftime('%Y%m%d-%H%M%S')}"
    out: dict = {"phases": phases}
    problems: list[str] = []
    controller = [x for x in phases if x in ("sends", "pull", "kills")]
    if controller:
        settings = GroupSettings(replicas=3, all_ack=True, mode="controller")
        with bed("controller", settings, run_dir, args.quiet) as b:
            for phase in controller:
                try:
                    out |= {"sends": sends_phase, "pull": pull_phase, "kills": kills_phase}[phase](b, args)
                except (RuntimeError, TimeoutError) as exc:
                    problems.append(f"{phase}: {exc}")
                    log(f"{phase} failed: {exc}")
    if "acting" in phases:
        settings = GroupSettings(replicas=3, all_ack=True, mode="classic", extra={"enableSlaveActingMaster": "true"})
        with bed("classic", settings, run_dir, args.quiet) as b:
            try:
                out |= acting_phase(b, args)
            except (RuntimeError, TimeoutError) as exc:
                problems.append(f"acting: {exc}")
                log(f"acting failed: {exc}")
    out["goals"] = goals(out)
    out["problems"] = problems
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    out["run_dir"] = str(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    for section in ("sends", "pull", "kills", "acting"):  # the last line stays short: details in report.json
        if isinstance(out.get(section), dict):
            out[section].pop("detail", None)
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
