"""The message index's cost and speed in the store (brokers/store/index.py), without a broker process.

Puts ``--messages`` 1 KB messages with a unique key (UNIQ_KEY, 32 hex) and a key shared by
``--shared`` messages (KEYS) through ``MessageStore.put_messages`` in sends of ``--batch`` messages,
``--senders`` in flight, under ASYNC_FLUSH, once with the index and once without (``--rounds``
alternating pairs; the median of each side counts), then queries the indexed store: random unique
keys and random shared keys (``max_num`` = ``--shared``), each answer checked.

The last line printed is one JSON object: msgs_per_s_index_on, msgs_per_s_index_off, write_ratio,
query_unique_ms_p50/p99, query_shared_ms_p50/p99, index_files, index_bytes_on_disk.

    python bench/index_store.py [--messages 1000000] [--rounds 1] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from brokers.runtime import tune_gc  # noqa: E402
from brokers.store import codec  # noqa: E402
from brokers.store.message import Message  # noqa: E402
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig  # noqa: E402

BODY = os.urandom(1024)
SEGMENT = 256 * 1024 * 1024
TOPIC = "Bench"


def log(msg: str) -> None:
    print(f"[index_store] {msg}", file=sys.stderr, flush=True)


def uniq(n: int) -> str:
    return f"{n:032X}"


def shared(n: int, per: int) -> str:
    return f"order-{n // per}"


def sends(count: int, batch: int, per: int) -> list[list[Message]]:
    out = [
        [
            Message(TOPIC, i % 8, BODY, {"UNIQ_KEY": uniq(i), "KEYS": shared(i, per), "TAGS": "t"})
            for i in range(first, min(count, first + batch))
        ]
        for first in range(0, count, batch)
    ]
    out.reverse()
    return out


async def fill(store: MessageStore, todo: list[list[Message]], in_flight: int) -> float:
    status = attrgetter("status")
    failures = 0

    async def sender() -> None:
        nonlocal failures
        while todo:
            results = await store.put_messages(todo.pop())
            failures += len(results) - list(map(status, results)).count(PutMessageStatus.PUT_OK)

    start = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(in_flight)))
    await asyncio.get_running_loop().run_in_executor(store._io, store._flush_all)  # what is written is on disk
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{failures} sends failed")
    return elapsed


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def queries(store: MessageStore, count: int, per: int, samples: int) -> dict[str, float]:
    """Latencies (ms) of the store's query, in this thread: unique keys and shared keys."""
    rng = random.Random(7)
    unique_ms, shared_ms = [], []
    for _ in range(samples):
        n = rng.randrange(count)
        t0 = time.perf_counter()
        got = store.query_index_sync(TOPIC, uniq(n), 0, 2**62, 32)
        unique_ms.append((time.perf_counter() - t0) * 1000)
        if len(got) != 1:
            raise SystemExit(f"unique key {uniq(n)}: {len(got)} answers")
        t0 = time.perf_counter()
        got = store.query_index_sync(TOPIC, shared(n, per), 0, 2**62, per)
        shared_ms.append((time.perf_counter() - t0) * 1000)
        want = min(per, count - n // per * per)
        if len(got) != want:
            raise SystemExit(f"shared key {shared(n, per)}: {len(got)} answers, want {want}")
    return {
        "query_unique_ms_p50": round(percentile(unique_ms, 0.5), 3),
        "query_unique_ms_p99": round(percentile(unique_ms, 0.99), 3),
        "query_shared_ms_p50": round(percentile(shared_ms, 0.5), 3),
        "query_shared_ms_p99": round(percentile(shared_ms, 0.99), 3),
    }


async def run(root: Path, index: bool, args: argparse.Namespace, measure_queries: bool) -> tuple[float, dict]:
    todo = sends(args.messages, args.batch, args.shared)
    config = StoreConfig(root, mapped_file_size_commit_log=SEGMENT, message_index_enable=index)
    store = MessageStore(config)
    await store.start()
    elapsed = await fill(store, todo, args.senders)
    extra: dict = {}
    if measure_queries:
        extra = queries(store, args.messages, args.shared, args.queries)
        files = list((root / "index").iterdir())
        extra["index_files"] = len(files)
        extra["index_bytes_on_disk"] = sum(os.stat(f).st_blocks * 512 for f in files)
    await store.shutdown()
    return args.messages / elapsed, extra


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=32, help="messages per send")
    p.add_argument("--senders", type=int, default=512, help="sends in flight")
    p.add_argument("--shared", type=int, default=64, help="messages that share one KEYS key")
    p.add_argument("--rounds", type=int, default=1, help="alternating (on, off) pairs")
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = p.parse_args()
    tune_gc()
    base = Path(tempfile.mkdtemp(prefix="index-bench-", dir=args.dir))
    on, off, extra = [], [], {}
    try:
        for r in range(args.rounds):
            for index in (True, False) if r % 2 == 0 else (False, True):
                root = base / f"{r}-{'on' if index else 'off'}"
                rate, found = asyncio.run(run(root, index, args, measure_queries=index and not extra))
                extra = extra or found
                (on if index else off).append(rate)
                log(f"round {r} index {'on ' if index else 'off'}: {rate:,.0f} msgs/s ({codec.IMPLEMENTATION} codec)")
                shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result = {
        "messages": args.messages,
        "msgs_per_s_index_on": round(statistics.median(on)),
        "msgs_per_s_index_off": round(statistics.median(off)),
        "write_ratio": round(statistics.median(on) / statistics.median(off), 3),
        **extra,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
