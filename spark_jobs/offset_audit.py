"""The consumer-offset rollback audit (issue #8; seed 000, reference §5.3-§5.4).

    python -m spark_jobs.offset_audit --database-url postgres://... [--events-uri DIR|URI]
        [--master local[*]] [--lookback-days 7] [--run-id N] [--conf key=value ...]
    PYTHONPATH=. spark-submit --master spark://host:7077 spark_jobs/offset_audit.py --database-url ...

Reads the offset event store (Parquet, partitioned by date), and per (consumer group, topic,
brokerName, queueId) orders the serving stream of the replica group (schema.SERVING_SOURCES) by
commit time. Every decrease of the committed offset that is not an operator reset (neither reported
as one, nor logged as one in the operator audit log) is a rollback: joined with the controller's
elections between the two commits, ``rules.attribute`` names its cause, and previous - new is the
number of messages consumed again. Commits beyond the queue's max offset are flagged too. Findings
and the run's summary go to Postgres (spark_jobs/pg.py).

All heavy lifting is DataFrame operations (no Python UDFs), so executors need no Python code of ours.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

if __package__ in (None, ""):  # spark-submit spark_jobs/offset_audit.py: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs import pg  # noqa: E402
from spark_jobs.rules import Attribution, Commit, Election, attribute, messages_consumed_again  # noqa: E402
from spark_jobs.schema import COLUMNS, PARTITION_COLUMN, SERVING_SOURCES, Source  # noqa: E402

KEY = ("consumer_group", "topic", "broker_name", "queue_id")
DEFAULT_MASTER = "local[*]"
DEFAULT_LOOKBACK_DAYS = 7
RESET_SLACK_MS = 60_000  # an operator's logged reset may reach the broker's commit up to this much later
MAX_FINDINGS = 100_000
BROADCAST_DECREASES = 1_000_000  # up to this many decreases are joined back to their events without a shuffle


# --- Spark session ------------------------------------------------------------------------------


def build_session(master: str | None, conf: dict[str, str] | None = None, app_name: str = "offset-rollback-audit"):
    """A SparkSession: ``master`` (None keeps spark-submit's), UI off unless asked for, few shuffle
    partitions on a local master (the default 200 is for clusters)."""
    from spark_jobs.java import ensure_java

    # py4j logs at INFO from __del__ during interpreter shutdown, when logging's streams are closed.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    local = (master or "").startswith("local")
    if local:  # a cluster's executors must reach the driver: only a local one binds to the loopback
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    ensure_java()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.memory": "2g",
        # Local disks are fast and the cores few: shuffle blocks uncompressed cost less than LZ4.
        **(
            {
                "spark.sql.shuffle.partitions": str(max(4, 2 * (os.cpu_count() or 2))),
                "spark.shuffle.compress": "false",
                "spark.shuffle.spill.compress": "false",
                # A batch job on few cores: the throughput collector beats G1's barriers (~15 % here).
                "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
            }
            if local
            else {}
        ),
    }
    for k, v in {**defaults, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _struct_schema():
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "int64": T.LongType(), "int32": T.IntegerType()}
    return T.StructType(
        [T.StructField(n, kinds[k], True) for n, k in COLUMNS] + [T.StructField(PARTITION_COLUMN, T.StringType(), True)]
    )


def spark_path(uri: str) -> str:
    """A local folder as a file: URI; anything with a scheme (s3a://, hdfs://, file:) as given."""
    return uri if "://" in uri or uri.startswith("file:") else "file://" + os.path.abspath(uri)


def read_events(spark, events_uri: str, since_date: str | None = None):
    """The event store as a DataFrame (empty when nothing was stored yet); ``since_date``
    (YYYY-MM-DD) prunes older date partitions."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    schema = _struct_schema()
    try:
        df = spark.read.schema(schema).option("basePath", spark_path(events_uri)).parquet(spark_path(events_uri))
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc) and "does not exist" not in str(exc):
            raise
        return _local_df(spark, schema, [])
    return df if since_date is None else df.where(F.col(PARTITION_COLUMN) >= since_date)


# --- progress -----------------------------------------------------------------------------------


class Progress:
    """Stage names and a 0..1 fraction for operators, from the Spark status tracker: within a stage
    spanning [lo, hi], the share of finished tasks of the stages running now."""

    def __init__(self, sink: Callable[[str, float], None] | None, interval_s: float = 1.0):
        self._sink = sink
        self._interval = interval_s
        self._stage, self._lo, self._hi = "starting Spark", 0.0, 0.05
        self._tracker = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Progress:
        if self._sink is not None:
            self._thread = threading.Thread(target=self._loop, name="audit-progress", daemon=True)
            self._thread.start()
        return self

    def attach(self, spark) -> None:
        self._tracker = spark.sparkContext.statusTracker()

    def stage(self, name: str, lo: float, hi: float) -> None:
        self._stage, self._lo, self._hi = name, lo, hi
        self._emit()

    def _fraction(self) -> float:
        tracker = self._tracker
        if tracker is None:
            return 0.0
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done / total if total else 0.0

    def _emit(self) -> None:
        if self._sink is None:
            return
        try:
            self._sink(self._stage, self._lo + (self._hi - self._lo) * self._fraction())
        except Exception as exc:  # progress is advisory: never fail a run for it
            print(f"progress update failed: {exc}", file=sys.stderr)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._emit()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# --- the audit ----------------------------------------------------------------------------------


@dataclass
class AuditOutcome:
    findings: list[dict] = field(default_factory=list)
    events_scanned: int = 0
    rollbacks: int = 0
    messages_again: int = 0
    beyond_max_offset: int = 0
    explained_by_reset: int = 0
    summary: dict = field(default_factory=dict)
    session_seconds: float | None = None
    job_seconds: float | None = None


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _local_df(spark, schema, rows: list[tuple]):
    """A small DataFrame built from literals in the JVM: ``createDataFrame`` on a Python list would
    start Python workers (seconds on a busy 2-core machine) for a handful of rows."""
    from pyspark.sql import functions as F

    if not rows:
        return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields])
    structs = [
        F.struct(*[F.lit(v).cast(f.dataType).alias(f.name) for v, f in zip(row, schema.fields, strict=True)]) for row in rows
    ]
    return spark.range(1).select(F.inline(F.array(*structs)))


def _elections_df(spark, history: pg.History):
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("el_broker_name", T.StringType()),
            T.StructField("el_epoch", T.LongType()),
            T.StructField("el_new_master", T.LongType()),
            T.StructField("el_old_sss", T.ArrayType(T.LongType())),
            T.StructField("el_trigger", T.StringType()),
            T.StructField("el_id", T.LongType()),
        ]
    )
    rows = [
        (
            g.broker_name,
            g.election.master_epoch,
            g.election.new_master_broker_id,
            list(g.election.old_sync_state_set),
            g.election.trigger,
            g.election.transition_id,
        )
        for g in history.elections
    ]
    return _local_df(spark, schema, rows)


def _resets_df(spark, history: pg.History):
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("r_broker_name", T.StringType()),
            T.StructField("r_group", T.StringType()),
            T.StructField("r_topic", T.StringType()),
            T.StructField("r_queue", T.IntegerType()),
            T.StructField("r_at_ms", T.LongType()),
            T.StructField("r_id", T.LongType()),
        ]
    )
    rows = [(r.broker_name, r.consumer_group, r.topic, r.queue_id, r.at_ms, r.action_id) for r in history.resets]
    return _local_df(spark, schema, rows)


_STEP = ("broker_id", "master_epoch", "ts_ms", "offset")


def decreases(events):
    """Every decrease of a queue's committed offset in its group's serving stream (operator resets
    reported as such excluded), with the commit before it as ``prev_*``; and how many there are.

    The sort behind the window is the job's cost, so it runs on narrow rows of longs: the queue's
    64-bit key (schema.queue_key), commit time, epoch, broker, offset. The few decreases are then
    joined back to their events for names, roles and sources, reading only the files whose commit
    times can hold them (Parquet statistics). Two queues whose keys collided could only hide
    decreases, never invent one: the previous commit must be of the same queue."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    serving = events.where(F.col("source").isin([s.value for s in SERVING_SOURCES])).withColumnRenamed("queue_key", "k")
    is_reset = (F.col("source") == Source.OPERATOR_RESET.value).alias("is_reset")
    order = Window.partitionBy("k").orderBy("ts_ms", "master_epoch", "broker_id", "offset")
    steps = serving.select("k", *_STEP, is_reset, F.lag(F.struct(*_STEP)).over(order).alias("prev"))
    found = steps.where(F.col("prev").isNotNull() & (F.col("offset") < F.col("prev.offset")) & ~F.col("is_reset")).select(
        "k", *_STEP, *(F.col(f"prev.{c}").alias(f"prev_{c}") for c in _STEP)
    )
    found = found.localCheckpoint(eager=True)
    # Back to the events for names, roles and sources: one scan, joined with the few commits
    # involved (broadcast: no shuffle), then small joins.
    prev_step = [f"prev_{c}" for c in _STEP]
    involved = found.select("k", *_STEP).union(
        found.select("k", *(F.col(p).alias(c) for p, c in zip(prev_step, _STEP, strict=True)))
    )
    involved = involved.distinct()
    count, first_ms, last_ms = found.agg(F.count(F.lit(1)), F.min("prev_ts_ms"), F.max("ts_ms")).first()
    if count <= BROADCAST_DECREASES:
        involved = F.broadcast(involved)
    in_time = F.col("ts_ms").between(first_ms, last_ms) if first_ms is not None else F.lit(False)
    rows = (
        serving.where(in_time)
        .join(involved, ["k", *_STEP])
        .select("k", *_STEP, *KEY, "cluster_name", "role", "source", "queue_max_offset")
        .dropDuplicates(["k", *_STEP])
        .localCheckpoint(eager=True)
    )
    previous = rows.select(
        "k", *(F.col(c).alias(f"prev_{c}") for c in (*_STEP, "role", "source")), *(F.col(c).alias(f"prev_key_{c}") for c in KEY)
    )
    joined = found.join(rows, ["k", *_STEP]).join(previous, ["k", *prev_step])
    same_queue = F.lit(True)
    for c in KEY:
        same_queue = same_queue & (F.col(c) == F.col(f"prev_key_{c}"))
    return joined.where(same_queue).drop(*(f"prev_key_{c}" for c in KEY)), count


def beyond_max(events):
    """Serving commits beyond the queue's max offset (messages the broker does not have), one row per
    (queue, broker, epoch) episode."""
    from pyspark.sql import functions as F

    flagged = events.where(
        F.col("source").isin([s.value for s in SERVING_SOURCES])
        & F.col("queue_max_offset").isNotNull()
        & (F.col("offset") > F.col("queue_max_offset"))
    )
    return flagged.groupBy(*KEY, "broker_id", "master_epoch").agg(
        F.first("cluster_name").alias("cluster_name"),
        F.first("role").alias("role"),
        F.min("ts_ms").alias("first_ms"),
        F.max("ts_ms").alias("last_ms"),
        F.count(F.lit(1)).alias("events"),
        F.max(F.col("offset") - F.col("queue_max_offset")).alias("excess"),
        F.max("offset").alias("offset"),
        F.min("queue_max_offset").alias("queue_max_offset"),
        F.first("source").alias("source"),
    )


def audit(
    spark,
    events,
    history: pg.History,
    *,
    progress: Progress | None = None,
    reset_slack_ms: int = RESET_SLACK_MS,
    max_findings: int = MAX_FINDINGS,
) -> AuditOutcome:
    """Run the audit over ``events`` (read_events) with ``history`` (pg.load_history)."""
    from pyspark.sql import functions as F

    progress = progress or Progress(None)
    out = AuditOutcome()
    progress.stage("detecting rollbacks", 0.05, 0.75)
    dec, found = decreases(events)

    # One pass over the (few) decreases: the operator's logged resets and the group's elections.
    progress.stage("joining elections and operator resets", 0.75, 0.85)
    logged_reset = (
        ((F.col("r_broker_name") == "") | (F.col("r_broker_name") == F.col("broker_name")))
        & (F.col("r_group") == F.col("consumer_group"))
        & (F.col("r_topic").isNull() | (F.col("r_topic") == F.col("topic")))
        & (F.col("r_queue").isNull() | (F.col("r_queue") == F.col("queue_id")))
        & (F.col("r_at_ms") >= F.col("prev_ts_ms"))
        & (F.col("r_at_ms") <= F.col("ts_ms") + reset_slack_ms)
    )
    between = (
        (F.col("el_broker_name") == F.col("broker_name"))
        & (F.col("el_epoch") > F.col("prev_master_epoch"))
        & (F.col("el_epoch") <= F.col("master_epoch"))
    )
    if found > max_findings:  # keep the largest; the counts below then cover those only
        dec = dec.orderBy((F.col("prev_offset") - F.col("offset")).desc()).limit(max_findings)
    matched = (
        dec.join(F.broadcast(_resets_df(spark, history)), logged_reset, "left")
        .join(F.broadcast(_elections_df(spark, history)), between, "left")
        .collect()
    )
    # Per decrease: explained by any logged reset; the latest election in its epoch range.
    per_decrease: dict[tuple, tuple] = {}
    for r in matched:
        key = (r.k, *(r[c] for c in _STEP))
        first, explained, election = per_decrease.get(key, (r, False, None))
        if r.el_id is not None and (election is None or r.el_epoch > election.el_epoch):
            election = r
        per_decrease[key] = (first, explained or r.r_id is not None, election)
    rows = [(first, election) for first, explained, election in per_decrease.values() if not explained]
    out.explained_by_reset = len(per_decrease) - len(rows)
    total_rollbacks = found - out.explained_by_reset if found > max_findings else len(rows)

    progress.stage("checking max offsets", 0.85, 0.92)
    over = beyond_max(events).orderBy(F.col("excess").desc()).limit(max_findings).collect()
    out.events_scanned = events.count()

    progress.stage("attributing causes", 0.92, 0.95)
    by_cause: Counter[str] = Counter()
    again_by_cause: Counter[str] = Counter()
    for r, e in rows:
        previous = Commit(r.prev_broker_id, r.prev_role, r.prev_master_epoch, r.prev_ts_ms, r.prev_offset, r.prev_source)
        current = Commit(r.broker_id, r.role, r.master_epoch, r.ts_ms, r.offset, r.source)
        election = Election(e.el_id, e.el_epoch, e.el_new_master, tuple(e.el_old_sss or ()), e.el_trigger) if e else None
        why: Attribution = attribute(previous, current, election)
        again = messages_consumed_again(previous, current)
        by_cause[why.cause.value] += 1
        again_by_cause[why.cause.value] += again
        out.findings.append(
            {
                "kind": "rollback",
                "cause": why.cause.value,
                "cluster_name": r.cluster_name or "",
                "consumer_group": r.consumer_group,
                "topic": r.topic,
                "broker_name": r.broker_name,
                "queue_id": r.queue_id,
                "master_epoch": why.master_epoch,
                "broker_id": r.broker_id,
                "role": r.role or "",
                "source": r.source,
                "previous_broker_id": r.prev_broker_id,
                "previous_master_epoch": r.prev_master_epoch,
                "previous_offset": r.prev_offset,
                "previous_at": _ts(r.prev_ts_ms),
                "offset": r.offset,
                "messages_again": again,
                "queue_max_offset": r.queue_max_offset,
                "excess": None,
                "event_count": 1,
                "detected_at": _ts(r.ts_ms),
                "last_seen_at": None,
                "transition_id": why.transition_id,
                "operator_initiated": election is not None and election.trigger == "operator",
            }
        )
    for r in over:
        out.findings.append(
            {
                "kind": "beyond_max_offset",
                "cause": None,
                "cluster_name": r.cluster_name or "",
                "consumer_group": r.consumer_group,
                "topic": r.topic,
                "broker_name": r.broker_name,
                "queue_id": r.queue_id,
                "master_epoch": r.master_epoch,
                "broker_id": r.broker_id,
                "role": r.role or "",
                "source": r.source,
                "previous_broker_id": None,
                "previous_master_epoch": None,
                "previous_offset": None,
                "previous_at": None,
                "offset": r.offset,
                "messages_again": 0,
                "queue_max_offset": r.queue_max_offset,
                "excess": r.excess,
                "event_count": r.events,
                "detected_at": _ts(r.first_ms),
                "last_seen_at": _ts(r.last_ms),
                "transition_id": None,
                "operator_initiated": False,
            }
        )
    out.rollbacks = total_rollbacks
    out.messages_again = sum(again_by_cause.values())
    out.beyond_max_offset = len(over)
    out.summary = {
        "rollbacksByCause": dict(by_cause),
        "messagesAgainByCause": dict(again_by_cause),
        "truncated": len(rows) < total_rollbacks,
    }
    return out


# --- command line -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m spark_jobs.offset_audit", description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="Postgres (default: $DATABASE_URL)")
    p.add_argument(
        "--events-uri",
        default=os.environ.get("AUDIT_EVENTS_URI", ".data/offset-events"),
        help="the offset event store: a folder or a Hadoop URI (default: $AUDIT_EVENTS_URI)",
    )
    p.add_argument(
        "--master",
        default=os.environ.get("AUDIT_SPARK_MASTER"),
        help=f"Spark master (default: $AUDIT_SPARK_MASTER, spark-submit's, else {DEFAULT_MASTER})",
    )
    p.add_argument(
        "--lookback-days",
        type=int,
        default=int(os.environ.get("AUDIT_LOOKBACK_DAYS", DEFAULT_LOOKBACK_DAYS)),
        help="audit the events of the last N days (0: all)",
    )
    p.add_argument("--run-id", type=int, help="the audits_auditrun row to fill (the control plane's); default: a new one")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration")
    p.add_argument("--max-findings", type=int, default=MAX_FINDINGS)
    args = p.parse_args(argv)
    if not args.database_url:
        p.error("--database-url (or $DATABASE_URL) is required: findings are written to Postgres")
    return args


def _master(requested: str | None) -> str | None:
    """The master to set: the one asked for; none under spark-submit (it set spark.master); else local[*]."""
    if requested:
        return requested
    return (
        None
        if os.environ.get("SPARK_ENV_LOADED") or "spark.master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
        else DEFAULT_MASTER
    )


def execute(
    spark,
    conn,
    run_id: int,
    events_uri: str,
    lookback_days: int | None,
    *,
    progress: Progress | None = None,
    max_findings: int = MAX_FINDINGS,
    now: datetime | None = None,
    session_seconds: float | None = None,
) -> AuditOutcome:
    """One audit with a ready session: history and events in, findings and summary written to the
    run's row. Returns the outcome (and the job's seconds in its summary)."""
    progress = progress or Progress(None)
    started = time.monotonic()
    now = now or datetime.now(UTC)
    since = now - timedelta(days=lookback_days) if lookback_days else None
    history = pg.load_history(conn, int(since.timestamp() * 1000) - RESET_SLACK_MS if since else None)
    events = read_events(spark, events_uri, since.date().isoformat() if since else None)
    outcome = audit(spark, events, history, progress=progress, max_findings=max_findings)
    progress.stage("writing findings", 0.95, 1.0)
    outcome.session_seconds = session_seconds
    outcome.job_seconds = round(time.monotonic() - started, 3)
    pg.write_results(
        conn,
        run_id,
        outcome.findings,
        {
            "events_scanned": outcome.events_scanned,
            "rollbacks": outcome.rollbacks,
            "messages_again": outcome.messages_again,
            "beyond_max_offset": outcome.beyond_max_offset,
            "explained_by_reset": outcome.explained_by_reset,
            "session_seconds": outcome.session_seconds,
            "job_seconds": outcome.job_seconds,
            "summary": outcome.summary,
        },
    )
    return outcome


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    conf = dict(c.split("=", 1) for c in args.conf)
    master = _master(args.master)
    lookback = args.lookback_days if args.lookback_days > 0 else None
    conn = pg.connect(args.database_url)
    if args.run_id is None:
        run_id = pg.create_run(conn, master or "spark-submit", args.events_uri, lookback)
    else:
        run_id = args.run_id
        pg.mark_running(conn, run_id, master or "spark-submit", args.events_uri, lookback)
    print(f"audit run {run_id}: events {args.events_uri}, master {master or 'from spark-submit'}", flush=True)
    progress_conn = pg.connect(args.database_url)
    progress = Progress(lambda stage, frac: pg.report_progress(progress_conn, run_id, stage, frac)).start()
    started = time.monotonic()
    try:
        spark = build_session(master, conf)
        progress.attach(spark)
        session_s = time.monotonic() - started
        outcome = execute(
            spark,
            conn,
            run_id,
            args.events_uri,
            lookback,
            progress=progress,
            max_findings=args.max_findings,
            session_seconds=round(session_s, 3),
        )
    except BaseException as exc:
        progress.stop()
        pg.mark_failed(conn, run_id, "".join(traceback.format_exception(exc)))
        raise
    progress.stop()
    spark.stop()
    print(
        f"audit run {run_id} done: {outcome.events_scanned} events, {outcome.rollbacks} rollbacks "
        f"({outcome.messages_again} messages again), {outcome.beyond_max_offset} beyond max offset; "
        f"session {session_s:.1f} s, job {outcome.job_seconds:.1f} s",
        flush=True,
    )
    print(f"TIMINGS session_s={session_s:.3f} job_s={outcome.job_seconds:.3f} events={outcome.events_scanned}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
