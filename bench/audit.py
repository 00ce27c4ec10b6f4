"""Benchmark of the offset-rollback audit: Spark over the Parquet event store vs. the same
rollback detection as one Postgres window query over the same rows.

    DATABASE_URL=... .venv/bin/python bench/audit.py [--events 10000000] [--master local[2]]

Generates the events (numpy + pyarrow) with a known number of rollbacks, writes them as the control
plane's event store does (Parquet, partitioned by date), and runs the audit job as the control plane
runs it (``python -m spark_jobs.offset_audit``, a process per run) on the resident Spark the demo
deploys (``python -m spark_jobs.server``: started, warmed by its own small audit, and timed apart
as spark_server_start_s) at 1 M and at N events; then once more at N events with a Spark session of
the job's own (JVM start and warm-up included, as without a resident server). Loads the N events
into a Postgres table (COPY; timed apart, not in postgres_s: in production the events are not in
Postgres) and times the window query twice, on a server as warm as the resident Spark: partitioned
by the same 64-bit queue key as the job (postgres_s, the strict baseline) and by the four names the
issue states the rule with (postgres_by_names_s). All must find the same rollbacks.

Last line, one JSON object: events, spark_total_s (the whole job process on the resident Spark),
spark_job_s (without the session start), postgres_s, spark_vs_postgres (= postgres_s /
spark_total_s), postgres_by_names_s, spark_vs_postgres_by_names, events_per_s_1m and
events_per_s_10m (events / spark_job_s of each run), spark_server_start_s, and the own-session run's
spark_total_own_session_s, spark_job_own_session_s and spark_vs_postgres_own_session.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, bench_env, prepare_database  # noqa: E402
from spark_jobs import pg  # noqa: E402
from spark_jobs.schema import COLUMNS, arrow_schema, queue_key  # noqa: E402
from testkit.ports import free_port  # noqa: E402

GROUPS, TOPICS, BROKERS, QUEUES = 50, 10, 4, 16
KEYS = GROUPS * TOPICS * BROKERS * QUEUES  # 32,000 queues
CHUNK = 1_000_000
DROP = 500  # a rolled-back queue restarts 500 offsets back


def rollback_keys(events: int) -> np.ndarray:
    """One key in 32 rolls back once (in broker set b0..b3, elected at epoch 2)."""
    return np.arange(0, KEYS, 32)


def generate(folder: Path, events: int, t0_ms: int) -> int:
    """Write ``events`` rows; returns the number of rollbacks in them."""
    per_key = -(-events // KEYS)
    switch = per_key // 2  # the step at which a rolled-back key fails over
    rolled = np.zeros(KEYS, dtype=bool)
    rolled[rollback_keys(events)] = True
    names = {
        "group": pa.array([f"group-{i:03d}" for i in range(GROUPS)]),
        "topic": pa.array([f"topic-{i:02d}" for i in range(TOPICS)]),
        "broker": pa.array([f"broker-{i}" for i in range(BROKERS)]),
        "source": pa.array(["client_commit", "slave_sync"]),
        "role": pa.array(["SYNC_MASTER", "SLAVE"]),
    }
    schema = arrow_schema()
    queue_keys = np.array(
        [
            queue_key(
                f"group-{k // (TOPICS * BROKERS * QUEUES):03d}",
                f"topic-{k % (TOPICS * BROKERS * QUEUES) // (BROKERS * QUEUES):02d}",
                f"broker-{k % (BROKERS * QUEUES) // QUEUES}",
                k % QUEUES,
            )
            for k in range(KEYS)
        ],
        dtype=np.int64,
    )
    rng = np.random.default_rng(8)
    for part, start in enumerate(range(0, events, CHUNK)):
        i = np.arange(start, min(events, start + CHUNK), dtype=np.int64)
        key, step = i % KEYS, i // KEYS
        group, rest = key // (TOPICS * BROKERS * QUEUES), key % (TOPICS * BROKERS * QUEUES)
        topic, rest = rest // (BROKERS * QUEUES), rest % (BROKERS * QUEUES)
        broker, queue = rest // QUEUES, rest % QUEUES
        failed_over = rolled[key] & (step >= switch)
        offset = step * 10 - np.where(failed_over, DROP, 0)
        slave = (rng.random(len(i)) < 0.05) & ~failed_over  # slave syncs lagging their master: not rollbacks
        offset = np.where(slave, np.maximum(offset - 30, 0), offset)
        ts = t0_ms + step * 500 + key % 500
        n = len(i)

        def dict_col(kind: str, idx: np.ndarray) -> pa.Array:
            return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), names[kind]).cast(pa.string())

        cols = {
            "queue_key": pa.array(queue_keys[key]),
            "cluster_name": pa.array(np.full(n, "bench", dtype=object), pa.string()),
            "broker_name": dict_col("broker", broker),
            "broker_id": pa.array(np.where(failed_over, 2, np.where(slave, 2, 1)).astype(np.int64)),
            "role": dict_col("role", slave.astype(np.int32)),
            "master_epoch": pa.array(np.where(failed_over, 2, 1).astype(np.int64)),
            "consumer_group": dict_col("group", group),
            "topic": dict_col("topic", topic),
            "queue_id": pa.array(queue.astype(np.int32)),
            "offset": pa.array(offset.astype(np.int64)),
            "queue_max_offset": pa.array((offset + 100).astype(np.int64)),
            "source": dict_col("source", slave.astype(np.int32)),
            "ts_ms": pa.array(ts.astype(np.int64)),
            "dv_state_version": pa.array(np.where(failed_over, 2, 1).astype(np.int64)),
            "dv_counter": pa.array((step // 500).astype(np.int64)),
            "dv_timestamp": pa.array(ts.astype(np.int64)),
            "received_ms": pa.array((ts + 1000).astype(np.int64)),
        }
        table = pa.Table.from_pydict(cols, schema=schema)
        day = time.strftime("%Y-%m-%d", time.gmtime(t0_ms / 1000))
        (folder / f"event_date={day}").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / f"event_date={day}" / f"part-{part:05d}.parquet", compression="zstd")
    return int(rolled.sum()) if per_key > switch > 0 else 0


def record_elections(db_url: str) -> None:
    """The controller's history the job joins with: every broker set elected replica 2 at epoch 2."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM audits_finding; DELETE FROM audits_auditrun; DELETE FROM controlplane_transition")
        for b in range(BROKERS):
            conn.execute(
                "INSERT INTO controlplane_transition (cluster_name, broker_name, kind, trigger, requested_by, "
                "old_master_broker_id, new_master_broker_id, old_master_epoch, new_master_epoch, old_sync_state_set_epoch, "
                "new_sync_state_set_epoch, old_sync_state_set, new_sync_state_set, candidates, response_code, detail, "
                "created_at) VALUES ('bench', %s, 'elect', 'controller', '', 1, 2, 1, 2, 1, 2, '{1,2}', '{2}', '[]', 0, '', "
                "now())",
                [f"broker-{b}"],
            )


def start_server(master: str, work: Path) -> tuple[subprocess.Popen, str, Path, float]:
    """The resident Spark (spark_jobs/server.py) until it is warm: (process, URL, token file, s)."""
    token_file, log_path = work / "audit-spark.token", work / "audit-spark.log"
    port = free_port()
    cmd = [sys.executable, "-m", "spark_jobs.server", "--master", master, "--port", str(port), "--token-file", str(token_file)]
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    while b"ready sc://" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() - started > 300:
            proc.kill()
            raise SystemExit(f"the resident Spark did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
    return proc, f"sc://localhost:{port}", token_file, time.monotonic() - started


def run_spark(db_url: str, folder: Path, master: str, remote: tuple[str, Path] | None) -> tuple[float, float, int, int]:
    """(total s, job s, events, rollbacks) of one job run in its own process, on the resident Spark
    ``remote`` (URL, token file) or, without one, on a session of its own."""
    env = {**bench_env("audit"), "DATABASE_URL": db_url}
    cmd = [sys.executable, "-m", "spark_jobs.offset_audit", "--events-uri", str(folder), "--master", master]
    cmd += ["--lookback-days", "0"]
    if remote:
        cmd += ["--remote", remote[0], "--token-file", str(remote[1])]
    started = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    total = time.monotonic() - started
    if out.returncode != 0 or (remote and "runs on it" not in out.stdout):
        raise SystemExit(f"the audit job failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    m = re.search(r"TIMINGS session_s=([\d.]+) job_s=([\d.]+) events=(\d+)", out.stdout)
    with psycopg.connect(db_url) as conn:
        rollbacks = conn.execute("SELECT rollbacks FROM audits_auditrun ORDER BY id DESC LIMIT 1").fetchone()[0]
    return total, float(m.group(2)), int(m.group(3)), rollbacks


# The same detection as the job, as SQL (spark_jobs/pg.py, tested against rules.decreases): the
# serving stream, per queue in commit order, a commit lower than the one before it that is not an
# operator reset. Partitioned by the same 64-bit queue key the job sorts on (schema.queue_key), the
# fair comparison; by the four names (the rule as the issue states it) Postgres sorts strings and is
# several times slower: printed too.
WINDOW_QUERY = 'SELECT count(*), coalesce(sum(prev_offset - "offset"), 0) FROM ({steps}) found'
BY_KEY, BY_NAMES = "queue_key", "consumer_group, topic, broker_name, queue_id"


def load_postgres(db_url: str, folder: Path) -> None:
    columns = ", ".join(f'"{n}" {"text" if k == "string" else "integer" if k == "int32" else "bigint"}' for n, k in COLUMNS)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_offset_events")
        conn.execute(f"CREATE UNLOGGED TABLE bench_offset_events ({columns})")
        with conn.cursor() as cur:
            for path in sorted(folder.rglob("*.parquet")):
                buf = io.BytesIO()
                pacsv.write_csv(pq.read_table(path, schema=arrow_schema()), buf, pacsv.WriteOptions(include_header=False))
                with cur.copy(
                    f"COPY bench_offset_events ({', '.join(repr(n).replace(chr(39), chr(34)) for n, _ in COLUMNS)}) "
                    "FROM STDIN (FORMAT csv)"
                ) as copy:
                    copy.write(buf.getvalue())
        conn.execute("VACUUM ANALYZE bench_offset_events")


def run_postgres(db_url: str, partition: str) -> tuple[float, int]:
    """The window query as the server is configured (no work_mem or parallelism tuning)."""
    with psycopg.connect(db_url) as conn:
        conn.execute("SELECT count(*) FROM bench_offset_events").fetchone()  # warm the cache as Spark's page cache is
        started = time.monotonic()
        query = WINDOW_QUERY.format(steps=pg.rollback_steps_sql("bench_offset_events", partition))
        count, _ = conn.execute(query).fetchone()
        return time.monotonic() - started, count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    env = bench_env("audit")
    print("preparing the benchmark database ...", file=sys.stderr, flush=True)
    prepare_database(env)
    db_url = env["DATABASE_URL"]
    record_elections(db_url)
    work = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    t0 = int(time.time() * 1000) - 3_600_000
    server = None
    try:
        server, url, token_file, server_s = start_server(args.master, work)
        print(f"resident Spark ({args.master}) started and warm in {server_s:.1f} s", file=sys.stderr, flush=True)
        results = {}
        for n in (1_000_000, args.events):
            folder = work / f"events-{n}"
            started = time.monotonic()
            expected = generate(folder, n, t0)
            print(
                f"generated {n:,} events ({expected} rollbacks) in {time.monotonic() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            total, job, scanned, found = run_spark(db_url, folder, args.master, (url, token_file))
            assert scanned == n and found == expected, (scanned, n, found, expected)
            print(
                f"spark {args.master}, resident: {n:,} events, {found} rollbacks, total {total:.1f} s, job {job:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            results[n] = (total, job, folder, expected)
        total, job, folder, expected = results[args.events]
        own_total, own_job, scanned, found = run_spark(db_url, folder, args.master, None)
        assert scanned == args.events and found == expected, (scanned, found, expected)
        print(
            f"spark {args.master}, own session: {args.events:,} events, total {own_total:.1f} s, job {own_job:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        started = time.monotonic()
        load_postgres(db_url, folder)
        print(
            f"loaded {args.events:,} rows into Postgres in {time.monotonic() - started:.1f} s (not timed)",
            file=sys.stderr,
            flush=True,
        )
        postgres_s, pg_found = run_postgres(db_url, BY_KEY)
        assert pg_found == expected, (pg_found, expected)
        print(f"postgres window query by queue key: {pg_found} rollbacks in {postgres_s:.1f} s", file=sys.stderr, flush=True)
        names_s, pg_found = run_postgres(db_url, BY_NAMES)
        assert pg_found == expected, (pg_found, expected)
        print(
            f"postgres window query by the four names: {pg_found} rollbacks in {names_s:.1f} s "
            f"(spark_vs_postgres would be {names_s / total:.2f})",
            file=sys.stderr,
            flush=True,
        )
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS bench_offset_events")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    print(
        json.dumps(
            {
                "events": args.events,
                "spark_total_s": round(total, 2),
                "spark_job_s": round(job, 2),
                "postgres_s": round(postgres_s, 2),
                "spark_vs_postgres": round(postgres_s / total, 2),
                "postgres_by_names_s": round(names_s, 2),
                "spark_vs_postgres_by_names": round(names_s / total, 2),
                "events_per_s_1m": round(1_000_000 / results[1_000_000][1]),
                "events_per_s_10m": round(args.events / job),
                "spark_server_start_s": round(server_s, 2),
                "spark_total_own_session_s": round(own_total, 2),
                "spark_job_own_session_s": round(own_job, 2),
                "spark_vs_postgres_own_session": round(postgres_s / own_total, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
