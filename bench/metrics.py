"""Metrics benchmark (issue 38; docs/metrics.md).

(a) ``scrape_ms_p99``: a real broker process whose store holds 1,000 topics x 8 queues, with 10
    consumer groups each behind on every queue (committed offsets seeded, so every group and topic
    has a backlog whose oldest message's store time is read), scraped over HTTP ``--scrapes`` times
    after one warm-up scrape; ``series_per_broker`` is the number of samples one scrape returns
    (its label cardinality). Goal: p99 < 250 ms.
(b) ``produce_ratio_with_scraping``: gRPC msgs/s of one client process sending batched SendMessage
    requests to a broker scraped every second, over msgs/s without scraping; three alternating runs
    each, the ratio of the medians. Goal: >= 0.97.
(c) ``controlplane_scrape_ms_p99``: the control plane's /metrics with 1,000 replica groups
    (bench/metrics_controlplane.py, run as its own process). Goal: p99 < 250 ms.

The last line printed is one JSON object with those figures.

    python bench/metrics.py [--topics 1000] [--queues 8] [--groups 10] [--scrapes 50]
                            [--messages 150000] [--runs 3] [--controlplane-groups 1000] [--skip-controlplane]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench.produce import SEGMENT, bench_broker, grpc_send_rate  # noqa: E402
from brokers.store.files import write_json_atomically  # noqa: E402
from brokers.store.message import Message  # noqa: E402
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig  # noqa: E402
from brokers.topics import TopicConfig, TopicConfigManager  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GOAL_SCRAPE_MS = 250.0
GOAL_PRODUCE_RATIO = 0.97


def log(msg: str) -> None:
    print(f"[metrics] {msg}", file=sys.stderr, flush=True)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def wait_metrics(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer in {timeout_s} s")


async def seed_store(root: Path, topics: list[str], queues: int, per_queue: int) -> None:
    """``per_queue`` small messages in every queue, written by the store itself (as a broker would)."""
    store = MessageStore(StoreConfig(root, mapped_file_size_commit_log=SEGMENT))
    await store.start()
    try:
        batch = [Message(t, q, b"x" * 100, {}) for t in topics for q in range(queues) for _ in range(per_queue)]
        for start in range(0, len(batch), 512):
            results = await store.put_messages(batch[start : start + 512])
            if any(r.status is not PutMessageStatus.PUT_OK for r in results):
                raise SystemExit("seeding the store failed")
    finally:
        await store.shutdown()


def scrape_phase(base: Path, n_topics: int, queues: int, groups: int, scrapes: int) -> tuple[float, float, int]:
    """(p99 ms, median ms, samples per scrape) of a broker with ``n_topics`` x ``queues`` x ``groups``."""
    topics = [f"Topic{i:04d}" for i in range(n_topics)]
    names = [f"Group{g:02d}" for g in range(groups)]

    def prepare(root: Path) -> None:
        manager = TopicConfigManager(root / "config" / "topics.json")
        for t in topics:
            manager.topics[t] = TopicConfig(t, queues, queues, 6)
        manager.persist()
        log(f"(a) seeding {n_topics} topics x {queues} queues, 3 messages each; {groups} groups behind on every queue")
        asyncio.run(seed_store(root, topics, queues, 3))
        offsets = {f"{g}@{t}@{q}": 1 + (i % 2) for i, g in enumerate(names) for t in topics for q in range(queues)}
        write_json_atomically(root / "config" / "consumerOffset.json", {"offsetTable": offsets, "subscriptionGroups": names})

    with bench_broker(base / "scrape", prepare=prepare) as ports:
        url = f"http://127.0.0.1:{ports.metrics}/metrics"
        wait_metrics(url, 120)
        samples = sum(len(f.samples) for f in text_string_to_metric_families(httpx.get(url, timeout=60).text))
        times = []
        with httpx.Client(timeout=60) as client:
            for _ in range(scrapes):
                started = time.perf_counter()
                resp = client.get(url)
                resp.raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
        return p99(times), statistics.median(times), samples


def produce_phase(base: Path, messages: int, runs: int) -> tuple[float, list[float], list[float]]:
    """(ratio of the medians, msgs/s with scraping, msgs/s without), runs alternating."""
    with_scrapes: list[float] = []
    without: list[float] = []
    for run in range(runs):
        for scraped in (False, True) if run % 2 == 0 else (True, False):
            with bench_broker(base / f"produce-{run}-{int(scraped)}") as ports:
                url = f"http://127.0.0.1:{ports.metrics}/metrics"
                wait_metrics(url)
                stop = threading.Event()
                scraper = threading.Thread(target=scrape_every_second, args=(url, stop), daemon=True)
                if scraped:
                    scraper.start()
                try:
                    rate = grpc_send_rate(ports.grpc, messages, 32, 16)
                finally:
                    stop.set()
                    if scraped:
                        scraper.join()
            (with_scrapes if scraped else without).append(rate)
            log(f"    run {run + 1}, {'scraped every second' if scraped else 'not scraped'}: {rate:.0f} msgs/s")
    return statistics.median(with_scrapes) / statistics.median(without), with_scrapes, without


def scrape_every_second(url: str, stop: threading.Event) -> None:
    with httpx.Client(timeout=10) as client:
        while not stop.wait(1.0):
            client.get(url).raise_for_status()


def controlplane_phase(groups: int) -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "metrics_controlplane.py"), "--groups", str(groups)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"bench/metrics_controlplane.py failed ({proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--groups", type=int, default=10)
    p.add_argument("--scrapes", type=int, default=50)
    p.add_argument("--messages", type=int, default=150_000, help="messages per produce run")
    p.add_argument("--runs", type=int, default=3, help="alternating produce runs each way")
    p.add_argument("--controlplane-groups", type=int, default=1000)
    p.add_argument("--skip-controlplane", action="store_true")
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="rmq-metrics-"))
    try:
        scrape_p99, scrape_median, series = scrape_phase(base, args.topics, args.queues, args.groups, args.scrapes)
        log(f"    scrape p99 {scrape_p99:.1f} ms, median {scrape_median:.1f} ms, {series} samples")
        log(f"(b) gRPC produce, {args.messages} x 1 KB per run, {args.runs} runs each way, scraped every second or not")
        ratio, scraped, plain = produce_phase(base, args.messages, args.runs)
        log(f"    ratio of the medians {ratio:.3f}")
        figures: dict = {}
        if not args.skip_controlplane:
            log(f"(c) control plane /metrics with {args.controlplane_groups} replica groups")
            figures = controlplane_phase(args.controlplane_groups)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    out = {
        "scrape_ms_p99": round(scrape_p99, 1),
        "scrape_ms_median": round(scrape_median, 1),
        "series_per_broker": series,
        "produce_ratio_with_scraping": round(ratio, 3),
        "grpc_msgs_per_s_scraped": [round(r) for r in scraped],
        "grpc_msgs_per_s_not_scraped": [round(r) for r in plain],
    }
    if "controlplane_scrape_ms_p99" in figures:
        out["controlplane_scrape_ms_p99"] = figures["controlplane_scrape_ms_p99"]
    out["goals_met"] = (
        scrape_p99 < GOAL_SCRAPE_MS and ratio >= GOAL_PRODUCE_RATIO and out.get("controlplane_scrape_ms_p99", 0) < GOAL_SCRAPE_MS
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
