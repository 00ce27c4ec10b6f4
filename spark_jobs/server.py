"""A resident Spark for the offset audits: one JVM that stays up, warmed, and runs every audit as a
Spark Connect session, instead of each run starting a JVM and a Spark session (~6 s on two cores)
and warming them (~5 s: class loading, the first job, the Python workers) before its real work.

    python -m spark_jobs.server [--master local[*]] [--host 127.0.0.1] [--port 15002]
        [--token-file .data/audit-spark.token] [--conf key=value ...]

Audits use it with ``--remote sc://localhost:PORT`` (``AUDIT_SPARK_REMOTE``; the launcher's demo sets
it), and start their own session when it does not answer. The server requires its token (created
0600 in ``--token-file`` if missing): Spark Connect runs the code clients send, so it binds to the
loopback by default, and without TLS clients send the token to ``localhost`` only. It prints
``ready sc://localhost:PORT`` once warm; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs import offset_audit, pg  # noqa: E402
from spark_jobs.schema import arrow_schema, queue_key  # noqa: E402

DEFAULT_PORT = 15002


def ensure_token(path: Path) -> str:
    """The token in ``path``, created (0600) when missing."""
    if path.exists():
        token = path.read_text(encoding="ascii").strip()
        if token:
            return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    return token


def cores(master: str) -> int:
    """Cores of a local master (local, local[N], local[*]); the machine's otherwise."""
    if master.startswith("local[") and master[6:-1].isdigit():
        return int(master[6:-1])
    return 1 if master == "local" else os.cpu_count() or 2


def _warm_up_store(folder: Path) -> None:
    """A small event store with every path of the job in it: decreases inside a segment and between
    segments, a queue whose segments overlap, a reset, a commit beyond the queue's max offset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [n for n in arrow_schema().names]
    part = folder / "event_date=2000-01-01"
    part.mkdir(parents=True)
    for f, (t0, offsets) in enumerate([(0, (10, 20, 5, 30)), (100, (40, 35, 50)), (50, (60, 70))]):
        rows = {n: [] for n in names}
        for q in range(200):
            for i, o in enumerate(offsets):
                values = dict(
                    queue_key=queue_key("warm-up", "t", "b", q),
                    cluster_name="c",
                    broker_name="b",
                    broker_id=0,
                    role="SYNC_MASTER",
                    master_epoch=1,
                    consumer_group="warm-up",
                    topic="t",
                    queue_id=q,
                    offset=o,
                    queue_max_offset=65,
                    source="operator_reset" if o == 5 and q % 2 else "client_commit",
                    ts_ms=t0 + i,
                    dv_state_version=0,
                    dv_counter=0,
                    dv_timestamp=0,
                    received_ms=0,
                )
                for n in names:
                    rows[n].append(values[n])
        pq.write_table(pa.Table.from_pydict(rows, schema=arrow_schema()), part / f"part-{f}.parquet")


def warm_up(url: str, token: str) -> float:
    """Run the audit once on a small store through a client session, as audits will: loads the
    classes, compiles the plans' code and starts the Python workers. Returns its seconds."""
    started = time.monotonic()
    spark = offset_audit.remote_session(url, token)
    try:
        with tempfile.TemporaryDirectory(prefix="audit-warm-up-") as folder:
            _warm_up_store(Path(folder))
            store = offset_audit.list_event_files(folder, tasks=offset_audit._tasks(spark))
            outcome = offset_audit.audit(spark, store, pg.History())
            assert outcome.rollbacks > 0 and outcome.beyond_max_offset > 0, "the warm-up audit found nothing"
    finally:
        spark.stop()
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spark_jobs.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--master", default=os.environ.get("AUDIT_SPARK_MASTER") or offset_audit.DEFAULT_MASTER)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: the loopback)")
    p.add_argument("--port", type=int, default=int(os.environ.get("AUDIT_SPARK_PORT", DEFAULT_PORT)))
    p.add_argument("--token-file", default=os.environ.get("AUDIT_SPARK_TOKEN_FILE", ".data/audit-spark.token"))
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration")
    p.add_argument("--no-warm-up", action="store_true", help="skip the warm-up audit")
    p.add_argument("--warm-up", metavar="URL", help=argparse.SUPPRESS)  # the warm-up client (its own process)
    args = p.parse_args(argv)
    token = ensure_token(Path(args.token_file))
    if args.warm_up:
        print(f"warm-up audit: {warm_up(args.warm_up, token):.1f} s", flush=True)
        return 0
    # The server reads its token from the environment, never from its command line (ps shows that).
    os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    started = time.monotonic()
    conf = {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": args.host,
        "spark.connect.grpc.binding.port": str(args.port),
        "spark.default.parallelism": str(cores(args.master)),
        **dict(c.split("=", 1) for c in args.conf),
    }
    spark = offset_audit.build_session(args.master, conf, app_name="offset-audit-server", ship=False)
    url = f"sc://localhost:{args.port}"
    print(f"Spark up in {time.monotonic() - started:.1f} s ({args.master}); warming up ...", flush=True)
    if not args.no_warm_up:  # a client of its own: one process holds a JVM session or a remote one
        cmd = [sys.executable, "-m", "spark_jobs.server", "--warm-up", url, "--token-file", args.token_file]
        subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parent.parent)
    print(f"ready {url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
