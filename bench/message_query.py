"""Finding messages (issue 40; docs/messages.md): lookups over a store of ten million messages through
the control plane's REST API, and what keeping the index costs a producer.

A control plane of this run's own (web only) and one broker set (one broker) serving topic Bench
(8 queues). Before the broker starts, its store is filled in-process with ``--messages`` messages
(``--body`` bytes each) through the broker's own MessageStore, index on, as a broker stores sends:
message n has the unique key (the client's message id, ``UNIQ_KEY``) ``{n:032X}`` and the key
``order-{n // 16}`` (``KEYS``), so every key names 16 messages. The broker then starts on that store
(recovering it) and registers.

Figures (the last line printed is one JSON object):
  query_by_key_ms_p99          GET messages?topic=&key= (a key of 16 messages, maxNum 64), p99 of
                               ``--queries`` random keys (goal < 50)
  query_by_unique_key_ms_p99   GET messages?topic=&uniqueKey=, the client's message id (indexed),
                               p99 of ``--queries`` random ids (goal < 20)
  query_by_offset_id_ms_p99    GET messages/<offset message id>, decoded to the broker and commit-log
                               offset, p99 of ``--queries`` random stored messages (goal < 20)
  index_write_overhead         gRPC sends/s to a broker with the index over a broker without
                               (messageIndexEnable=false), each message with its unique key and a key:
                               the ratio of the medians of ``--runs`` alternating runs (goal >= 0.9)

Every answer is checked: the message found is the one asked for (its unique key, or its key).

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/message_query.py [--messages 10000000]

Uses a database and Redis key prefix of its own (testkit/controlplane.py); logs and stores in
test-artifacts/bench-message-query/ (``--dir`` elsewhere: the full run's store is about 2.5 GB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.produce import grpc_send_rate  # noqa: E402
from brokers.store.message import Message  # noqa: E402
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig  # noqa: E402
from brokers.topics import TopicConfig, TopicConfigManager  # noqa: E402
from mqrules.remoting.message_id import encode_offset_message_id  # noqa: E402
from testkit.brokers import BrokerPorts, broker_keys, broker_process, write_broker_conf  # noqa: E402
from testkit.controlplane import ControlPlane, fresh_standalone_env  # noqa: E402
from testkit.procs import ARTIFACTS, stop_all, wait_until  # noqa: E402

CLUSTER = "DefaultCluster"
TOPIC = "Bench"
QUEUES = 8
PER_KEY = 16
SEGMENT = 1 << 30
GOALS = {
    "query_by_key_ms_p99": 50,
    "query_by_unique_key_ms_p99": 20,
    "query_by_offset_id_ms_p99": 20,
    "index_write_overhead": 0.9,
}


def note(text: str) -> None:
    print(f"[message-query] {text}", flush=True)


def unique_key(n: int) -> str:
    return f"{n:032X}"


def key_of(n: int) -> str:
    return f"order-{n // PER_KEY}"


async def fill(root: Path, count: int, body_size: int, store_host: tuple[str, int]) -> list[int]:
    """Store ``count`` messages as the broker would (index on); returns the commit-log offset of each
    ``count // 100_000``-th message (the offset-id sample)."""
    store = MessageStore(StoreConfig(root, mapped_file_size_commit_log=SEGMENT))
    await store.start()
    body = b"x" * body_size
    sample_every = max(1, count // 100_000)
    sampled: list[int] = []
    batch, in_flight = 256, 16
    next_n = 0
    started = time.perf_counter()

    async def sender() -> None:
        nonlocal next_n
        while next_n < count:
            first = next_n
            last = next_n = min(count, first + batch)
            now = int(time.time() * 1000)
            messages = [
                Message(
                    TOPIC,
                    n % QUEUES,
                    body,
                    {"UNIQ_KEY": unique_key(n), "KEYS": key_of(n)},
                    born_timestamp=now,
                    store_host=store_host,
                )
                for n in range(first, last)
            ]
            results = await store.put_messages(messages)
            for n, result in zip(range(first, last), results, strict=True):
                if result.status is not PutMessageStatus.PUT_OK:
                    raise SystemExit(f"message {n} not stored: {result.status}")
                if n % sample_every == 0:
                    sampled.append(result.physical_offset)
            if first // 1_000_000 != last // 1_000_000:
                rate = last / (time.perf_counter() - started)
                note(f"stored {last:,} of {count:,} ({rate:,.0f} msgs/s)")

    await asyncio.gather(*(sender() for _ in range(in_flight)))
    await store.shutdown()
    return sampled


class Api:
    def __init__(self, url: str, token: str):
        headers = {"Authorization": f"Bearer {token}"}
        self.http = httpx.Client(base_url=url + f"/api/v1/clusters/{CLUSTER}", headers=headers, timeout=30)

    def get(self, path: str, **params) -> tuple[float, dict]:
        started = time.perf_counter()
        response = self.http.get(path, params=params)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise SystemExit(f"GET {path} {params}: {response.status_code} {response.text[:500]}")
        return elapsed, response.json()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def timed_queries(api: Api, count: int, queries: int, offsets: list[int], store_host: tuple[str, int]) -> dict[str, list[float]]:
    rng = random.Random(40)
    times: dict[str, list[float]] = {"key": [], "unique_key": [], "offset_id": []}
    for _ in range(queries):
        n = rng.randrange(count)
        ms, answer = api.get("/messages", topic=TOPIC, uniqueKey=unique_key(n))
        found = [m["uniqKey"] for m in answer["messages"]]
        if found != [unique_key(n)]:
            raise SystemExit(f"unique key {unique_key(n)}: found {found}")
        times["unique_key"].append(ms)

        n = rng.randrange(count)
        ms, answer = api.get("/messages", topic=TOPIC, key=key_of(n), max=64)
        wanted = {unique_key(i) for i in range(n - n % PER_KEY, min(count, n - n % PER_KEY + PER_KEY))}
        if {m["uniqKey"] for m in answer["messages"]} != wanted:
            raise SystemExit(f"key {key_of(n)}: found {len(answer['messages'])} of {len(wanted)}")
        times["key"].append(ms)

        offset = rng.choice(offsets)
        msg_id = encode_offset_message_id(*store_host, offset)
        ms, answer = api.get(f"/messages/{msg_id}")
        if answer["commitLogOffset"] != offset:
            raise SystemExit(f"offset id {msg_id}: answered {answer['commitLogOffset']}")
        times["offset_id"].append(ms)
    return times


def start_broker(root: Path, name: str, url: str, token: str, ports: BrokerPorts | None = None, **keys: object):
    root.mkdir(parents=True, exist_ok=True)
    TopicConfigManager(root / "store" / "config" / "topics.json").update(TopicConfig(TOPIC, QUEUES, QUEUES, 6))
    ports = ports or BrokerPorts.reserve()
    conf = write_broker_conf(
        root / "broker.conf",
        broker_keys(name, root / "store", ports, url, cluster=CLUSTER, token=token, mappedFileSizeCommitLog=SEGMENT, **keys),
    )
    return ports, broker_process(name, conf, root / "broker.log", log_level="WARNING").start()


def overhead(out: Path, url: str, token: str, runs: int, count: int) -> tuple[list[float], list[float]]:
    """gRPC sends/s with the index and without, alternating."""
    started = [
        start_broker(out / "with-index", "with-index", url, token),
        start_broker(out / "no-index", "no-index", url, token, messageIndexEnable="false"),
    ]
    try:
        (on_ports, _), (off_ports, _) = started
        load = dict(count=count, batch=32, in_flight=16, topic=TOPIC, keys=key_of)
        grpc_send_rate(on_ports.grpc, **load)  # warm both up
        grpc_send_rate(off_ports.grpc, **load)
        on, off = [], []
        for i in range(runs):  # ABBA: the order flips every run, so a drift (the logs grow) favours neither
            first, second = ((on_ports, on), (off_ports, off)) if i % 2 == 0 else ((off_ports, off), (on_ports, on))
            for ports, rates in (first, second):
                rates.append(grpc_send_rate(ports.grpc, **load))
            note(f"run {i + 1}: index {on[-1]:,.0f} msgs/s, no index {off[-1]:,.0f} msgs/s")
        return on, off
    finally:
        stop_all([p for _, p in started])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sends", type=int, default=300_000, help="messages per overhead run")
    parser.add_argument("--dir", type=Path, default=ARTIFACTS / "bench-message-query")
    args = parser.parse_args()

    out = args.dir
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = fresh_standalone_env("message-query")
    control = ControlPlane(env, out, fast=True)  # uvloop + httptools, as the demo serves
    processes = []
    try:
        control.start_web()
        admin, broker_token = control.issue_token("bench-admin", "admin"), control.issue_token("bench-broker", "broker")
        on, off = overhead(out / "overhead", control.url, broker_token, args.runs, args.sends)

        ports = BrokerPorts.reserve()
        store_host = ("127.0.0.1", ports.listen)
        started = time.perf_counter()
        offsets = asyncio.run(fill(out / "big" / "store", args.messages, args.body, store_host))
        fill_s = time.perf_counter() - started
        note(f"stored {args.messages:,} messages in {fill_s:.0f} s")
        started = time.perf_counter()
        _, broker = start_broker(out / "big", "big", control.url, broker_token, ports)
        processes.append(broker)
        api = Api(control.url, admin)

        def found_first() -> bool:
            try:
                return bool(api.http.get("/messages", params={"topic": TOPIC, "uniqueKey": unique_key(0)}).json().get("messages"))
            except (httpx.HTTPError, ValueError):
                return False

        wait_until(found_first, 1800, "the filled broker answering queries")
        note(f"the broker answered its first query {time.perf_counter() - started:.0f} s after it started")
        times = timed_queries(api, args.messages, args.queries, offsets, store_host)
    finally:
        stop_all(processes)
        control.stop()

    figures = {
        "query_by_key_ms_p99": round(p99(times["key"]), 2),
        "query_by_unique_key_ms_p99": round(p99(times["unique_key"]), 2),
        "query_by_offset_id_ms_p99": round(p99(times["offset_id"]), 2),
        "index_write_overhead": round(statistics.median(on) / statistics.median(off), 3),
        "query_ms_median": {k: round(statistics.median(v), 2) for k, v in times.items()},
        "sends_per_s": {"index": on, "no_index": off},
        "messages": args.messages,
        "fill_s": round(fill_s, 1),
    }
    figures["goals_met"] = (
        figures["query_by_key_ms_p99"] < GOALS["query_by_key_ms_p99"]
        and figures["query_by_unique_key_ms_p99"] < GOALS["query_by_unique_key_ms_p99"]
        and figures["query_by_offset_id_ms_p99"] < GOALS["query_by_offset_id_ms_p99"]
        and figures["index_write_overhead"] >= GOALS["index_write_overhead"]
    )
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
