"""Dashboard benchmark.

(a) Server time to render the overview page with 1,000 replica groups (3 replicas each, a master, a
    SyncStateSet, nameserver members with live heartbeats and water-level reports in Redis): median of
    ``--renders`` renders through Django's full request stack (middleware, session, template), in
    process, after one warm-up.
(b) Push latency: a real control plane (uvicorn) and a logged-in page's websocket on /ws/dashboard/
    subscribed to everything; an operator elects a designated master through the dashboard's JSON
    action; the time from sending the action until the page's websocket delivers the state change
    (median of ``--pushes`` elections).

(c) The command line's cold start: ``python -m controlplane.cli --url <a control plane the bench starts>
    --json clusterList`` as a fresh process with a read token, on the plane of (a) (1,000 groups, 3,000
    members: the answer is that big), median of ``--cli-runs`` runs; the baseline, measured in the same
    run with the runs interleaved, is ``python -c pass`` (the interpreter's own cold start);
    ``cli_cold_start_ratio`` = cli / baseline. Also the console script (``rmqha``, when installed and
    importable from anywhere), the control plane's answer alone (``cli_cluster_info_ms``, a warm
    client's GET cluster-info, taken next to each run) and the command line's own share
    (``cli_own_ms``, the median of each run less that answer).

(d) Consumer progress: server time to render the consumers page (/consumers/) with 1,000 consumer
    groups x 8 queues (a topic per group, its queues over 4 broker sets, each set's master report
    stored as the broker_status frame stores it), median of ``--renders`` renders; the baseline, in the
    same run, is the same page with no group (``consumer_progress_ratio`` = full / empty).

Last line: {"overview_1000_ms", "push_latency_ms", "cli_cold_start_ms", "cli_python_cold_start_ms",
"cli_cold_start_ratio", "cli_console_script_ms", "cli_cluster_info_ms", "cli_own_ms",
"consumer_progress_1000_groups_ms", "consumer_progress_empty_ms", "consumer_progress_ratio"}. Goals:
< 300, < 1000, cli_cold_start_ms < 500 and consumer_progress_1000_groups_ms < 300.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/dashboard.py [--groups 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_env, clear_redis_prefix, prepare_database, server, setup_django  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.stats import percentile  # noqa: E402

CONSUMERS_PAGE = "/consumers/"


def log(msg: str) -> None:
    print(f"[dashboard] {msg}", file=sys.stderr, flush=True)


def populate(groups: int) -> None:
    """1,000 replica groups the fast way (bulk inserts), as the services would leave them."""
    from controlplane.controller import liveness as ctl_liveness
    from controlplane.controller.models import Replica, ReplicaGroup
    from nameserver import liveness, water_levels
    from nameserver.models import BrokerGroup, BrokerMember

    rg = ReplicaGroup.objects.bulk_create(
        [
            ReplicaGroup(
                cluster_name=f"c{i % 10}",
                broker_name=f"g{i:04d}",
                master_broker_id=1,
                master_epoch=1,
                sync_state_set_epoch=1,
                next_assign_broker_id=4,
            )
            for i in range(groups)
        ]
    )
    Replica.objects.bulk_create(
        [
            Replica(
                group=g,
                broker_id=b,
                broker_address=f"10.{i // 250}.{i % 250}.{b}:10911",
                register_check_code="x;1",
                in_sync_state_set=b < 3,
            )
            for i, g in enumerate(rg)
            for b in (1, 2, 3)
        ]
    )
    bg = BrokerGroup.objects.bulk_create([BrokerGroup(cluster_name=f"c{i % 10}", broker_name=f"g{i:04d}") for i in range(groups)])
    BrokerMember.objects.bulk_create(
        [
            BrokerMember(
                group=g,
                broker_id=0 if b == 1 else b,
                broker_addr=f"10.{i // 250}.{i % 250}.{b}:10911",
                ha_server_addr=f"10.{i // 250}.{i % 250}.{b}:10912",
                heartbeat_timeout_millis=120_000,
            )
            for i, g in enumerate(bg)
            for b in (1, 2, 3)
        ]
    )
    for i in range(groups):
        for b in (1, 2, 3):
            liveness.mark_registered(f"c{i % 10}", f"10.{i // 250}.{i % 250}.{b}:10911", 120_000)
    reports = []
    for i in range(groups):
        base = {"brokerName": f"g{i:04d}", "masterEpoch": 1, "minOffset": 0, "confirmOffset": 10_000}
        reports.append(
            water_levels.WaterLevelReport(
                f"c{i % 10}",
                f"10.{i // 250}.{i % 250}.1:10911",
                {
                    **base,
                    "brokerId": 1,
                    "role": "SYNC_MASTER",
                    "maxOffset": 10_000,
                    "slaves": [
                        {
                            "brokerId": b,
                            "addr": f"10.{i // 250}.{i % 250}.{b}:10912",
                            "ackOffset": 10_000 - b,
                            "lagBytes": b,
                            "lastCaughtUpMs": 1,
                            "transferBytesPerS": 0.0,
                            "inSyncStateSet": b < 3,
                        }
                        for b in (2, 3)
                    ],
                },
            )
        )
    water_levels.store(reports)
    del ctl_liveness


def render_overview(renders: int) -> float:
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.create_user("bench-viewer", password="pw")
    client = Client()
    client.force_login(user)
    first = client.get("/")
    assert first.status_code == 200 and b"g0999" in first.content, first.status_code
    times = []
    for _ in range(renders):
        t0 = time.perf_counter()
        r = client.get("/")
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200
    log(
        f"    overview: {len(first.content) / 1e6:.1f} MB of HTML, median {statistics.median(times):.0f} ms, "
        f"p90 {percentile(times, 90):.0f} ms over {renders} renders"
    )
    return statistics.median(times)


def push_latency(env: dict, pushes: int) -> float:
    import httpx
    import websockets
    from django.contrib.auth.models import Group, User

    from dashboards.permissions import OPERATORS_GROUP

    op = User.objects.create_user("bench-operator", password="operator-pw-1")
    op.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    port = free_port()
    # The benchmark group's replicas must be alive in the controller's heartbeat table to be elected.
    from controlplane.controller import liveness as ctl_liveness
    from controlplane.controller import services

    def beat() -> None:
        ctl_liveness.heartbeat(ctl_liveness.Beat("c0", "g0000", 1, "10.0.0.1:10911", 1, 10_000, 10_000, 1, 600_000))
        ctl_liveness.heartbeat(ctl_liveness.Beat("c0", "g0000", 2, "10.0.0.2:10911", 1, 10_000, 10_000, 1, 600_000))

    with server(env, port) as base:
        http = httpx.Client(base_url=base, timeout=10)
        http.get("/accounts/login/")
        r = http.post(
            "/accounts/login/",
            data={"username": "bench-operator", "password": "operator-pw-1", "csrfmiddlewaretoken": http.cookies["csrftoken"]},
            headers={"Referer": f"{base}/accounts/login/"},
        )
        assert r.status_code in (200, 302), r.status_code
        http.get("/groups/g0000/elect-preview")
        cookies = "; ".join(f"{k}={v}" for k, v in http.cookies.items())

        async def run() -> list[float]:
            out = []
            async with websockets.connect(
                f"ws://127.0.0.1:{port}/ws/dashboard/", additional_headers={"Cookie": cookies, "Origin": base}
            ) as ws:
                await ws.send(json.dumps({"subscribe": "g0000"}))
                assert json.loads(await ws.recv())["type"] == "subscribed"
                for k in range(pushes):
                    beat()
                    target = 2 if k % 2 == 0 else 1
                    t0 = time.perf_counter()
                    resp = await asyncio.to_thread(
                        http.post,
                        "/groups/g0000/elect",
                        json={"brokerId": target},
                        headers={"X-CSRFToken": http.cookies["csrftoken"], "Referer": base},
                    )
                    assert resp.status_code == 200 and resp.json()["ok"], resp.text
                    while True:
                        msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
                        if msg.get("kind") == "state" and msg["data"]["masterBrokerId"] == target:
                            break
                    out.append((time.perf_counter() - t0) * 1000)
                    after = resp.json()["after"]  # an election leaves {master}; put both back in sync
                    await asyncio.to_thread(
                        services.alter_sync_state_set,
                        "g0000",
                        master_broker_id=target,
                        master_epoch=after["masterEpoch"],
                        new_sync_state_set={1, 2},
                        sync_state_set_epoch=after["syncStateSetEpoch"],
                    )
            return out

        latencies = asyncio.run(run())
    log(f"    push: median {statistics.median(latencies):.0f} ms, p99 {percentile(latencies, 99):.0f} ms over {pushes}")
    return statistics.median(latencies)


def cli_cold_start(env: dict, runs: int, groups: int) -> dict:
    """(c): fresh processes of the command line against a real control plane, interleaved with the baseline."""
    import subprocess

    import httpx

    from controlplane.models import ApiToken

    token = ApiToken.issue("bench-cli", "read")[1]
    child_env = {**env, "RMQHA_TOKEN": token}
    console = Path(sys.executable).parent / "rmqha"
    root = Path(__file__).resolve().parent.parent

    def wall_ms(argv: list[str]) -> float:
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=child_env, cwd=root, capture_output=True, text=True, timeout=60)
        elapsed = (time.perf_counter() - t0) * 1000
        assert done.returncode == 0, (argv, done.stderr[-2000:])
        return elapsed

    with server(env) as base:
        cli = [sys.executable, "-m", "controlplane.cli", "--url", base, "--json", "clusterList"]
        first = subprocess.run(cli, env=child_env, cwd=root, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0 and len(json.loads(first.stdout)["brokerAddrTable"]) == groups, first.stderr[-2000:]
        scripted = console.exists()
        if scripted:  # the installed script must import the project from anywhere, as operators run it
            tried = subprocess.run([str(console), "--help"], env=child_env, cwd="/", capture_output=True, text=True, timeout=60)
            scripted = tried.returncode == 0
            if not scripted:
                log(f"    the console script {console} does not run: {(tried.stderr.strip().splitlines() or ['?'])[-1]}")
        baseline, cold, script, answer = [], [], [], []
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            http.get("/api/v1/nameserver/cluster-info").raise_for_status()
            for _ in range(runs):
                baseline.append(wall_ms([sys.executable, "-c", "pass"]))
                cold.append(wall_ms(cli))
                if scripted:
                    script.append(wall_ms([str(console), "--url", base, "--json", "clusterList"]))
                t0 = time.perf_counter()
                http.get("/api/v1/nameserver/cluster-info").raise_for_status()
                answer.append((time.perf_counter() - t0) * 1000)
    out = {
        "cli_cold_start_ms": round(statistics.median(cold), 1),
        "cli_python_cold_start_ms": round(statistics.median(baseline), 1),
        "cli_cold_start_ratio": round(statistics.median(cold) / statistics.median(baseline), 2),
        "cli_console_script_ms": round(statistics.median(script), 1) if script else None,
        "cli_cluster_info_ms": round(statistics.median(answer), 1),
        # the command line's own share: each run less the answer measured next to it
        "cli_own_ms": round(statistics.median(c - a for c, a in zip(cold, answer, strict=True)), 1),
    }
    log(
        f"    cli: clusterList ({len(first.stdout) / 1e6:.2f} MB of JSON) median {out['cli_cold_start_ms']:.0f} ms, "
        f"p90 {percentile(cold, 90):.0f} ms; python -c pass {out['cli_python_cold_start_ms']:.0f} ms; "
        f"console script {out['cli_console_script_ms']} ms; the answer alone {out['cli_cluster_info_ms']:.0f} ms, "
        f"the command line's own share {out['cli_own_ms']:.0f} ms"
    )
    return out


def populate_consumers(groups: int, queues: int = 8, sets: int = 4) -> None:
    """``groups`` consumer groups of ``queues`` queues each, as the brokers' status reports leave them
    (nameserver.broker_status.store, the frame handler's own store): a topic per group, its queues
    spread over ``sets`` broker sets, each set's master reporting its queues and offsets."""
    from nameserver import broker_status
    from nameserver.core.broker_status import parse_report

    per_set = queues // sets
    for s in range(sets):
        rows_q, rows_o = [], []
        for g in range(groups):
            for q in range(per_set):
                rows_q.append([f"Topic{g:04d}", q, 0, 1000 + g])
                rows_o.append([f"group{g:04d}", f"Topic{g:04d}", q, 900 + g % 200])
        report = {
            "clusterName": "c0",
            "brokerName": f"bench-set-{s}",
            "brokerId": 0,
            "brokerAddr": f"10.9.0.{s}:10911",
            "status": {"role": "SYNC_MASTER", "metaMode": "WRITER", "masterEpoch": 1, "writable": True},
            "config": {"brokerStatusReportInterval": "600000"},  # the bench's reports stay fresh
            "dynamicKeys": [],
            "queues": rows_q,
            "offsets": rows_o,
        }
        broker_status.store(parse_report(report))


def render_page(path: str, renders: int, must_contain: bytes) -> float:
    """Median server time of ``renders`` renders of ``path`` for a logged-in viewer (after one warm-up)."""
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="bench-viewer")
    client = Client()
    client.force_login(user)
    first = client.get(path)
    assert first.status_code == 200 and must_contain in first.content, (path, first.status_code)
    times = []
    for _ in range(renders):
        t0 = time.perf_counter()
        r = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200
    log(f"    {path}: {len(first.content) / 1e6:.2f} MB of HTML, median {statistics.median(times):.1f} ms over {renders} renders")
    return statistics.median(times)


def consumer_progress(groups: int, renders: int) -> dict:
    """(d) The consumers page with ``groups`` groups x 8 queues; baseline: the same page with none."""
    from nameserver import broker_status

    empty_ms = render_page(CONSUMERS_PAGE, renders, b"<table")
    populate_consumers(groups)
    assert len(broker_status.consumer_groups()) == groups
    full_ms = render_page(CONSUMERS_PAGE, renders, f"group{groups - 1:04d}".encode())
    return {
        "consumer_progress_1000_groups_ms": round(full_ms, 1),
        "consumer_progress_empty_ms": round(empty_ms, 1),
        "consumer_progress_ratio": round(full_ms / empty_ms, 1) if empty_ms else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--renders", type=int, default=10)
    p.add_argument("--pushes", type=int, default=20)
    p.add_argument("--cli-runs", type=int, default=20)
    args = p.parse_args()
    env = bench_env("dashboard")
    log("preparing the database")
    prepare_database(env)
    clear_redis_prefix(env)
    setup_django(env)
    populate(args.groups)
    log(f"(a) overview with {args.groups} replica groups")
    overview_ms = render_overview(args.renders)
    log("(b) push latency: elect from the dashboard, until the page's websocket has it")
    push_ms = push_latency(env, args.pushes)
    log("(c) the command line's cold start: clusterList as a fresh process")
    cli = cli_cold_start(env, args.cli_runs, args.groups)
    log(f"(d) consumer progress: the consumers page with {args.groups} groups x 8 queues")
    consumers = consumer_progress(args.groups, args.renders)
    clear_redis_prefix(env)
    print(json.dumps({"overview_1000_ms": round(overview_ms, 1), "push_latency_ms": round(push_ms, 1), **cli, **consumers}))


if __name__ == "__main__":
    main()
