"""Replication benchmark for classic master/slave over the HA link (brokers/ha/).

Every phase starts real broker processes (``python -m brokers -c broker.conf``) in fresh temporary
folders, with reserved ports (testkit) and an unreachable control-plane URL (sending needs no
control plane; the brokers keep retrying in the background): a master that has the topic in its
``topics.json``, and slaves with ``brokerRole=SLAVE``, ``brokerId>0`` and ``haMasterAddress`` set to
the master's haListenPort. One client process sends 1 KB messages in batched SendMessage requests
(``--batch`` messages each, ``--in-flight`` requests in flight) with the protocol classes of
rocketmq-python-client, as bench/produce.py phase (c) does. Before the clock starts, one warm-up send
must have reached every slave's commit log (the HA link is up).

(a) ASYNC_MASTER with one slave: msgs/s (acknowledged once in the master's log; the detail line also
    says how far behind the slave was when the last send was answered, and how long it took to catch up);
(b) SYNC_MASTER, inSyncReplicas=2, totalReplicas=2, one slave: msgs/s, every send acknowledged only
    after the slave acked its bytes;
(c) SYNC_MASTER, inSyncReplicas=2, totalReplicas=3, two slaves: msgs/s (each send waits for the
    faster of the two slaves);
(d) replication lag, (a)'s setup, open loop at half of (a)'s rate for ``--lag-seconds``: a sampler
    thread reads the master's and the slave's commit-log sizes on disk (``os.stat`` of the segment
    files, every ``--sample-ms``); for each send, the client notes when it was acknowledged and the
    master's commit-log size right then. Its lag is the time from that acknowledgement until the slave's
    commit log was first seen at least that long (0 if it already was). The first second is warm-up and
    not counted. (The stderr detail also has the write-to-write lag: master size sample -> slave size.)

At the end of each phase (once the slaves caught up, and the brokers stopped) the slaves' commit-log
files must be byte-identical to the master's; if not, a WARNING line is printed and the phase's detail
line on stderr says "identical": false. A phase's folder is removed after it, unless ``--dir`` is given.
``--set KEY=VALUE`` adds a line to every broker's broker.conf (e.g. ``--set haTransferBatchSize=262144``).

Goals: sync_async_ratio (b / a) >= 0.5, lag_p99_ms < 50.

Progress goes to stderr; the last line printed to stdout is one JSON object: async_msgs_per_s,
sync2_msgs_per_s, sync3of2_msgs_per_s, sync_async_ratio, lag_p99_ms.

    python bench/replication.py [--messages 100000] [--lag-seconds 10] [--batch 32] [--in-flight 16] [--sample-ms 5]
                                [--set KEY=VALUE ...] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc as rpc  # noqa: E402

from bench.produce import BODY, SEGMENT  # noqa: E402
from brokers.runtime import tune_gc  # noqa: E402
from brokers.topics import TopicConfig, TopicConfigManager  # noqa: E402
from testkit.brokers import BrokerPorts, broker_keys, broker_process, unreachable_control_plane, write_broker_conf  # noqa: E402
from testkit.pacing import Pace  # noqa: E402
from testkit.procs import Process  # noqa: E402
from testkit.stats import percentile  # noqa: E402

TOPIC = "Bench"
STOP_TIMEOUT_S = 30
SYNC_TIMEOUT_S = 60  # how long a slave may take to catch up with its master before the check
EXTRA_CONF: tuple[str, ...] = ()  # --set: more broker.conf lines for every broker


def log(msg: str) -> None:
    print(f"[replication] {msg}", file=sys.stderr, flush=True)


# --- broker processes ----------------------------------------------------------------------------------


@dataclass
class BrokerProc:
    name: str
    root: Path
    grpc_port: int
    ha_port: int
    process: Process = field(repr=False)

    @property
    def commitlog(self) -> Path:
        return self.root / "commitlog"

    def log_tail(self, lines: int = 15) -> str:
        return self.process.log_tail(lines)

    def stop(self) -> None:
        code = self.process.stop(STOP_TIMEOUT_S)
        if code not in (0, -15):
            log(f"WARNING: {self.name} exited with code {code}:\n{self.log_tail()}")


def start_broker(
    base: Path, name: str, role: str, broker_id: int = 0, master_ha_port: int | None = None, in_sync: int = 1, total: int = 1
) -> BrokerProc:
    root = base / name
    root.mkdir(parents=True)
    if role != "SLAVE":
        TopicConfigManager(root / "config" / "topics.json").update(TopicConfig(TOPIC, 8, 8, 6))
    ports = BrokerPorts.reserve()
    keys = broker_keys(
        "bench",
        root,
        ports,
        unreachable_control_plane(),
        brokerId=broker_id,
        brokerRole=role,
        mappedFileSizeCommitLog=SEGMENT,
        inSyncReplicas=in_sync,
        totalReplicas=total,
    )
    if master_ha_port is not None:
        keys["haMasterAddress"] = f"127.0.0.1:{master_ha_port}"
    conf = write_broker_conf(base / f"{name}.conf", keys, EXTRA_CONF)
    process = broker_process(name, conf, base / f"{name}.log", log_level="WARNING").start()
    return BrokerProc(name, root, ports.grpc, ports.ha, process)


def log_size(commitlog: Path) -> int:
    """Bytes in a commit log on disk: the total size of its segment files (they grow as written)."""
    total = 0
    try:
        with os.scandir(commitlog) as it:
            for entry in it:
                if entry.name.isdigit():
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:
                        pass
    except FileNotFoundError:
        return 0
    return total


def wait_caught_up(master: BrokerProc, slaves: list[BrokerProc], timeout: float) -> bool:
    """Until every slave's commit log is as long as the master's (and not empty)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        size = log_size(master.commitlog)
        if size > 0 and all(log_size(s.commitlog) == size for s in slaves):
            return True
        for b in (master, *slaves):
            b.process.check_alive()
        time.sleep(0.01)
    return False


def identical(master: BrokerProc, slave: BrokerProc) -> tuple[bool, str]:
    """Whether the slave's commit-log files are byte-identical to the master's, and why not."""
    ms = sorted(p.name for p in master.commitlog.iterdir() if p.name.isdigit())
    ss = sorted(p.name for p in slave.commitlog.iterdir() if p.name.isdigit())
    if ms != ss:
        return False, f"segment files differ: master {ms}, {slave.name} {ss}"
    for name in ms:
        mp, sp = master.commitlog / name, slave.commitlog / name
        msize, ssize = mp.stat().st_size, sp.stat().st_size
        if msize != ssize:
            return False, f"segment {name}: master {msize} bytes, {slave.name} {ssize} bytes"
        with open(mp, "rb") as mf, open(sp, "rb") as sf:
            pos = 0
            while True:
                a, b = mf.read(8 << 20), sf.read(8 << 20)
                if a != b:
                    at = pos + next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                    return False, f"segment {name}: first difference at byte {at}"
                if not a:
                    break
                pos += len(a)
    return True, ""


# --- the client -----------------------------------------------------------------------------------------


def make_request(first: int, count: int) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=TOPIC),
                body=BODY,
                system_properties=pb.SystemProperties(
                    message_id=f"{n:032X}", body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
                ),
            )
            for n in range(first, first + count)
        ]
    )


def check(resp: spb.SendMessageResponse, failures: dict[str, int]) -> bool:
    if resp.status.code == pb.Code.OK:
        return True
    key = f"{pb.Code.Name(resp.status.code)}: {resp.status.message}"
    failures[key] = failures.get(key, 0) + 1
    return False


async def warm_up(stub: rpc.MessagingServiceStub) -> None:
    """One send; a SYNC_MASTER may answer SLAVE_PERSISTENCE_TIMEOUT while its slaves connect (the
    message is stored anyway); what counts is that the slaves copy it (wait_caught_up)."""
    await stub.SendMessage(make_request(1 << 100, 1), timeout=30)


async def throughput(port: int, count: int, batch: int, in_flight: int, master: BrokerProc, slaves: list[BrokerProc]) -> dict:
    """Closed loop: ``in_flight`` senders, each sending its next request once the last one is
    answered; the clock stops at the last answer. Also notes how far the slaves were behind then
    and how long they took to catch up (what an ASYNC_MASTER's rate leaves for them to do)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        stub = rpc.MessagingServiceStub(channel)
        await warm_up(stub)
        if not await asyncio.to_thread(wait_caught_up, master, slaves, 30):
            raise RuntimeError("the slaves did not copy the warm-up message within 30 s (HA link down?)")
        requests = [make_request(first, min(batch, count - first)) for first in range(0, count, batch)]
        requests.reverse()
        failures: dict[str, int] = {}

        async def sender() -> None:
            while requests:
                check(await stub.SendMessage(requests.pop(), timeout=30), failures)

        start = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(in_flight)))
        elapsed = time.perf_counter() - start
        master_bytes = log_size(master.commitlog)
        behind = [master_bytes - log_size(s.commitlog) for s in slaves]
        if failures:
            raise RuntimeError(f"sends failed: {failures}")
        caught = await asyncio.to_thread(wait_caught_up, master, slaves, SYNC_TIMEOUT_S)
        catch_up = time.perf_counter() - start - elapsed
        return {
            "msgs_per_s": round(count / elapsed, 1),
            "seconds": round(elapsed, 2),
            "slaves_behind_bytes_at_end": behind,
            "catch_up_s": round(catch_up, 2) if caught else None,
        }


class Sampler(threading.Thread):
    """Every ``interval`` s: (time, master commit-log bytes, slave commit-log bytes)."""

    def __init__(self, master: BrokerProc, slave: BrokerProc, interval: float):
        super().__init__(name="size-sampler", daemon=True)
        self.master, self.slave, self.interval = master.commitlog, slave.commitlog, interval
        self.samples: list[tuple[float, int, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        pace = Pace(self.interval, time.perf_counter(), catch_up_s=0.0)  # a late sample does not hurry the next
        while not self.stopping.is_set():
            m = log_size(self.master)
            s = log_size(self.slave)
            self.samples.append((time.perf_counter(), m, s))
            now = time.perf_counter()
            pace.advance(now)
            delay = pace.wait_s(now)
            if delay > 0:
                time.sleep(delay)


async def lag_run(
    port: int, rate: float, seconds: float, batch: int, master: BrokerProc, slave: BrokerProc, sample_s: float
) -> dict:
    """Open loop: a send of ``batch`` messages every batch / rate seconds (a slow send does not delay
    the next), each answer noted as (time acked, master commit-log bytes then)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        stub = rpc.MessagingServiceStub(channel)
        await warm_up(stub)
        if not await asyncio.to_thread(wait_caught_up, master, [slave], 30):
            raise RuntimeError("the slave did not copy the warm-up message within 30 s (HA link down?)")
        sampler = Sampler(master, slave, sample_s)
        sampler.start()
        acks: list[tuple[float, int]] = []
        latencies: list[float] = []
        failures: dict[str, int] = {}
        tasks: set[asyncio.Task] = set()

        async def send(req: spb.SendMessageRequest) -> None:
            t0 = time.perf_counter()
            resp = await stub.SendMessage(req, timeout=30)
            t_ack = time.perf_counter()
            size = log_size(master.commitlog)
            if check(resp, failures):
                acks.append((t_ack, size))
                latencies.append((t_ack - t0) * 1000)

        interval = batch / rate
        start = time.perf_counter() + 0.05
        stop = start + seconds
        k, late = 0, 0
        while True:
            at = start + k * interval
            if at >= stop:
                break
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -interval:
                late += 1
            task = asyncio.get_running_loop().create_task(send(make_request(k * batch, batch)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            k += 1
        sent_for = time.perf_counter() - start
        await asyncio.gather(*list(tasks))
        caught = await asyncio.to_thread(wait_caught_up, master, [slave], SYNC_TIMEOUT_S)
        await asyncio.sleep(3 * sample_s)
        sampler.stopping.set()
        sampler.join()
        if failures:
            raise RuntimeError(f"sends failed: {failures}")
        if not caught:
            raise RuntimeError(f"the slave did not catch up within {SYNC_TIMEOUT_S} s after the lag run")

    samples = sampler.samples
    times = [t for t, _, _ in samples]
    slave_sizes = [s for _, _, s in samples]  # non-decreasing
    for i in range(1, len(slave_sizes)):
        slave_sizes[i] = max(slave_sizes[i], slave_sizes[i - 1])

    def seen_at(size: int) -> float | None:
        i = bisect.bisect_left(slave_sizes, size)
        return times[i] if i < len(times) else None

    counted_from = start + 1.0
    ack_lags, missing = [], 0
    for t_ack, size in acks:
        if t_ack < counted_from:
            continue
        t = seen_at(size)
        if t is None:
            missing += 1
        else:
            ack_lags.append(max(0.0, t - t_ack) * 1000)
    write_lags = []
    prev = -1
    for t, m, _ in samples:
        if t < counted_from or t > stop or m == prev:
            continue
        prev = m
        seen = seen_at(m)
        if seen is not None:
            write_lags.append(max(0.0, seen - t) * 1000)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return {
        "sends": k,
        "offered_msgs_per_s": round(rate, 1),
        "achieved_msgs_per_s": round(k * batch / sent_for, 1),
        "late_sends": late,
        "samples": len(samples),
        "sample_gap_p99_ms": round(percentile(gaps, 99) * 1000, 2),
        "lag_samples": len(ack_lags),
        "missing": missing,
        "lag_p50_ms": round(percentile(ack_lags, 50), 2),
        "lag_p99_ms": round(percentile(ack_lags, 99), 2),
        "lag_max_ms": round(max(ack_lags, default=float("nan")), 2),
        "write_lag_p99_ms": round(percentile(write_lags, 99), 2),
        "send_p50_ms": round(percentile(latencies, 50), 2),
        "send_p99_ms": round(percentile(latencies, 99), 2),
    }


# --- phases ---------------------------------------------------------------------------------------------


def run_phase(base: Path, label: str, role: str, slaves: int, in_sync: int, total: int, body, keep: bool) -> tuple[dict, bool]:
    """Start a master and its slaves in ``base``, run ``body(master, slaves)``, wait for the slaves to
    catch up, stop everything, and compare the commit logs; then remove ``base`` unless ``keep`` (so
    the next phase does not share the disk with the write-back of this one's files). Returns (body's
    result, identical)."""
    base.mkdir(parents=True)
    procs: list[BrokerProc] = []
    detail: dict = {"phase": label, "role": role, "slaves": slaves, "inSyncReplicas": in_sync, "totalReplicas": total}
    try:
        master = start_broker(base, "master", role, in_sync=in_sync, total=total)
        procs.append(master)
        slave_procs = []
        for i in range(1, slaves + 1):
            slave_procs.append(start_broker(base, f"slave{i}", "SLAVE", broker_id=i, master_ha_port=master.ha_port))
            procs.append(slave_procs[-1])
        result = body(master, slave_procs)
        caught = wait_caught_up(master, slave_procs, SYNC_TIMEOUT_S)
        if not caught:
            log(f"WARNING: ({label}) the slaves did not catch up within {SYNC_TIMEOUT_S} s")
    finally:
        for p in reversed(procs):
            p.stop()
    same = True
    detail["master_bytes"] = log_size(master.commitlog)
    detail["slave_bytes"] = [log_size(s.commitlog) for s in slave_procs]
    for s in slave_procs:
        ok, why = identical(master, s)
        if not ok:
            same = False
            log(f"WARNING: ({label}) {s.name}'s commit log is not identical to the master's: {why}")
    detail["identical"] = same
    if not keep:
        shutil.rmtree(base, ignore_errors=True)
    detail.update(result)
    log(f"({label}) detail {json.dumps(detail)}")
    return result, same


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=100_000, help="messages sent in each of (a), (b), (c)")
    p.add_argument("--lag-seconds", type=float, default=10.0, help="length of the open-loop run in (d)")
    p.add_argument("--batch", type=int, default=32, help="messages per SendMessage request")
    p.add_argument("--in-flight", type=int, default=16, help="SendMessage requests in flight in (a)-(c)")
    p.add_argument("--sample-ms", type=float, default=5.0, help="commit-log size sampling interval in (d)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra broker.conf line for every broker (e.g. haTransferBatchSize=262144); repeatable",
    )
    p.add_argument("--dir", default=None, help="where to put the brokers' stores (default: a temporary folder, removed)")
    args = p.parse_args()
    tune_gc()  # as the broker process does (brokers/runtime.py)
    if any("=" not in kv for kv in args.set):
        p.error("--set takes KEY=VALUE")
    global EXTRA_CONF
    EXTRA_CONF = tuple(args.set)
    base = Path(args.dir or tempfile.mkdtemp(prefix="rmq-replication-"))
    n, batch, in_flight, keep = args.messages, args.batch, args.in_flight, bool(args.dir)

    def closed_loop(master: BrokerProc, slaves: list[BrokerProc]) -> dict:
        return asyncio.run(throughput(master.grpc_port, n, batch, in_flight, master, slaves))

    try:
        log(f"(a) ASYNC_MASTER + 1 slave: {n} x 1 KB in SendMessage batches of {batch}, {in_flight} in flight, under {base}")
        res_a, ok_a = run_phase(base / "a-async", "a", "ASYNC_MASTER", 1, 1, 1, closed_loop, keep)
        async_rate = res_a["msgs_per_s"]
        log(
            f"    {async_rate:.0f} msgs/s; the slave was {res_a['slaves_behind_bytes_at_end'][0] / 1e6:.1f} MB behind at the "
            f"end and caught up in {res_a['catch_up_s']} s"
        )
        log("(b) SYNC_MASTER inSyncReplicas=2 totalReplicas=2 + 1 slave")
        res_b, ok_b = run_phase(base / "b-sync2", "b", "SYNC_MASTER", 1, 2, 2, closed_loop, keep)
        sync2_rate = res_b["msgs_per_s"]
        log(f"    {sync2_rate:.0f} msgs/s ({sync2_rate / async_rate:.2f} of async)")
        log("(c) SYNC_MASTER inSyncReplicas=2 totalReplicas=3 + 2 slaves")
        res_c, ok_c = run_phase(base / "c-sync3of2", "c", "SYNC_MASTER", 2, 2, 3, closed_loop, keep)
        sync3_rate = res_c["msgs_per_s"]
        log(f"    {sync3_rate:.0f} msgs/s")
        rate = async_rate / 2
        log(
            f"(d) lag: ASYNC_MASTER + 1 slave, open loop at {rate:.0f} msgs/s (half of (a)) for {args.lag_seconds:g} s, "
            f"sizes sampled every {args.sample_ms:g} ms"
        )

        def open_loop(master: BrokerProc, slaves: list[BrokerProc]) -> dict:
            return asyncio.run(lag_run(master.grpc_port, rate, args.lag_seconds, batch, master, slaves[0], args.sample_ms / 1000))

        lag, ok_d = run_phase(base / "d-lag", "d", "ASYNC_MASTER", 1, 1, 1, open_loop, keep)
        log(
            f"    lag p50 {lag['lag_p50_ms']} ms, p99 {lag['lag_p99_ms']} ms over {lag['lag_samples']} acks "
            f"(achieved {lag['achieved_msgs_per_s']:.0f} msgs/s)"
        )
        if not all((ok_a, ok_b, ok_c, ok_d)):
            log("WARNING: some slave commit logs were not byte-identical to their master's (see the detail lines)")
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(
        json.dumps(
            {
                "async_msgs_per_s": round(async_rate, 1),
                "sync2_msgs_per_s": round(sync2_rate, 1),
                "sync3of2_msgs_per_s": round(sync3_rate, 1),
                "sync_async_ratio": round(sync2_rate / async_rate, 3),
                "lag_p99_ms": lag["lag_p99_ms"],
            }
        )
    )


if __name__ == "__main__":
    main()
