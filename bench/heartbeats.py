"""Heartbeat and route benchmark for the nameserver.

Starts a real control plane (uvicorn + Channels + Redis + Postgres, a database of its own), registers
N brokers, and measures:
  * websocket heartbeats: every broker keeps its socket and heartbeats at a fixed rate (open loop,
    N / interval offered per second); latency = send to ack;
  * route queries issued meanwhile at a steady rate, over REST (GET /routes/<topic>) and over the
    nameserver's remoting endpoint (GET_ROUTEINFO_BY_TOPIC, 105: what 4.x clients ask), each from a
    process of its own;
  * REST heartbeats: a closed loop of C concurrent clients.
The last line printed is one JSON object with ws_heartbeats_per_s, ws_heartbeat_p99_ms,
rest_heartbeats_per_s, route_p99_ms, remoting_route_p99_ms, brokers.

    python -m controlplane.launcher bench bench/heartbeats.py   # or, with DATABASE_URL/REDIS_URL set:
    python bench/heartbeats.py --brokers 1000 --interval 0.2 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import websockets  # noqa: E402

from bench.common import (  # noqa: E402
    bench_env,
    clear_redis_prefix,
    paced,
    prepare_database,
    server,
    server_log_dir,
    setup_django,
)
from testkit.controlplane import remoting_nameserver  # noqa: E402
from testkit.pacing import Pace  # noqa: E402
from testkit.stats import percentile  # noqa: E402

logging.getLogger("httpx").setLevel(logging.WARNING)


def log(msg: str) -> None:
    print(f"[heartbeats] {msg}", file=sys.stderr, flush=True)


async def register_all(base: str, token: str, brokers: int) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    addrs = [f"10.{i // 65000}.{(i // 250) % 250}.{i % 250 + 1}:10911" for i in range(brokers)]
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        sem = asyncio.Semaphore(8)

        async def one(i: int, addr: str) -> None:
            body = {
                "clusterName": "bench",
                "brokerName": f"broker-{i // 2}",
                "brokerAddr": addr,
                "brokerId": i % 2,
                "heartbeatTimeoutMillis": 120_000,
                "enableActingMaster": True,
                "topicConfigWrapper": {
                    "dataVersion": {"stateVersion": 1, "counter": 1},
                    "topicConfigTable": {"BenchTopic": {"readQueueNums": 8, "writeQueueNums": 8}, "BenchTopic2": {}},
                },
            }
            async with sem:
                r = await client.post("/api/v1/nameserver/brokers/register", json=body)
                r.raise_for_status()

        await asyncio.gather(*(one(i, a) for i, a in enumerate(addrs)))
    return addrs


async def ws_phase(
    base: str, namesrv: str, token: str, addrs: list[str], interval: float, seconds: float, route_rate: float
) -> tuple[float, list[float], list[float], list[float], int]:
    ws_url = base.replace("http://", "ws://") + "/ws/broker/"
    headers = {"Authorization": f"Bearer {token}", "Origin": base}
    sockets = []
    for i in range(0, len(addrs), 100):
        sockets += await asyncio.gather(
            *(websockets.connect(ws_url, additional_headers=headers, max_queue=None) for _ in addrs[i : i + 100])
        )
    latencies: list[float] = []
    failures = 0
    start = time.monotonic() + 1.0
    measure_from, stop_at = start + 2.0, start + 2.0 + seconds  # 2 s warm-up
    completed_in_window = 0

    async def broker(ws, addr: str, offset: float) -> None:
        nonlocal completed_in_window, failures
        seq = 0
        frame = {"type": "heartbeat", "seq": 0, "payload": {"clusterName": "bench", "brokerAddr": addr}}
        pace = Pace(interval, start + offset)
        while pace.next_at < stop_at:
            delay = pace.wait_s(time.monotonic())
            if delay > 0:
                await asyncio.sleep(delay)
            seq += 1
            frame["seq"] = seq
            sent = time.monotonic()
            await ws.send(json.dumps(frame))
            reply = json.loads(await ws.recv())
            done = time.monotonic()
            if reply.get("type") != "heartbeat_result" or not reply["payload"].get("registered"):
                failures += 1
                if failures <= 3:
                    log(f"unexpected reply: {reply}")
            if sent >= measure_from and done <= stop_at:
                latencies.append((done - sent) * 1000)
                completed_in_window += 1
            pace.advance(time.monotonic())

    # Routes are asked by other clients than the brokers: a separate process, so that the load
    # generator's busy event loop does not count as route latency.
    ctx = multiprocessing.get_context("spawn")
    parent_end, child_end = ctx.Pipe(duplex=False)
    wall_offset = time.time() - time.monotonic()
    window = (measure_from + wall_offset, stop_at + wall_offset, route_rate)
    prober = ctx.Process(target=route_prober, args=(base, token, *window, child_end))
    prober.start()
    remoting_end, remoting_child = ctx.Pipe(duplex=False)
    remoting_prober = ctx.Process(target=remoting_route_prober, args=(namesrv, *window, remoting_child))
    remoting_prober.start()

    n = len(addrs)
    pairs = enumerate(zip(sockets, addrs, strict=True))
    await asyncio.gather(*(broker(ws, a, interval * i / n) for i, (ws, a) in pairs))
    await asyncio.gather(*(ws.close() for ws in sockets))
    route_latencies = await asyncio.to_thread(parent_end.recv)
    remoting_latencies = await asyncio.to_thread(remoting_end.recv)
    prober.join(timeout=30)
    remoting_prober.join(timeout=30)
    return completed_in_window / seconds, latencies, route_latencies, remoting_latencies, failures


def route_prober(base: str, token: str, start_wall: float, stop_wall: float, rate: float, out) -> None:
    """GET /routes/BenchTopic at a steady rate between two wall-clock instants; sends the latencies."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        out.send(
            paced(lambda k: client.get("/api/v1/nameserver/routes/BenchTopic").raise_for_status(), start_wall, stop_wall, rate)
        )


def remoting_route_prober(namesrv: str, start_wall: float, stop_wall: float, rate: float, out) -> None:
    """GET_ROUTEINFO_BY_TOPIC (105) for BenchTopic on one connection, as a 4.x client asks it, at a
    steady rate between two wall-clock instants; sends the latencies."""
    from mqrules.remoting.codes import RequestCode
    from testkit.remoting import RemotingClient

    with RemotingClient(namesrv, timeout=30) as client:

        def ask(_k: int) -> None:
            answer = client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "BenchTopic"})
            if answer.code != 0:
                raise RuntimeError(f"route of BenchTopic over remoting: {answer.code} {answer.remark}")

        out.send(paced(ask, start_wall, stop_wall, rate))


async def rest_phase(base: str, token: str, addrs: list[str], seconds: float, concurrency: int) -> float:
    count = 0
    stop_at = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30, limits=limits
    ) as client:

        async def loop(k: int) -> None:
            nonlocal count
            i = k
            while time.monotonic() < stop_at:
                r = await client.post(
                    "/api/v1/nameserver/brokers/heartbeat", json={"clusterName": "bench", "brokerAddr": addrs[i % len(addrs)]}
                )
                r.raise_for_status()
                assert r.json()["registered"]
                count += 1
                i += concurrency

        await asyncio.gather(*(loop(k) for k in range(concurrency)))
    return count / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", type=int, default=1000)
    p.add_argument("--interval", type=float, default=0.19, help="seconds between heartbeats of one broker")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--route-rate", type=float, default=50.0, help="route queries per second during the ws phase")
    p.add_argument("--rest-concurrency", type=int, default=16)
    p.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("BENCH_WORKERS", "2")),
        help="uvicorn worker processes (the control plane is stateless)",
    )
    p.add_argument("--port", type=int, default=None, help="HTTP port (default: a reserved free one)")
    p.add_argument("--ws-impl", default="websockets-sansio", choices=["websockets", "websockets-sansio", "wsproto"])
    args = p.parse_args()

    env = bench_env("heartbeats")
    log(f"preparing database {env['DATABASE_URL'].rsplit('/', 1)[1]} and Redis prefix {env['REDIS_KEY_PREFIX']}")
    prepare_database(env)
    clear_redis_prefix(env)
    setup_django(env)
    from controlplane.models import ApiToken

    _, token = ApiToken.issue("bench", "admin")
    with server(env, args.port, args.workers, args.ws_impl) as base, remoting_nameserver(env, server_log_dir()) as namesrv:
        log(f"control plane up at {base} ({args.workers} worker(s), {args.ws_impl}); registering {args.brokers} brokers")
        addrs = asyncio.run(register_all(base, token, args.brokers))
        log(f"REST phase: {args.rest_concurrency} concurrent clients, {args.seconds:.0f} s")
        rest_rate = asyncio.run(rest_phase(base, token, addrs, args.seconds, args.rest_concurrency))
        log(f"  {rest_rate:.0f} heartbeats/s")
        offered = args.brokers / args.interval
        log(f"websocket phase: {args.brokers} sockets, {offered:.0f} heartbeats/s offered, {args.seconds:.0f} s")
        ws_rate, lat, route_lat, remoting_lat, failures = asyncio.run(
            ws_phase(base, namesrv, token, addrs, args.interval, args.seconds, args.route_rate)
        )
        log(
            f"  {ws_rate:.0f} heartbeats/s, p50 {percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms, "
            f"failures {failures}; routes p50 {percentile(route_lat, 50):.1f} ms p99 {percentile(route_lat, 99):.1f} ms; "
            f"remoting routes p50 {percentile(remoting_lat, 50):.1f} ms p99 {percentile(remoting_lat, 99):.1f} ms"
        )
    clear_redis_prefix(env)
    result = {
        "ws_heartbeats_per_s": round(ws_rate, 1),
        "ws_heartbeat_p99_ms": round(percentile(lat, 99), 2),
        "rest_heartbeats_per_s": round(rest_rate, 1),
        "route_p99_ms": round(percentile(route_lat, 99), 2),
        "remoting_route_p99_ms": round(percentile(remoting_lat, 99), 2),
        "brokers": args.brokers,
        "ws_offered_per_s": round(offered, 1),
        "ws_failures": failures,
        "ws_ws_vs_rest_ratio": round(ws_rate / rest_rate, 2) if rest_rate else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
