"""The control plane's ``/metrics`` under a large cluster (issue 38; docs/metrics.md). Goal: p99 < 250 ms.

A database and Redis key prefix of its own (``bench_env("metrics_controlplane")``). Setup, directly
through the models and the liveness modules (no broker process): ``--groups`` controller replica groups
of 3 replicas each (replica 1 master at epoch 1, all three in the SyncStateSet), the same brokers in the
nameserver's registry, every replica heartbeating both tables, and one status report per broker (its
config as a broker sends it, about a hundred keys, and a metricsAddr). Then a real uvicorn web process
(uvloop + httptools, as the demo runs it) is scraped ``--scrapes`` times in a row with a read token,
after ``WARMUP`` scrapes; each scrape's latency is the HTTP round trip. ``--multiproc`` sets
PROMETHEUS_MULTIPROC_DIR for the web process (an empty folder), as the launcher does.

The last line printed is one JSON object: controlplane_scrape_ms_p99, groups (and the median, the number
of scrapes and of samples per scrape).

    python bench/metrics_controlplane.py --groups 1000 [--scrapes 100] [--multiproc]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from bench.common import bench_env, clear_redis_prefix, prepare_database, server, setup_django  # noqa: E402
from testkit.stats import median, percentile  # noqa: E402

CLUSTER = "bench"
REPLICAS = 3
TIMEOUT_MILLIS = 3_600_000  # every broker stays alive for the whole run after one heartbeat
WARMUP = 3


def log(msg: str) -> None:
    print(f"[metrics_controlplane] {msg}", file=sys.stderr, flush=True)


def addr(name: str, broker_id: int) -> str:
    return f"10.{broker_id}.{zlib.crc32(name.encode()) % 250}.{zlib.crc32(name.encode()) // 250 % 250}:10911"


def _config(broker_id: int) -> dict[str, str]:
    """A broker's reported config: the quorum keys and filler of the size a real one has."""
    config = {f"someBrokerKey{i}": str(i * 1000) for i in range(100)}
    config.update(inSyncReplicas="2", minInSyncReplicas="2", allAckInSyncStateSet="false", brokerId=str(broker_id))
    return config


def populate(groups: int) -> None:
    """``groups`` replica groups in the controller and the registry, heartbeating, with status reports."""
    from controlplane.controller import liveness as ctl_liveness
    from controlplane.controller.models import Replica, ReplicaGroup
    from nameserver import broker_status
    from nameserver import liveness as ns_liveness
    from nameserver.core.broker_status import parse_report
    from nameserver.models import BrokerGroup, BrokerMember

    names = [f"s{i:04d}" for i in range(groups)]
    ids = range(1, REPLICAS + 1)
    rows = ReplicaGroup.objects.bulk_create(
        [
            ReplicaGroup(
                cluster_name=CLUSTER,
                broker_name=n,
                master_broker_id=1,
                master_epoch=1,
                sync_state_set_epoch=1,
                next_assign_broker_id=REPLICAS + 1,
            )
            for n in names
        ]
    )
    Replica.objects.bulk_create(
        [
            Replica(
                group=g, broker_id=i, broker_address=addr(g.broker_name, i), register_check_code=f"{i}", in_sync_state_set=True
            )
            for g in rows
            for i in ids
        ]
    )
    ns_rows = BrokerGroup.objects.bulk_create([BrokerGroup(cluster_name=CLUSTER, broker_name=n) for n in names])
    BrokerMember.objects.bulk_create(
        [
            BrokerMember(
                group=g, broker_id=0 if i == 1 else i, broker_addr=addr(g.broker_name, i), heartbeat_timeout_millis=TIMEOUT_MILLIS
            )
            for g in ns_rows
            for i in ids
        ]
    )
    for n in names:
        for i in ids:
            a = addr(n, i)
            ctl_liveness.heartbeat(ctl_liveness.Beat(CLUSTER, n, i, a, 1, 1000, 1000, heartbeat_timeout_millis=TIMEOUT_MILLIS))
            ns_liveness.mark_registered(CLUSTER, a, TIMEOUT_MILLIS)
            report = {
                "clusterName": CLUSTER,
                "brokerName": n,
                "brokerId": 0 if i == 1 else i,
                "brokerAddr": a,
                "status": {
                    "role": "SYNC_MASTER" if i == 1 else "SLAVE",
                    "masterEpoch": 1,
                    "metricsAddr": a.replace(":10911", ":5557"),
                },
                "config": _config(i),
                "dynamicKeys": [],
                "queues": [],
                "offsets": [],
            }
            broker_status.store(parse_report(report))


def controlplane_scrape_bench(groups: int, scrapes: int, *, multiproc: bool = False) -> dict:
    """``groups`` replica groups x 3 replicas, then ``scrapes`` GETs of /metrics through a real uvicorn
    process; returns {"controlplane_scrape_ms_p99": ..., "groups": groups, ...}."""
    env = bench_env("metrics_controlplane")
    log(f"database {env['DATABASE_URL'].rsplit('/', 1)[1]}, Redis prefix {env['REDIS_KEY_PREFIX']}")
    prepare_database(env)
    clear_redis_prefix(env)
    setup_django(env)
    from controlplane.models import ApiToken, TokenScope

    t0 = time.perf_counter()
    populate(groups)
    log(f"{groups} groups x {REPLICAS} replicas set up in {time.perf_counter() - t0:.1f} s")
    token = ApiToken.issue("bench-metrics", TokenScope.READ)[1]
    with tempfile.TemporaryDirectory(prefix="rmq-multiproc-") as folder:
        if multiproc:
            env = {**env, "PROMETHEUS_MULTIPROC_DIR": folder}
        with server(env) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            latencies, size = [], 0
            for k in range(WARMUP + scrapes):
                started = time.perf_counter()
                r = http.get("/metrics")
                took = (time.perf_counter() - started) * 1000
                r.raise_for_status()
                if k >= WARMUP:
                    latencies.append(took)
                size = sum(1 for line in r.text.splitlines() if line and not line.startswith("#"))
    figures = {
        "controlplane_scrape_ms_p99": round(percentile(latencies, 99), 1),
        "controlplane_scrape_ms_p50": round(median(latencies), 1),
        "groups": groups,
        "scrapes": scrapes,
        "samples_per_scrape": size,
        "multiproc": multiproc,
    }
    log(f"p99 {figures['controlplane_scrape_ms_p99']} ms, median {figures['controlplane_scrape_ms_p50']} ms, {size} samples")
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--scrapes", type=int, default=100)
    p.add_argument("--multiproc", action="store_true", help="the web process in prometheus_client's multiprocess mode")
    args = p.parse_args()
    print(json.dumps(controlplane_scrape_bench(args.groups, args.scrapes, multiproc=args.multiproc)), flush=True)


if __name__ == "__main__":
    main()
