"""Retention under full write load (issue 37; docs/retention.md): a SYNC_MASTER and its slave
(``inSyncReplicas=2``: every send is acknowledged once the slave has it), each on its own tmpfs of
``--disk-gib`` (2 GiB) with 64 MiB commit-log files, written at full rate by one client process
(batched SendMessage with the protocol classes, ``--in-flight`` requests in flight, 1 KiB bodies, a
topic of one queue) in two phases of ``--minutes`` each, on fresh tmpfs mounts:

1. ``expiry``: a retention of ``--retention-s`` (120 s, our ``fileReservedTimeMillis``) and ``deleteWhen``
   every hour: expired files go (and, as the disk is small, forced deletion past 85 % may join in);
2. ``pressure``: RocketMQ's default retention (72 h): only forced deletion past
   ``diskSpaceCleanForciblyRatio`` (85 %) makes room.

A sampler reads both filesystems' use (``statvfs``) every 100 ms. Each deletion is a line in a broker's
log (``deleted commit-log file ...``). A second of the run counts as **deleting** when a deletion on either
broker happened within one second of it, else as **without**; the first ``WARM_UP_S`` seconds and the last
partial second are left out. Throughput per class is the mean of the messages acknowledged per second;
send latency per class is over the requests answered in those seconds.

At the end of a phase (the slave caught up, both stopped) the master's remaining commit log is read
record by record: every acknowledged queue offset at or above the first one kept must be there.

Figures (the last stdout line, one JSON object):
- ``disk_bounded``: use never passed ``diskSpaceWarningLevelRatio`` (90 %) on either broker;
- ``throughput_with_deletion_ratio``: msgs/s while deleting over msgs/s without (goal >= 0.9);
- ``write_p99_ratio``: send p99 while deleting over send p99 without (goal <= 1.5);
- ``acked_lost_within_retention``: acknowledged messages missing from what the master keeps (0);
plus per phase: msgs/s, files deleted per broker by reason, the largest disk use seen, refused sends.
The ratios are over both phases' seconds together.

    python bench/retention.py [--minutes 5] [--disk-gib 2] [--retention-s 120] [--batch 32] [--in-flight 8]

Needs root (``mount -t tmpfs``: testkit/tmpfs.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc as rpc  # noqa: E402

from brokers.store.commitlog import CommitLog  # noqa: E402
from brokers.store.message import Message  # noqa: E402
from brokers.topics import TopicConfig, TopicConfigManager  # noqa: E402
from testkit.brokers import BrokerPorts, broker_keys, broker_process, unreachable_control_plane, write_broker_conf  # noqa: E402
from testkit.procs import Process  # noqa: E402
from testkit.stats import percentile  # noqa: E402
from testkit.tmpfs import tmpfs  # noqa: E402

TOPIC = "Retained"
BODY = os.urandom(1024)
SEGMENT = 64 << 20
WARNING_RATIO = 90
WARM_UP_S = 5
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))
_DELETED = re.compile(r"^(\S+ \S+) INFO brokers\.retention deleted commit-log file \d+ \((\d+) bytes, (\w+);")


def log(msg: str) -> None:
    print(f"[retention] {msg}", file=sys.stderr, flush=True)


@dataclass
class Broker:
    name: str
    root: Path
    disk: Path
    grpc_port: int
    ha_port: int
    log_path: Path
    process: Process = field(repr=False)

    def log_max(self) -> int:
        """The end of its commit log, from the files."""
        d = self.root / "commitlog"
        names = sorted(p.name for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []
        return int(names[-1]) + (d / names[-1]).stat().st_size if names else 0

    def deletions(self) -> list[tuple[float, int, str]]:
        """(wall time, bytes, reason) of each deletion its log names."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if m := _DELETED.match(line):
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out.append((at, int(m.group(2)), m.group(3)))
        return out


def start_broker(
    base: Path, disk: Path, name: str, role: str, broker_id: int, retention_ms: int, master_ha: int | None
) -> Broker:
    root = disk / "store"
    root.mkdir(parents=True)
    if role != "SLAVE":
        TopicConfigManager(root / "config" / "topics.json").update(TopicConfig(TOPIC, 1, 1, 6))
    ports = BrokerPorts.reserve()
    keys = broker_keys(
        "retained",
        root,
        ports,
        unreachable_control_plane(),
        brokerId=broker_id,
        brokerRole=role,
        mappedFileSizeCommitLog=SEGMENT,
        inSyncReplicas=2,
        totalReplicas=2,
        deleteWhen=EVERY_HOUR,
        fileReservedTimeMillis=retention_ms,
    )
    if master_ha is not None:
        keys["haMasterAddress"] = f"127.0.0.1:{master_ha}"
    log_path = base / f"{name}.log"
    process = broker_process(name, write_broker_conf(base / f"{name}.conf", keys), log_path, log_level="INFO").start()
    return Broker(name, root, disk, ports.grpc, ports.ha, log_path, process)


class DiskSampler(threading.Thread):
    def __init__(self, disks: list[Path], interval: float = 0.1):
        super().__init__(name="disk-sampler", daemon=True)
        self.disks, self.interval = disks, interval
        self.peak = [0.0 for _ in disks]
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            for i, d in enumerate(self.disks):
                st = os.statvfs(d)
                used = 100.0 * (st.f_blocks - st.f_bfree) / st.f_blocks
                self.peak[i] = max(self.peak[i], used)


@dataclass
class Load:
    acked: bytearray = field(default_factory=bytearray)  # by queue offset: 1 = acknowledged
    answers: list[tuple[float, float, int]] = field(default_factory=list)  # (wall time answered, ms, msgs acked)
    refused: dict[str, int] = field(default_factory=dict)

    def ack(self, offset: int) -> None:
        if offset >= len(self.acked):
            self.acked.extend(bytes(max(offset + 1 - len(self.acked), 1 << 20)))
        self.acked[offset] = 1


def request(first: int, count: int) -> spb.SendMessageRequest:
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


async def write_for(port: int, seconds: float, batch: int, in_flight: int) -> Load:
    load = Load()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        stub = rpc.MessagingServiceStub(channel)
        deadline = time.monotonic() + 60
        while (warm := await stub.SendMessage(request(1 << 100, 1), timeout=30)).status.code != pb.Code.OK:
            if time.monotonic() > deadline:  # (a SYNC_MASTER answers so until its slave is connected)
                raise RuntimeError("the master never acknowledged a send with its slave (HA link down?)")
            await asyncio.sleep(0.5)
        load.ack(warm.entries[0].offset)
        next_id = [1]
        stop = time.monotonic() + seconds

        async def sender() -> None:
            while time.monotonic() < stop:
                first, next_id[0] = next_id[0], next_id[0] + batch
                t0 = time.perf_counter()
                resp = await stub.SendMessage(request(first, batch), timeout=60)
                ms = (time.perf_counter() - t0) * 1000
                ok = 0
                for e in resp.entries:
                    if e.status.code == pb.Code.OK:
                        load.ack(e.offset)
                        ok += 1
                if resp.status.code != pb.Code.OK:
                    key = f"{pb.Code.Name(resp.status.code)}: {resp.status.message}"[:120]
                    load.refused[key] = load.refused.get(key, 0) + batch - ok
                load.answers.append((time.time(), ms, ok))

        await asyncio.gather(*(sender() for _ in range(in_flight)))
    return load


def kept_offsets(master: Broker) -> tuple[int, bytearray]:
    """(first queue offset kept, bitmap of the queue offsets present) of TOPIC in the master's log."""
    present = bytearray()
    low = None
    log_ = CommitLog(master.root / "commitlog", SEGMENT)
    try:
        for _, record, _ in log_.iter_records(check_crc=False):
            if isinstance(record, Message) and record.topic == TOPIC:
                o = record.queue_offset
                low = o if low is None else min(low, o)
                if o >= len(present):
                    present.extend(bytes(max(o + 1 - len(present), 1 << 20)))
                present[o] = 1
    finally:
        log_.close()
    return (low if low is not None else 0), present


def phase(name: str, minutes: float, retention_ms: int, args) -> dict:
    base = Path(tempfile.mkdtemp(prefix=f"bench-retention-{name}-"))
    size = int(args.disk_gib * (1 << 30))
    try:
        with tmpfs(base / "master-disk", size) as mdisk, tmpfs(base / "slave-disk", size) as sdisk:
            master = start_broker(base, mdisk, "master", "SYNC_MASTER", 0, retention_ms, None)
            slave = start_broker(base, sdisk, "slave", "SLAVE", 1, retention_ms, master.ha_port)
            sampler = DiskSampler([mdisk, sdisk])
            sampler.start()
            try:
                log(f"{name}: writing for {minutes:g} min (retention {retention_ms / 1000:g} s; 0: 72 h)")
                load = asyncio.run(write_for(master.grpc_port, minutes * 60, args.batch, args.in_flight))
                deadline = time.monotonic() + 60
                while slave.log_max() != master.log_max() and time.monotonic() < deadline:
                    time.sleep(0.2)
                caught_up = slave.log_max() == master.log_max()
            finally:
                sampler.stopping.set()
                sampler.join()
                for b in (slave, master):
                    b.process.stop(30)
            deletions = {b.name: b.deletions() for b in (master, slave)}
            low, present = kept_offsets(master)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    acked = load.acked
    lost = sum(1 for o in range(low, len(acked)) if acked[o] and (o >= len(present) or not present[o]))
    msgs = sum(n for _, _, n in load.answers)
    seconds = (load.answers[-1][0] - load.answers[0][0]) if len(load.answers) > 1 else 1.0
    reasons = {b: {r: sum(1 for _, _, x in d if x == r) for r in ("expired", "forced")} for b, d in deletions.items()}
    result = {
        "msgs_per_s": round(msgs / seconds, 1),
        "messages_acked": msgs,
        "files_deleted": reasons,
        "bytes_deleted": {b: sum(n for _, n, _ in d) for b, d in deletions.items()},
        "disk_peak_pct": {"master": round(sampler.peak[0], 1), "slave": round(sampler.peak[1], 1)},
        "refused": load.refused,
        "slave_caught_up": caught_up,
        "first_offset_kept": low,
        "acked_lost_within_retention": lost,
    }
    log(f"{name}: {json.dumps(result)}")
    result["_answers"] = load.answers
    result["_deletions"] = sorted(t for d in deletions.values() for t, _, _ in d)
    return result


def classify(phases: list[dict]) -> dict:
    """Per-second throughput and send p99, while deleting and without (the docstring's definition)."""
    per_s: dict[str, list[int]] = {"deleting": [], "without": []}
    lat: dict[str, list[float]] = {"deleting": [], "without": []}
    for p in phases:
        answers = p["_answers"]
        if not answers:
            continue
        start, end = int(answers[0][0]) + WARM_UP_S, int(answers[-1][0])  # the last second is partial
        deleting = {int(t) + k for t in p["_deletions"] for k in (-1, 0, 1)}
        counts: dict[int, int] = {}
        for t, ms, n in answers:
            s = int(t)
            if start <= s < end:
                counts[s] = counts.get(s, 0) + n
                lat["deleting" if s in deleting else "without"].append(ms)
        for s in range(start, end):
            per_s["deleting" if s in deleting else "without"].append(counts.get(s, 0))
    mean = {k: (sum(v) / len(v) if v else float("nan")) for k, v in per_s.items()}
    p99 = {k: percentile(v, 99) for k, v in lat.items()}
    return {
        "seconds": {k: len(v) for k, v in per_s.items()},
        "msgs_per_s": {k: round(v, 1) for k, v in mean.items()},
        "send_p99_ms": {k: round(v, 2) for k, v in p99.items()},
        "throughput_with_deletion_ratio": round(mean["deleting"] / mean["without"], 3),
        "write_p99_ratio": round(p99["deleting"] / p99["without"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="per phase (two phases)")
    parser.add_argument("--disk-gib", type=float, default=2.0)
    parser.add_argument("--retention-s", type=float, default=120.0, help="phase 1's retention")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=8)
    args = parser.parse_args()
    phases = {
        "expiry": phase("expiry", args.minutes, int(args.retention_s * 1000), args),
        "pressure": phase("pressure", args.minutes, 0, args),
    }
    ratios = classify(list(phases.values()))
    log(f"classified seconds: {json.dumps(ratios)}")
    peaks = [v for p in phases.values() for v in p["disk_peak_pct"].values()]
    out = {
        "disk_bounded": max(peaks) <= WARNING_RATIO,
        "disk_peak_pct": max(peaks),
        "throughput_with_deletion_ratio": ratios["throughput_with_deletion_ratio"],
        "write_p99_ratio": ratios["write_p99_ratio"],
        "acked_lost_within_retention": sum(p["acked_lost_within_retention"] for p in phases.values()),
        "msgs_per_s_deleting": ratios["msgs_per_s"]["deleting"],
        "msgs_per_s_without": ratios["msgs_per_s"]["without"],
        "send_p99_ms_deleting": ratios["send_p99_ms"]["deleting"],
        "send_p99_ms_without": ratios["send_p99_ms"]["without"],
        "phases": {name: {k: v for k, v in p.items() if not k.startswith("_")} for name, p in phases.items()},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
