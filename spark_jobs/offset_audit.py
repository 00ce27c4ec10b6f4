"""The consumer-offset rollback audit (seed 000, reference §5.3-§5.4).

    python -m spark_jobs.offset_audit --database-url postgres://... [--events-uri DIR|URI]
        [--master local[*]] [--lookback-days 7] [--run-id N] [--conf key=value ...]
    PYTHONPATH=. spark-submit --master spark://host:7077 spark_jobs/offset_audit.py --database-url ...

Reads the offset event store (Parquet, partitioned by date), and per (consumer group, topic,
brokerName, queueId) orders the serving stream of the replica group (schema.SERVING_SOURCES) by
commit time. Every decrease of the committed offset that is not an operator reset (neither reported
as one, nor logged as one in the operator audit log) is a rollback: the rule is ``rules.decreases``,
which the passes below compute for speed (and are tested against); ``rules.judge`` then drops the
logged resets, finds the controller's election between the two commits, and names the cause;
previous - new is the number of messages consumed again. Commits beyond the queue's max offset are flagged too. Findings
and the run's summary go to Postgres (spark_jobs/pg.py).

The events are read once, by Spark tasks running spark_jobs/segments.py in their Python workers
(pyarrow and numpy: no event becomes a Spark row); only what that pass finds (decreases, each
queue's first and last commit per segment, beyond-max aggregates) goes through Spark. The package
is shipped to the executors with the job (``_ship_code``); they need numpy, pyarrow and pandas, as
any PySpark Arrow function does.
"""

from __future__ import annotations

import argparse
import functools
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
from spark_jobs.rules import (  # noqa: E402
    COMMIT_ORDER,
    RESET_SLACK_MS,
    Commit,
    Decrease,
    History,
    Queue,
    at,
    judge,
    retention_losses,
)
from spark_jobs.schema import PARTITION_COLUMN, SERVING_SOURCES, Finding, FindingKind, Source  # noqa: E402

KEY = ("consumer_group", "topic", "broker_name", "queue_id")
DEFAULT_MASTER = "local[*]"
DEFAULT_LOOKBACK_DAYS = 7
MAX_FINDINGS = 100_000
BROADCAST_DECREASES = 1_000_000  # up to this many decreases are joined back to their events without a shuffle


# --- Spark session ------------------------------------------------------------------------------


def build_session(
    master: str | None, conf: dict[str, str] | None = None, app_name: str = "offset-rollback-audit", *, ship: bool = True
):
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
    if ship:
        _ship_code(spark)
    return spark


def is_remote(spark) -> bool:
    """A Spark Connect session (the resident server's, spark_jobs/server.py), not a JVM of our own."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def remote_session(url: str, token: str | None):
    """A session on a resident Spark (spark_jobs/server.py): no JVM start, no warm-up. ``token``: the
    server's (without TLS, Spark Connect sends it to ``localhost`` only)."""
    if token:
        os.environ["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    _ship_code(spark)
    return spark


def reachable(url: str, timeout: float = 2.0) -> bool:
    """Whether something accepts connections at a ``sc://host:port`` URL."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(url.replace("sc://", "http://", 1))
    try:
        socket.create_connection((parsed.hostname or "localhost", parsed.port or 15002), timeout=timeout).close()
    except OSError:
        return False
    return True


def _ship_code(spark) -> None:
    """The executors' Python workers run spark_jobs/segments.py: ship this package to them (as
    spark-submit --py-files would), so a cluster needs nothing of ours installed. On a resident
    server the archive is the session's (named by its content: sessions never see each other's)."""
    import atexit
    import hashlib
    import io
    import shutil
    import tempfile
    import zipfile
    from pathlib import Path

    package = Path(__file__).resolve().parent
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for source in sorted(package.glob("*.py")):
            z.writestr(zipfile.ZipInfo(f"spark_jobs/{source.name}", (2020, 1, 1, 0, 0, 0)), source.read_bytes())
    folder = tempfile.mkdtemp(prefix="spark-jobs-")
    atexit.register(shutil.rmtree, folder, True)
    archive = Path(folder) / f"spark_jobs-{hashlib.sha256(buf.getvalue()).hexdigest()[:16]}.zip"
    archive.write_bytes(buf.getvalue())
    if is_remote(spark):
        spark.addArtifacts(str(archive), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(archive))


# --- progress -----------------------------------------------------------------------------------


class Progress:
    """Stage names and a 0..1 fraction for operators, from the Spark status tracker: within a stage
    spanning [lo, hi], the share of finished tasks of the stages running now."""

    def __init__(self, sink: Callable[[str, float], None] | None, interval_s: float = 1.0):
        self._sink = sink
        self._interval = interval_s
        self._stage, self._lo, self._hi = "starting Spark", 0.0, 0.05
        self._stage_started: float | None = None
        self.seconds: dict[str, float] = {}
        self._tracker = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Progress:
        if self._sink is not None:
            self._thread = threading.Thread(target=self._loop, name="audit-progress", daemon=True)
            self._thread.start()
        return self

    def attach(self, spark) -> None:
        # A resident server's sessions (Spark Connect) have no status tracker: stage names only.
        self._tracker = None if is_remote(spark) else spark.sparkContext.statusTracker()

    def stage(self, name: str, lo: float, hi: float) -> None:
        now = time.monotonic()
        if self._stage_started is not None:
            self.seconds[self._stage] = round(now - self._stage_started, 3)
        self._stage_started = now
        self._stage, self._lo, self._hi = name, lo, hi
        self._emit()

    def finish(self) -> dict[str, float]:
        """Seconds per stage so far (the current one ends now)."""
        if self._stage_started is not None:
            self.seconds[self._stage] = round(time.monotonic() - self._stage_started, 3)
            self._stage_started = None
        return dict(self.seconds)

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
    findings: list[Finding] = field(default_factory=list)
    events_scanned: int = 0
    rollbacks: int = 0
    messages_again: int = 0
    beyond_max_offset: int = 0
    explained_by_reset: int = 0
    queues_ordered_exactly: int = 0  # queues whose segments overlapped (decreases_exact)
    summary: dict = field(default_factory=dict)
    session_seconds: float | None = None
    job_seconds: float | None = None


_STEP = ("broker_id", "master_epoch", "ts_ms", "offset")
_ORDER = COMMIT_ORDER  # a queue's commits in this order, then is_reset (rules.commit_order)


def decreases_exact(events):
    """Every decrease of a queue's committed offset in its group's serving stream (operator resets
    reported as such excluded: rules.decreases as Spark expressions), with the commit before it as
    ``prev_*``; and how many there are. ``decreases`` uses it for the queues whose segments overlap.

    Ordering each queue's commits is this path's cost. It runs on narrow values: the queue's 64-bit key
    (schema.queue_key) and per commit (time, epoch, broker, offset, is reset). Each queue's commits
    are gathered into one array (an aggregation: partial arrays per input split, one shuffle of
    arrays rather than of rows) and sorted in memory; consecutive pairs are compared there. That is
    about a quarter faster than a window over the rows (its external sort) on this data, and a
    queue's commits over the lookback (at one commit a second, 600,000 a week) fit an array easily.
    The few decreases are then joined back to their events for names, roles and sources, reading
    only the files whose commit times can hold them (Parquet statistics). Two queues whose keys
    collided could only hide decreases, never invent one: the previous commit must be of the same
    queue."""
    from pyspark.sql import functions as F

    serving = events.where(F.col("source").isin([s.value for s in SERVING_SOURCES])).withColumnRenamed("queue_key", "k")
    is_reset = (F.col("source") == Source.OPERATOR_RESET.value).alias("is_reset")
    # Sorted by commit time, then epoch, broker and offset (ties in all four cannot be decreases).
    commits = F.sort_array(F.collect_list(F.struct(*_ORDER, is_reset))).alias("c")
    per_queue = serving.groupBy("k").agg(commits)
    pairs = F.arrays_zip(F.slice("c", 2, F.size("c") - 1).alias("cur"), F.slice("c", 1, F.size("c") - 1).alias("prev"))
    down = F.filter(pairs, lambda p: (p["cur"]["offset"] < p["prev"]["offset"]) & ~p["cur"]["is_reset"])
    found = per_queue.select("k", F.explode(down).alias("p")).select(
        "k", *(F.col(f"p.cur.{c}").alias(c) for c in _STEP), *(F.col(f"p.prev.{c}").alias(f"prev_{c}") for c in _STEP)
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


@dataclass(frozen=True)
class EventFiles:
    """The event files one audit reads, in ``groups``: one Spark task each."""

    uri: str
    groups: tuple[tuple[str, ...], ...]

    @property
    def count(self) -> int:
        return sum(len(g) for g in self.groups)


def _tasks(spark) -> int:
    """Tasks for the pass over the files: a few per core, so one slow file does not hold the rest."""
    if is_remote(spark):  # the resident server sets it to its cores (spark_jobs/server.py)
        return 3 * int(spark.conf.get("spark.default.parallelism", str(os.cpu_count() or 2)))
    return 3 * spark.sparkContext.defaultParallelism


def list_event_files(events_uri: str, since_date: str | None = None, tasks: int = 8) -> EventFiles:
    """The store's Parquet files (of ``event_date`` >= ``since_date``), listed with pyarrow (which
    the control plane writes them with) and dealt into at most ``tasks`` groups of similar size."""
    from pyarrow import fs as pafs

    from spark_jobs.schema import filesystem

    fs, base = filesystem(events_uri)
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    files = []
    for info in infos:
        parts = info.path[len(base.rstrip("/")) :].strip("/").split("/")
        if info.type != pafs.FileType.File or not info.path.endswith(".parquet") or any(p.startswith((".", "_")) for p in parts):
            continue  # hidden files are a flush's work in progress
        date = next((p.split("=", 1)[1] for p in parts[:-1] if p.startswith(f"{PARTITION_COLUMN}=")), None)
        if since_date is None or (date is not None and date >= since_date):
            files.append((info.size, info.path))
    groups: list[list[str]] = [[] for _ in range(min(len(files), max(1, tasks)))]
    sizes = [0] * len(groups)
    for size, path in sorted(files, key=lambda f: (-f[0], f[1])):  # largest first into the lightest group
        i = sizes.index(min(sizes))
        groups[i].append(path)
        sizes[i] += size
    return EventFiles(events_uri, tuple(tuple(sorted(g)) for g in groups))


def _over_files(spark, store: EventFiles, function, schema):
    """``function`` (segments.py) in one task per group of files."""
    from spark_jobs import segments

    n = max(1, len(store.groups))
    return spark.range(0, len(store.groups), 1, n).mapInArrow(function, segments.ddl(schema))


def scan(spark, store: EventFiles):
    """The one pass over the events (segments.scan_files): its DEC, END, MAX and COUNT rows,
    materialised once (they are few: END rows are one blob per segment and key bucket)."""
    from spark_jobs import segments

    buckets = int(spark.conf.get("spark.sql.shuffle.partitions"))
    function = functools.partial(segments.scan_files, uri=store.uri, groups=store.groups, buckets=buckets)
    return _over_files(spark, store, function, segments.OUTPUT).localCheckpoint(eager=True)


# The columns of a decrease, as decreases_exact gives them.
_DECREASE = (
    "k",
    *_STEP,
    *(f"prev_{c}" for c in _STEP),
    *KEY,
    "cluster_name",
    "role",
    "source",
    "queue_max_offset",
    "prev_role",
    "prev_source",
)
EXACT_KEYS_INLINE = 10_000  # up to this many overlapping queues are named in a filter; more: an anti-join


def decreases(spark, store: EventFiles, scanned):
    """Every decrease (as ``decreases_exact``) from the scan: inside segments (its DEC rows) and
    between a queue's consecutive segments (segments.combine_ends, per key bucket). A queue whose
    segments overlap is ordered exactly instead, from its events. Returns (decreases, how many,
    how many queues were ordered exactly)."""
    from pyspark.sql import functions as F

    from spark_jobs import segments

    kind = F.col("kind")
    ends = scanned.where(kind == segments.END).select("bucket", "blob")
    combined = ends.groupBy("bucket").applyInArrow(segments.combine_ends, segments.ddl(segments.OUTPUT))
    combined = combined.localCheckpoint(eager=True)
    overlap = combined.where(kind == segments.OVERLAP).select("k")
    overlapping = [r.k for r in overlap.collect()]
    found = scanned.where(kind == segments.DEC).unionByName(combined.where(kind == segments.DEC))
    if overlapping:
        if len(overlapping) <= EXACT_KEYS_INLINE:
            found = found.where(~F.col("k").isin(overlapping))
        else:
            found = found.join(F.broadcast(overlap), "k", "left_anti")
    same_queue = F.lit(True)
    for c in KEY:
        same_queue = same_queue & (F.col(c) == F.col(f"prev_{c}"))
    found = found.where(same_queue).select(*_DECREASE)
    if overlapping:
        function = functools.partial(segments.exact_rows, uri=store.uri, groups=store.groups, keys=overlapping)
        exact_events = _over_files(spark, store, function, segments.EVENTS).localCheckpoint(eager=True)
        exact, _ = decreases_exact(exact_events)
        found = found.unionByName(exact.select(*_DECREASE))
    found = found.localCheckpoint(eager=True)
    return found, found.count(), len(overlapping)


def beyond_max(scanned):
    """Serving commits beyond the queue's max offset (messages the broker does not have), one row per
    (queue, broker, epoch) episode: the segments' MAX rows combined."""
    from pyspark.sql import functions as F

    from spark_jobs import segments

    flagged = scanned.where(F.col("kind") == segments.MAX)
    return flagged.groupBy(*KEY, "broker_id", "master_epoch").agg(
        F.first("cluster_name").alias("cluster_name"),
        F.first("role").alias("role"),
        F.min("first_ms").alias("first_ms"),
        F.max("last_ms").alias("last_ms"),
        F.sum("events").alias("events"),
        F.max("excess").alias("excess"),
        F.max("offset").alias("offset"),
        F.min("queue_max_offset").alias("queue_max_offset"),
        F.first("source").alias("source"),
    )


def audit(
    spark,
    store: EventFiles,
    history: History,
    *,
    progress: Progress | None = None,
    reset_slack_ms: int = RESET_SLACK_MS,
    max_findings: int = MAX_FINDINGS,
) -> AuditOutcome:
    """Run the audit over the event files ``store`` (list_event_files) with ``history``
    (pg.load_history)."""
    from pyspark.sql import functions as F

    from spark_jobs import segments

    progress = progress or Progress(None)
    out = AuditOutcome()
    progress.stage("scanning the events", 0.05, 0.65)
    scanned = scan(spark, store)
    progress.stage("detecting rollbacks", 0.65, 0.75)
    dec, found, out.queues_ordered_exactly = decreases(spark, store, scanned)

    # The (few) decreases, judged in the driver by the rules themselves (rules.judge): logged resets,
    # elections, causes.
    progress.stage("judging decreases: operator resets, elections, causes", 0.75, 0.85)
    if found > max_findings:  # keep the largest; the counts below then cover those only
        dec = dec.orderBy((F.col("prev_offset") - F.col("offset")).desc()).limit(max_findings)
    judged = judge([_decrease(r) for r in dec.collect()], history, reset_slack_ms)
    out.explained_by_reset = judged.explained_by_reset
    total_rollbacks = found - out.explained_by_reset if found > max_findings else len(judged.findings)

    progress.stage("checking max offsets", 0.85, 0.95)
    over = beyond_max(scanned).orderBy(F.col("excess").desc()).limit(max_findings).collect()
    out.events_scanned = scanned.where(F.col("kind") == segments.COUNT).agg(F.sum("events")).first()[0] or 0

    progress.stage("counting messages lost to retention", 0.95, 0.98)
    skips = retention_skips(spark, store, max_findings)

    by_cause: Counter[str] = Counter()
    again_by_cause: Counter[str] = Counter()
    for f in judged.findings:
        by_cause[f.cause] += 1
        again_by_cause[f.cause] += f.messages_again
    out.findings = [*judged.findings, *(_beyond_max_finding(r) for r in over), *skips]
    out.rollbacks = total_rollbacks
    out.messages_again = sum(again_by_cause.values())
    out.beyond_max_offset = len(over)
    out.summary = {
        "rollbacksByCause": dict(by_cause),
        "messagesAgainByCause": dict(again_by_cause),
        "truncated": len(judged.findings) < total_rollbacks,
        "queuesOrderedExactly": out.queues_ordered_exactly,
        "residentSpark": is_remote(spark),
        "retentionSkips": len(skips),
        "messagesLostToRetention": sum(f.messages_lost for f in skips),
    }
    return out


def retention_skips(spark, store: EventFiles, max_findings: int = MAX_FINDINGS) -> list[Finding]:
    """The retention skips (rules.retention_losses) of at most ``max_findings`` queues: their queues'
    events are few, read whole and judged in the driver by the rule itself."""
    from spark_jobs import segments

    function = functools.partial(segments.source_rows, uri=store.uri, groups=store.groups, source=Source.RETENTION_SKIP.value)
    skipped = _over_files(spark, store, function, segments.EVENTS).select("queue_key").distinct().limit(max_findings)
    keys = [r.queue_key for r in skipped.collect()]
    if not keys:
        return []
    function = functools.partial(segments.exact_rows, uri=store.uri, groups=store.groups, keys=keys)
    rows = _over_files(spark, store, function, segments.EVENTS).collect()
    return retention_losses(
        (
            Queue(r.consumer_group, r.topic, r.broker_name, r.queue_id),
            Commit(
                r.broker_id, r.role or "", r.master_epoch, r.ts_ms, r.offset, r.source, r.cluster_name or "", r.queue_max_offset
            ),
        )
        for r in rows
    )


def _decrease(r) -> Decrease:
    """A row of ``decreases`` as the rules' values."""
    previous = Commit(r.prev_broker_id, r.prev_role or "", r.prev_master_epoch, r.prev_ts_ms, r.prev_offset, r.prev_source)
    return Decrease(Queue(r.consumer_group, r.topic, r.broker_name, r.queue_id), previous, _commit(r))


def _commit(r) -> Commit:
    """A row's commit (its current one, for a decrease) as the rules' value."""
    return Commit(
        r.broker_id, r.role or "", r.master_epoch, r.ts_ms, r.offset, r.source, r.cluster_name or "", r.queue_max_offset
    )


def _beyond_max_finding(r) -> Finding:
    """A row of ``beyond_max`` as a finding."""
    return Finding(
        kind=FindingKind.BEYOND_MAX_OFFSET,
        cluster_name=r.cluster_name or "",
        consumer_group=r.consumer_group,
        topic=r.topic,
        broker_name=r.broker_name,
        queue_id=r.queue_id,
        master_epoch=r.master_epoch,
        broker_id=r.broker_id,
        role=r.role or "",
        source=r.source,
        offset=r.offset,
        queue_max_offset=r.queue_max_offset,
        excess=r.excess,
        event_count=r.events,
        detected_at=at(r.first_ms),
        last_seen_at=at(r.last_ms),
    )


# --- command line -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m spark_jobs.offset_audit", description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="Postgres (default: $DATABASE_URL)")
    p.add_argument(
        "--events-uri",
        default=os.environ.get("AUDIT_EVENTS_URI", ".data/offset-events"),
        help="the offset event store: a folder or a URI pyarrow reads, s3://, gs://, hdfs:// (default: $AUDIT_EVENTS_URI)",
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
    p.add_argument(
        "--remote",
        default=os.environ.get("AUDIT_SPARK_REMOTE") or None,
        help="a resident Spark to run on, sc://localhost:PORT (spark_jobs/server.py; default: $AUDIT_SPARK_REMOTE); "
        "when it does not answer the job starts its own session",
    )
    p.add_argument(
        "--token-file",
        default=os.environ.get("AUDIT_SPARK_TOKEN_FILE", ".data/audit-spark.token"),
        help="the resident Spark's token (default: $AUDIT_SPARK_TOKEN_FILE, .data/audit-spark.token)",
    )
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration")
    p.add_argument("--max-findings", type=int, default=MAX_FINDINGS)
    args = p.parse_args(argv)
    if not args.database_url:
        p.error("--database-url (or $DATABASE_URL) is required: findings are written to Postgres")
    return args


def _read_token(path: str) -> str | None:
    try:
        return open(path, encoding="ascii").read().strip() or None
    except FileNotFoundError:
        return None


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
    progress.stage("reading the controller's history", 0.0, 0.05)
    now = now or datetime.now(UTC)
    since = now - timedelta(days=lookback_days) if lookback_days else None
    history = pg.load_history(conn, int(since.timestamp() * 1000) - RESET_SLACK_MS if since else None)
    store = list_event_files(events_uri, since.date().isoformat() if since else None, tasks=_tasks(spark))
    outcome = audit(spark, store, history, progress=progress, max_findings=max_findings)
    outcome.summary["stageSeconds"] = progress.finish()  # where a run's time goes, for operators
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
    resident = bool(args.remote) and reachable(args.remote)
    label = args.remote if resident else master or "spark-submit"  # the run's sparkMaster
    conn = pg.connect(args.database_url)
    if args.run_id is None:
        run_id = pg.create_run(conn, label, args.events_uri, lookback)
    else:
        run_id = args.run_id
        pg.mark_running(conn, run_id, label, args.events_uri, lookback)
    print(f"audit run {run_id}: events {args.events_uri}, master {master or 'from spark-submit'}", flush=True)
    if args.remote:
        state = "runs on it" if resident else "does not answer; starting a session"
        print(f"audit run {run_id}: the resident Spark at {args.remote} {state}", flush=True)
    progress_conn = pg.connect(args.database_url)
    progress = Progress(lambda stage, frac: pg.report_progress(progress_conn, run_id, stage, frac)).start()
    started = time.monotonic()
    try:
        spark = remote_session(args.remote, _read_token(args.token_file)) if resident else build_session(master, conf)
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
    print(f"stages (s): {outcome.summary['stageSeconds']}", flush=True)
    print(f"TIMINGS session_s={session_s:.3f} job_s={outcome.job_seconds:.3f} events={outcome.events_scanned}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
