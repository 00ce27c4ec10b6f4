"""Produce benchmark for the broker store.

(a) in-process store append of 1 KB messages under ASYNC_FLUSH, against a plain sequential write of
    the same bytes (1 MiB os.write calls, one fsync at the end) as the physical baseline; both end
    with everything on disk (the store's time includes a final flush). The store can beat the
    baseline: its flush thread overlaps the disk's write-back with appending, the baseline's single
    fsync at the end cannot (docs/store.md);
(b) SYNC_FLUSH with group commit: many concurrent senders, each acknowledged only after an fsync
    that covers it;
(c) end to end over gRPC: a real broker process (its store, ASYNC_FLUSH) and one client process that
    sends batched SendMessage requests (``--batch`` messages each, ``--grpc-in-flight`` requests in
    flight) with the protocol classes of rocketmq-python-client; a real control plane is not needed
    for sending, so the broker runs with an unreachable control-plane URL (it keeps retrying).

The last line printed is one JSON object: store_append_mb_s, raw_write_mb_s, append_ratio,
sync_flush_msgs_per_s, grpc_msgs_per_s.

    python bench/produce.py [--messages 200000] [--sync-messages 100000] [--senders 512] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from brokers.runtime import tune_gc  # noqa: E402
from brokers.store import codec  # noqa: E402
from brokers.store.message import Message  # noqa: E402
from brokers.store.store import FlushDiskType, MessageStore, PutMessageStatus, StoreConfig  # noqa: E402
from brokers.topics import TopicConfig  # noqa: E402
from testkit.brokers import BrokerPorts  # noqa: E402

BODY = os.urandom(1024)
SEGMENT = 256 * 1024 * 1024


def log(msg: str) -> None:
    print(f"[produce] {msg}", file=sys.stderr, flush=True)


async def fill(store: MessageStore, count: int, in_flight: int, batch: int) -> float:
    """Send ``count`` messages in sends of ``batch`` messages (a batched SendMessage) from
    ``in_flight`` concurrent senders, each sending its next batch once the last one is acknowledged;
    returns seconds. The messages are built before the clock starts: this measures the store."""
    sends = [
        [Message("Bench", i % 8, BODY, {"KEYS": str(i)}) for i in range(first, min(count, first + batch))]
        for first in range(0, count, batch)
    ]
    sends.reverse()
    failures = 0
    status = attrgetter("status")

    async def sender() -> None:
        nonlocal failures
        while sends:
            results = await store.put_messages(sends.pop())
            failures += len(results) - list(map(status, results)).count(PutMessageStatus.PUT_OK)  # every result checked

    start = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(in_flight)))
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{failures} sends failed")
    return elapsed


async def store_phase(root: Path, flush: FlushDiskType, count: int, in_flight: int, batch: int) -> tuple[float, int, dict]:
    store = MessageStore(StoreConfig(root, mapped_file_size_commit_log=SEGMENT, flush_disk_type=flush))
    await store.start()
    elapsed = await fill(store, count, in_flight, batch)
    if flush is FlushDiskType.ASYNC_FLUSH:  # count the final flush, as the raw baseline counts its fsync
        t0 = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(store._io, store._flush_all)
        elapsed += time.perf_counter() - t0
    written = store.commit_log.max_offset
    stats = dict(store.stats)
    await store.shutdown()
    return elapsed, written, stats


def raw_write(path: Path, total: int) -> float:
    chunk = (BODY * 1024)[: 1 << 20]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    left = total
    while left > 0:
        left -= os.write(fd, chunk[: min(left, len(chunk))])
    os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


@contextmanager
def bench_broker(
    root: Path, topic: TopicConfig | None = None, prepare: Callable[[Path], None] | None = None, **keys: object
) -> Iterator[BrokerPorts]:
    """A broker process serving ``topic`` (default: Bench, 8 queues) from ``root``, stopped on the way
    out; ``prepare(root)`` fills its store folder first."""
    from brokers.topics import TopicConfigManager
    from testkit.brokers import broker_keys, broker_process, unreachable_control_plane, write_broker_conf

    root.mkdir(parents=True)
    TopicConfigManager(root / "config" / "topics.json").update(topic or TopicConfig("Bench", 8, 8, 6))
    if prepare is not None:
        prepare(root)
    ports = BrokerPorts.reserve()
    conf = write_broker_conf(
        root / "broker.conf",
        broker_keys("bench", root, ports, unreachable_control_plane(), mappedFileSizeCommitLog=SEGMENT, **keys),
    )
    broker = broker_process("broker", conf, root / "broker.log", log_level="ERROR").start()
    try:
        yield ports
    finally:
        broker.stop(30)


def grpc_send_rate(
    port: int,
    count: int,
    batch: int,
    in_flight: int,
    topic: str = "Bench",
    *,
    metadata: Callable[[], tuple] | None = None,
    tls: object | None = None,
    keys: Callable[[int], str] | None = None,
) -> float:
    """msgs/s of ``count`` 1 KB messages sent over gRPC to ``port`` in batched SendMessage requests;
    ``metadata()`` gives each request's metadata (a signature, as the official clients sign every call),
    ``tls`` (grpc.ChannelCredentials) makes the channel a TLS one; ``keys(n)``, when given, is message
    n's key (its ``KEYS``; its unique key is always set)."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as rpc

    def channel_to(target: str):
        return grpc.aio.insecure_channel(target) if tls is None else grpc.aio.secure_channel(target, tls)

    async def run() -> float:
        async with channel_to(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            stub = rpc.MessagingServiceStub(channel)
            requests = [
                spb.SendMessageRequest(
                    messages=[
                        pb.Message(
                            topic=pb.Resource(name=topic),
                            body=BODY,
                            system_properties=pb.SystemProperties(
                                message_id=f"{n:032X}",
                                body_encoding=pb.Encoding.IDENTITY,
                                message_type=pb.MessageType.NORMAL,
                                keys=[keys(n)] if keys else [],
                            ),
                        )
                        for n in range(first, min(count, first + batch))
                    ]
                )
                for first in range(0, count, batch)
            ]
            sem = asyncio.Semaphore(in_flight)

            async def send(req) -> None:
                async with sem:
                    resp = await stub.SendMessage(req, timeout=30, metadata=metadata() if metadata else None)
                    if resp.status.code != pb.Code.OK:
                        raise SystemExit(f"send failed: {resp.status}")

            start = time.perf_counter()
            await asyncio.gather(*(send(r) for r in requests))
            return count / (time.perf_counter() - start)

    return asyncio.run(run())


def grpc_phase(root: Path, count: int, batch: int, in_flight: int) -> float:
    """Start a broker process, create the topic in its store config, and send over gRPC."""
    with bench_broker(root) as ports:
        return grpc_send_rate(ports.grpc, count, batch, in_flight)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--sync-messages", type=int, default=100_000)
    p.add_argument("--senders", type=int, default=512, help="sends in flight")
    p.add_argument("--batch", type=int, default=32, help="messages per send in (a); (b) sends one message each")
    p.add_argument("--grpc-messages", type=int, default=100_000)
    p.add_argument("--grpc-in-flight", type=int, default=16, help="SendMessage requests in flight in (c)")
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = p.parse_args()
    tune_gc()  # as the broker process does (brokers/runtime.py)
    base = Path(args.dir or tempfile.mkdtemp(prefix="rmq-produce-"))
    try:
        log(f"(a) ASYNC_FLUSH: {args.messages} x 1 KB in sends of {args.batch} into {base} ({codec.IMPLEMENTATION} codec)")
        t, written, stats = asyncio.run(
            store_phase(base / "async", FlushDiskType.ASYNC_FLUSH, args.messages, args.senders, args.batch)
        )
        store_mb_s = written / t / 1e6
        log(f"    {store_mb_s:.0f} MB/s ({args.messages / t:.0f} msgs/s, {stats['batches']} batches)")
        shutil.rmtree(base / "async")
        rt = raw_write(base / "raw", written)
        raw_mb_s = written / rt / 1e6
        log(f"    raw sequential write of the same {written / 1e6:.0f} MB: {raw_mb_s:.0f} MB/s")
        (base / "raw").unlink()
        log(f"(b) SYNC_FLUSH group commit: {args.sync_messages} x 1 KB, {args.senders} in flight")
        st, _, sstats = asyncio.run(store_phase(base / "sync", FlushDiskType.SYNC_FLUSH, args.sync_messages, args.senders, 1))
        sync_rate = args.sync_messages / st
        log(
            f"    {sync_rate:.0f} msgs/s, {sstats['fsyncs']} fsyncs ({args.sync_messages / max(1, sstats['fsyncs']):.0f} "
            "messages per fsync)"
        )
        log(f"(c) gRPC: {args.grpc_messages} x 1 KB in SendMessage batches of {args.batch}, one client process")
        grpc_rate = grpc_phase(base / "grpc", args.grpc_messages, args.batch, args.grpc_in_flight)
        log(f"    {grpc_rate:.0f} msgs/s")
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(
        json.dumps(
            {
                "store_append_mb_s": round(store_mb_s, 1),
                "raw_write_mb_s": round(raw_mb_s, 1),
                "append_ratio": round(store_mb_s / raw_mb_s, 3),
                "sync_flush_msgs_per_s": round(sync_rate, 1),
                "grpc_msgs_per_s": round(grpc_rate, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
