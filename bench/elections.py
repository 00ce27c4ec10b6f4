"""Election benchmark for the controller.

A database and Redis key prefix of its own (``bench_env("elections")``), real Postgres row locks and real
Redis. The callers are separate OS processes (no GIL between them) that call the controller services
directly (``services.elect_master`` / ``alter_sync_state_set``), not over HTTP: this measures the
transition path (row lock, liveness read in Redis, rule, state and history writes, commit, post-commit
role-change push), not the web stack. As in a web process, the dashboard listens to the controller's
``replica_group_changed`` in every caller: it notes the group and hands the names to Redis from a thread
of its own (batched; the pages' process publishes the states); the names handed over are counted
(``--without-dashboard`` disconnects it, to see its cost).

Setup: ``--groups`` broker sets plus one hot set, ``--replicas`` replicas each, every replica heartbeating
with a long timeout, replica 1 elected first. Then:
  (a) spread: ``--callers`` processes make elections over the ``--groups`` sets for ``--seconds``; each
      caller owns every callers-th set, so no two callers meet on a row (contention is phase b);
  (b) hot: the same callers all elect on the one hot set (they race for its row lock; a caller that
      saw a stale master may ask for the replica that has just become master: 2011, a refusal);
  (c) during (a), a separate process sends controller heartbeats (``services.heartbeat``: one Redis
      EVAL) at ``--heartbeat-rate`` per second and records their latency.

Elections are operator-designated switchovers to a live replica other than the master the caller
last saw (code 0 = a real new master, masterEpoch + 1). Two ways to keep them electable:
  * ``--mode unclean`` (default): ``enableElectUncleanMaster=true`` in the controller config, so any
    live replica may be designated and every elect call can be a real switchover;
  * ``--mode clean``: the SyncStateSet is {new master} after each election, so the caller first widens
    it with a fenced ``alter_sync_state_set`` (counted separately) and then designates a member.
Only code-0 elections count in the rates and p99s; refusals (2011/2012, fenced alters) are reported
separately. The callers run with LOG_LEVEL=WARNING unless it is set (the services log each election at INFO).
At the end ``check_history()`` runs over the whole history, and the code-0 count is compared with the
masterEpoch increments.

The last line printed is one JSON object with spread_elections_per_s, spread_p99_ms, hot_elections_per_s,
hot_p99_ms, heartbeat_p99_ms_during_elections, invariant_violations (and details).

    python bench/elections.py                       # with DATABASE_URL / REDIS_URL set (or their defaults)
    python bench/elections.py --mode clean --seconds 10 --callers 16 --groups 1000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_env, clear_redis_prefix, paced, prepare_database, setup_django  # noqa: E402
from testkit.stats import percentile  # noqa: E402

CLUSTER = "bench"
HOT = "hot"
TIMEOUT_MILLIS = 3_600_000  # replicas stay alive for the whole run after one heartbeat


def log(msg: str) -> None:
    print(f"[elections] {msg}", file=sys.stderr, flush=True)


def group_names(n: int) -> list[str]:
    return [f"s{i:04d}" for i in range(n)]


def addr(name: str, broker_id: int) -> str:
    return f"10.{broker_id}.{zlib.crc32(name.encode()) % 250}.1:10911"


def beat(name: str, broker_id: int):
    from controlplane.controller import liveness

    return liveness.Beat(
        CLUSTER,
        name,
        broker_id,
        addr(name, broker_id),
        epoch=1,
        max_offset=1000 + broker_id,
        heartbeat_timeout_millis=TIMEOUT_MILLIS,
    )


# --- caller processes ------------------------------------------------------------------------------


def setup_groups(names: list[str], replicas: int) -> None:
    from controlplane.controller import services

    for name in names:
        for broker_id in range(1, replicas + 1):
            out = services.apply_broker_id(
                CLUSTER, name, broker_id, f"{addr(name, broker_id)};{broker_id}", requested_by="bench-setup"
            )
            assert out.ok, out
            services.heartbeat(beat(name, broker_id))
        assert services.elect_master(name, broker_id=1, requested_by="bench-setup").ok


def elect_loop(names: list[str], mode: str, seed: int, start: float, measure_from: float, stop: float) -> dict:
    """Elections until ``stop`` (wall clock); latencies of the calls that started and ended in the window."""
    from controlplane.controller import selectors, services
    from controlplane.controller.core.state import Trigger
    from dashboards.live import NOTE_RATE_PER_S, change_notes

    handed_before = change_notes.handed

    rng = random.Random(seed)
    seen = {}
    ok_ms: list[float] = []
    refused_ms: list[float] = []
    alter_ms: list[float] = []
    counts: Counter[str] = Counter()  # in the window
    total_elect_ok = 0  # whole run (the epoch check)
    while time.time() < start:
        time.sleep(0.001)
    i = 0
    while True:
        t_start = time.time()
        if t_start >= stop:
            break
        name = names[i % len(names)] if len(names) > 1 else names[0]
        i += 1
        state = seen.get(name) or selectors.replica_info(name)
        kind = "elect"
        pool = sorted(state.replica_ids - {state.master_broker_id})
        if mode == "clean":
            pool = sorted(state.sync_state_set - {state.master_broker_id})
            if not pool:
                kind = "alter"
        t0 = time.perf_counter()
        if kind == "alter":
            out = services.alter_sync_state_set(
                name,
                master_broker_id=state.master_broker_id,
                master_epoch=state.master_epoch,
                new_sync_state_set=set(state.replica_ids),
                sync_state_set_epoch=state.sync_state_set_epoch,
                requested_by="bench",
            )
        else:
            out = services.elect_master(
                name, broker_id=rng.choice(pool), designate=True, trigger=Trigger.OPERATOR, requested_by="bench"
            )
        ms = (time.perf_counter() - t0) * 1000
        t_end = time.time()
        seen[name] = out.state
        code = int(out.code)
        if kind == "elect" and code == 0:
            total_elect_ok += 1
        if t_start >= measure_from and t_end <= stop:
            counts[f"{kind}:{code}"] += 1
            if kind == "alter":
                alter_ms.append(ms)
            elif code == 0:
                ok_ms.append(ms)
            else:
                refused_ms.append(ms)
    time.sleep(2 / NOTE_RATE_PER_S)  # the dashboard's last batch of notes is handed over before we count
    return {
        "ok_ms": ok_ms,
        "refused_ms": refused_ms,
        "alter_ms": alter_ms,
        "counts": dict(counts),
        "total_elect_ok": total_elect_ok,
        "dashboard_notes": change_notes.handed - handed_before,
    }


def caller(conn) -> None:
    """A caller process: runs the commands its pipe brings until ``None``."""
    import django

    django.setup()
    from django.db import connection

    from controlplane.controller.config_store import current_config
    from controlplane.redis import sync_client

    current_config()
    sync_client().ping()
    if os.environ.get("BENCH_WITHOUT_DASHBOARD"):  # --without-dashboard: nobody hears the elections
        from controlplane.controller.signals import replica_group_changed

        replica_group_changed.disconnect(dispatch_uid="dashboards.live.state")
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd is None:
            break
        op, kwargs = cmd
        try:
            if op == "setup":
                setup_groups(**kwargs)
                conn.send({"ok": True})
            elif op == "elect":
                conn.send(elect_loop(**kwargs))
        except Exception as exc:  # reported by the parent
            import traceback

            conn.send({"error": f"{exc!r}\n{traceback.format_exc(limit=8)}"})
    connection.close()


def heartbeat_prober(conn, names: list[str], replicas: int, rate: float, measure_from: float, stop: float) -> None:
    """Controller heartbeats at a steady rate (one ``services.heartbeat`` each) from a process of its own."""
    import django

    django.setup()
    from controlplane.controller import services
    from controlplane.redis import sync_client

    sync_client().ping()
    beats = [beat(n, i) for n in names for i in range(1, replicas + 1)]
    conn.send(paced(lambda k: services.heartbeat(beats[k % len(beats)]), measure_from, stop, rate))


# --- the parent --------------------------------------------------------------------------------------


class Callers:
    def __init__(self, ctx, n: int):
        self.pipes, self.procs = [], []
        for _ in range(n):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=caller, args=(child_end,), daemon=True)
            p.start()
            self.pipes.append(parent_end)
            self.procs.append(p)
        for pipe in self.pipes:
            assert pipe.recv() == "ready"

    def all(self, op: str, kwargs_per_caller: list[dict]) -> list[dict]:
        for pipe, kwargs in zip(self.pipes, kwargs_per_caller, strict=True):
            pipe.send((op, kwargs))
        results = [pipe.recv() for pipe in self.pipes]
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise SystemExit(f"a caller failed:\n{errors[0]}")
        return results

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for p in self.procs:
            p.join(timeout=30)


def phase(
    callers: Callers, per_caller: list[list[str]], mode: str, seconds: float, warmup: float, prober: tuple | None = None
) -> dict:
    start = time.time() + 0.5
    measure_from = start + warmup
    stop = measure_from + seconds
    probe = None
    if prober is not None:
        ctx, names, replicas, rate = prober
        parent_end, child_end = ctx.Pipe(duplex=False)
        probe = ctx.Process(target=heartbeat_prober, args=(child_end, names, replicas, rate, measure_from, stop), daemon=True)
        probe.start()
    results = callers.all(
        "elect",
        [
            dict(names=names, mode=mode, seed=k, start=start, measure_from=measure_from, stop=stop)
            for k, names in enumerate(per_caller)
        ],
    )
    ok = [x for r in results for x in r["ok_ms"]]
    refused = [x for r in results for x in r["refused_ms"]]
    alters = [x for r in results for x in r["alter_ms"]]
    counts: Counter[str] = Counter()
    for r in results:
        counts.update(r["counts"])
    out = {
        "elections_per_s": len(ok) / seconds,
        "p50_ms": percentile(ok, 50),
        "p99_ms": percentile(ok, 99),
        "refused": len(refused),
        "refused_p99_ms": percentile(refused, 99),
        "alters_ok": counts.get("alter:0", 0),
        "alter_p99_ms": percentile(alters, 99),
        "counts": dict(sorted(counts.items())),
        "total_elect_ok": sum(r["total_elect_ok"] for r in results),
        "dashboard_notes": sum(r["dashboard_notes"] for r in results),
    }
    if probe is not None:
        out["heartbeat_ms"] = parent_end.recv()
        probe.join(timeout=30)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--callers", type=int, default=16)
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per phase")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--heartbeat-rate", type=float, default=200.0, help="controller heartbeats per second during (a)")
    p.add_argument("--mode", choices=["unclean", "clean"], default="unclean")
    p.add_argument(
        "--without-dashboard",
        action="store_true",
        help="callers do not subscribe the dashboard to the elections (to measure what its live updates cost)",
    )
    args = p.parse_args()

    env = bench_env("elections")
    env.setdefault("LOG_LEVEL", "WARNING")  # the services log every election at INFO
    if args.without_dashboard:
        os.environ["BENCH_WITHOUT_DASHBOARD"] = "1"  # the spawned callers inherit it
    log(f"preparing database {env['DATABASE_URL'].rsplit('/', 1)[1]} and Redis prefix {env['REDIS_KEY_PREFIX']}")
    prepare_database(env)
    clear_redis_prefix(env)
    os.environ["LOG_LEVEL"] = env["LOG_LEVEL"]
    setup_django(env)
    from django.db.models import Sum

    from controlplane.controller.config_store import update_config
    from controlplane.controller.invariants import check_history
    from controlplane.controller.models import ReplicaGroup

    if args.mode == "unclean":
        update_config({"enableElectUncleanMaster": True})
    ctx = multiprocessing.get_context("spawn")
    names = group_names(args.groups)
    owned = [names[k :: args.callers] for k in range(args.callers)]
    callers = Callers(ctx, args.callers)
    try:
        t0 = time.monotonic()
        setup = [dict(names=owned[k] + ([HOT] if k == 0 else []), replicas=args.replicas) for k in range(args.callers)]
        callers.all("setup", setup)
        base_epochs = ReplicaGroup.objects.aggregate(Sum("master_epoch"))["master_epoch__sum"]
        log(
            f"{args.groups + 1} broker sets of {args.replicas} replicas ready in {time.monotonic() - t0:.1f} s; "
            f"mode {args.mode}, {args.callers} caller processes, {args.seconds:.0f} s per phase"
        )

        spread = phase(
            callers, owned, args.mode, args.seconds, args.warmup, prober=(ctx, names, args.replicas, args.heartbeat_rate)
        )
        hb = spread.pop("heartbeat_ms")
        log(
            f"(a) spread: {spread['elections_per_s']:.0f} elections/s, p50 {spread['p50_ms']:.1f} ms, "
            f"p99 {spread['p99_ms']:.1f} ms; {spread['counts']}; "
            f"{spread['dashboard_notes']} group changes handed to the dashboard"
        )
        log(f"(c) heartbeats during (a): {len(hb)}, p50 {percentile(hb, 50):.2f} ms, p99 {percentile(hb, 99):.2f} ms")
        hot = phase(callers, [[HOT]] * args.callers, args.mode, args.seconds, args.warmup)
        log(
            f"(b) hot: {hot['elections_per_s']:.0f} elections/s, p50 {hot['p50_ms']:.1f} ms, p99 {hot['p99_ms']:.1f} ms,"
            f" refused {hot['refused']} (p99 {hot['refused_p99_ms']:.1f} ms); {hot['counts']}; "
            f"{hot['dashboard_notes']} group changes handed to the dashboard"
        )
    finally:
        callers.close()

    violations = check_history()
    for v in violations[:10]:
        log(f"violation: {v}")
    epochs = ReplicaGroup.objects.aggregate(Sum("master_epoch"))["master_epoch__sum"]
    elections = spread["total_elect_ok"] + hot["total_elect_ok"]
    log(f"{elections} successful elections, masterEpoch moved by {epochs - base_epochs}; {len(violations)} invariant violations")
    clear_redis_prefix(env)
    result = {
        "spread_elections_per_s": round(spread["elections_per_s"], 1),
        "spread_p99_ms": round(spread["p99_ms"], 2),
        "hot_elections_per_s": round(hot["elections_per_s"], 1),
        "hot_p99_ms": round(hot["p99_ms"], 2),
        "heartbeat_p99_ms_during_elections": round(percentile(hb, 99), 2),
        "invariant_violations": len(violations),
        "mode": args.mode,
        "callers": args.callers,
        "groups": args.groups,
        "spread_p50_ms": round(spread["p50_ms"], 2),
        "spread_refused": spread["refused"],
        "spread_alters_ok": spread["alters_ok"],
        "hot_p50_ms": round(hot["p50_ms"], 2),
        "hot_refused": hot["refused"],
        "hot_refused_p99_ms": round(hot["refused_p99_ms"], 2),
        "hot_alters_ok": hot["alters_ok"],
        "heartbeat_p50_ms_during_elections": round(percentile(hb, 50), 2),
        "heartbeats_during_elections": len(hb),
        "elections_match_epochs": elections == epochs - base_epochs,
        "dashboard": not args.without_dashboard,
        "spread_dashboard_notes": spread["dashboard_notes"],
        "hot_dashboard_notes": hot["dashboard_notes"],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
