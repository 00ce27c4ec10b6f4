"""Dashboard benchmark.

(a) Server time to render the overview page with 1,000 replica groups (3 replicas each, a master, a
    SyncStateSet, nameserver members with live heartbeats and water-level reports in Redis): median of
    ``--renders`` renders through Django's full request stack (middleware, session, template), in
    process, after one warm-up.
(b) Push latency: a real control plane (uvicorn) and a logged-in page's websocket on /ws/dashboard/
    subscribed to everything; an operator elects a designated master through the dashboard's JSON
    action; the time from sending the action until the page's websocket delivers the state change
    (median of ``--pushes`` elections).

Last line: {"overview_1000_ms", "push_latency_ms"}. Goals: < 300 and < 1000.

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

from bench.common import bench_env, clear_redis_prefix, percentile, prepare_database, server, setup_django  # noqa: E402
from testkit.ports import free_port  # noqa: E402


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--renders", type=int, default=10)
    p.add_argument("--pushes", type=int, default=20)
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
    clear_redis_prefix(env)
    print(json.dumps({"overview_1000_ms": round(overview_ms, 1), "push_latency_ms": round(push_ms, 1)}))


if __name__ == "__main__":
    main()
