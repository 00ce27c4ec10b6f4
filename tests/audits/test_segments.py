"""The audit's one pass (spark_jobs/segments.py) and how the job combines its segments
(offset_audit.decreases): per segment the decreases inside it, each queue's first and last commit,
the beyond-max aggregates and the event count; across segments the same decreases as ordering every
queue's commits exactly (offset_audit.decreases_exact), including segments that overlap in time and
arrive in any order. The pure part runs on Arrow tables; the combination on real Spark (local)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audits import event_store
from spark_jobs import segments
from spark_jobs.offset_audit import decreases, decreases_exact, list_event_files, scan
from spark_jobs.schema import COLUMNS, PARTITION_COLUMN, filesystem

from .helpers import batch

pytestmark = pytest.mark.integration

CC, SYNC, RESET, TAKEOVER = "client_commit", "slave_sync", "operator_reset", "master_takeover"
T0 = 1_700_000_000_000


def table(*batches) -> pa.Table:
    rows = event_store.rows_by_date([(T0, b) for b in batches])
    (cols,) = rows.values()
    from spark_jobs.schema import arrow_schema

    return pa.Table.from_pydict(cols, schema=arrow_schema())


def rows_of(kind: int, out: list[pa.RecordBatch]) -> list[dict]:
    rows = [r for b in out for r in b.to_pylist() if r["kind"] == kind]
    if kind == segments.END:  # one Arrow IPC blob per key bucket
        return [e for r in rows for e in pa.ipc.open_stream(r["blob"]).read_all().to_pylist()]
    return rows


def test_one_segment_gives_its_decreases_ends_beyond_max_and_count():
    t = table(
        # out of order within the segment: sorted by commit time before comparing
        batch("b", 0, "SYNC_MASTER", 1, [("g", "t", 0, 300, CC, T0 + 3000), ("g", "t", 0, 100, CC, T0 + 1000)]),
        batch("b", 0, "SYNC_MASTER", 1, [("g", "t", 0, 200, CC, T0 + 2000), ("g", "t", 0, 250, CC, T0 + 4000)]),
        batch("b", 1, "SLAVE", 1, [("g", "t", 0, 10, SYNC, T0 + 3500)]),  # a slave's sync: not served
        batch("b", 0, "SYNC_MASTER", 1, [("g", "t", 1, 50, CC, T0 + 1000), ("g", "t", 1, 0, RESET, T0 + 2000)]),
        batch("b", 0, "SYNC_MASTER", 1, [("g", "t", 2, 120, CC, T0 + 1000, 100), ("g", "t", 2, 130, CC, T0 + 2000, 100)]),
    )
    out = list(segments.scan_segment(t, seg=7, buckets=2))
    assert [r["events"] for r in rows_of(segments.COUNT, out)] == [9]
    (dec,) = rows_of(segments.DEC, out)  # 300 -> 250 on queue 0; the reset on queue 1 is not one
    assert (dec["prev_offset"], dec["offset"], dec["prev_ts_ms"], dec["ts_ms"], dec["seg"]) == (300, 250, T0 + 3000, T0 + 4000, 7)
    names = (dec["consumer_group"], dec["queue_id"], dec["prev_queue_id"], dec["source"], dec["role"])
    assert names == ("g", 0, 0, CC, "SYNC_MASTER")
    ends = {r["queue_id"]: (r["offset"], r["prev_offset"], r["is_reset"], r["prev_is_reset"]) for r in rows_of(segments.END, out)}
    assert ends == {0: (100, 250, False, False), 1: (50, 0, False, True), 2: (120, 130, False, False)}
    (over,) = rows_of(segments.MAX, out)
    assert (over["queue_id"], over["events"], over["excess"], over["offset"], over["queue_max_offset"]) == (2, 2, 30, 130, 100)
    assert (over["first_ms"], over["last_ms"]) == (T0 + 1000, T0 + 2000)


def test_a_task_reads_its_files_in_segments_of_bounded_size(tmp_path):
    uri = str(tmp_path / "events")
    paths = []
    for f in range(4):  # four files of three commits
        b = batch("b", 0, "SYNC_MASTER", 1, [("g", "t", 0, f * 3 + i, CC, T0 + f * 3 + i) for i in range(3)])
        paths += event_store.write_parquet(uri, f"part-{f}", event_store.rows_by_date([(T0, b)]))
    ids = iter([pa.record_batch([pa.array([1])], names=["id"])])
    out = list(segments.scan_files(ids, uri, groups=[[], paths], buckets=1, segment_rows=4))
    assert [(r["seg"], r["events"]) for r in rows_of(segments.COUNT, out)] == [((1 << 24) + 0, 6), ((1 << 24) + 1, 6)]
    assert [(r["offset"], r["prev_offset"]) for r in rows_of(segments.END, out)] == [(0, 5), (6, 11)]


@pytest.mark.parametrize("seed", range(6))
def test_queue_order_is_the_full_lexsort_with_ties_in_every_key(seed):
    rng = np.random.default_rng(seed)
    n = 5000
    # few queues and few distinct times: long runs of equal (queue, time), and rows equal in every key
    k = rng.choice(np.array([-(2**63), -7, 0, 3, 2**62], np.int64), n)
    ts = T0 + rng.integers(0, 4 if seed % 2 else 400, n)
    epoch, broker, offset = rng.integers(1, 3, n), rng.integers(0, 2, n), rng.integers(0, 5, n)
    reset = rng.random(n) < 0.2
    expected = np.lexsort((reset, offset, broker, epoch, ts, k))
    assert np.array_equal(segments.queue_order(k, ts, epoch, broker, offset, reset), expected)
    no_ties = np.arange(n)  # and without a tie: the (queue, time) sort alone
    assert np.array_equal(segments.queue_order(k, T0 + no_ties, epoch, broker, offset, reset), np.lexsort((no_ties, k)))


def test_a_file_without_a_later_column_reads_it_as_nulls_and_names_as_dictionaries(tmp_path):
    b = batch("b", 0, "SYNC_MASTER", 1, [("g", "t", 0, 5, CC, T0, 100)])
    (path,) = event_store.write_parquet(str(tmp_path), "part-0", event_store.rows_by_date([(T0, b)]))
    full = pq.read_table(path)
    older = tmp_path / "older.parquet"
    pq.write_table(full.drop_columns(["queue_max_offset", "role"]), older)
    fs, _ = filesystem(str(tmp_path))
    for p, role, max_offset in ((path, "SYNC_MASTER", 100), (str(older), None, None)):
        t = segments.read_file(fs, p)
        assert t.schema == segments.READ and pa.types.is_dictionary(t.schema.field("consumer_group").type)
        (row,) = t.cast(segments.EVENTS).to_pylist()
        assert (row["consumer_group"], row["offset"], row["role"], row["queue_max_offset"]) == ("g", 5, role, max_offset)


def test_listing_skips_hidden_files_prunes_old_dates_and_balances_tasks(tmp_path):
    uri = str(tmp_path / "events")
    day = 86_400_000
    for n in range(5):
        events = [("g", "t", 0, i, CC, T0 + (n % 2) * day + i) for i in range(1 + n * 50)]
        event_store.write_parquet(uri, f"part-{n}", event_store.rows_by_date([(T0, batch("b", 0, "SYNC_MASTER", 1, events))]))
    (tmp_path / "events" / "event_date=2023-11-14" / ".part-9.1234.tmp").write_bytes(b"a flush in progress")
    store = list_event_files(uri, tasks=2)
    assert store.count == 5 and len(store.groups) == 2
    assert all(p.endswith(".parquet") for g in store.groups for p in g)
    later = list_event_files(uri, since_date="2023-11-15", tasks=8)  # T0 is 2023-11-14 UTC
    assert later.count == 2 and len(later.groups) == 2
    assert list_event_files(str(tmp_path / "nothing-yet")).groups == ()


def test_output_ddl_names_every_column():
    ddl = segments.ddl(segments.OUTPUT)
    assert ddl.count("`") == 2 * len(segments.OUTPUT) and "`prev_is_reset` boolean" in ddl and "`blob` binary" in ddl


def read_events(spark, uri: str):
    """The store through Spark's own Parquet reader (not the job's): the reference's input."""
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "int64": T.LongType(), "int32": T.IntegerType()}
    fields = [T.StructField(n, kinds[k]) for n, k in COLUMNS] + [T.StructField(PARTITION_COLUMN, T.StringType())]
    return spark.read.schema(T.StructType(fields)).option("basePath", uri).parquet(uri)


def _as_set(df) -> set[tuple]:
    cols = ("broker_name", "consumer_group", "queue_id", "prev_ts_ms", "ts_ms", "prev_offset", "offset", "prev_source", "source")
    return {tuple(r[c] for c in cols) for r in df.collect()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_segments_in_any_order_and_overlapping_give_exactly_the_decreases_of_ordering_every_queue(spark, tmp_path, seed):
    rng = random.Random(seed)
    batches = []
    for q in range(6):  # six queues; commits that mostly rise, sometimes fall, with resets and slave syncs
        offset, ts = 0, T0
        for _ in range(rng.randint(5, 40)):
            ts += rng.randint(1, 2000)
            offset = max(0, offset + rng.choice([10, 10, 10, 25, -30, -5]))
            source = rng.choice([CC, CC, CC, CC, SYNC, TAKEOVER, RESET])
            broker, epoch = rng.choice([0, 1]), rng.choice([1, 2])
            batches.append(batch(f"b{q % 2}", broker, "SYNC_MASTER", epoch, [("g", "t", q, offset, source, ts)]))
    rng.shuffle(batches)  # files in any order; each holds a random run of the shuffled batches: segments overlap
    uri = str(tmp_path / "events")
    i = n = 0
    while i < len(batches):
        size = rng.randint(1, 12)
        event_store.write_parquet(uri, f"part-{n:05d}", event_store.rows_by_date([(T0, b) for b in batches[i : i + size]]))
        i, n = i + size, n + 1
    store = list_event_files(uri, tasks=3)
    found, count, exact_queues = decreases(spark, store, scan(spark, store))
    expected, _ = decreases_exact(read_events(spark, uri))  # Spark's own reader, every queue ordered
    assert _as_set(found) == _as_set(expected) and count == len(_as_set(expected)) > 0
    assert exact_queues > 0  # shuffled files overlap: those queues were ordered exactly


def test_segments_that_do_not_overlap_are_joined_at_their_boundaries(spark, tmp_path):
    uri = str(tmp_path / "events")
    first = [("g", "t", 0, o, CC, T0 + o) for o in (10, 20, 30)]
    second = [("g", "t", 0, o, CC, T0 + 100 + o) for o in (5, 15)]  # after the first: 30 -> 5 at the boundary
    event_store.write_parquet(uri, "part-b", event_store.rows_by_date([(T0, batch("b", 1, "SYNC_MASTER", 2, second))]))
    event_store.write_parquet(uri, "part-a", event_store.rows_by_date([(T0, batch("b", 0, "SYNC_MASTER", 1, first))]))
    store = list_event_files(uri)
    found, count, exact_queues = decreases(spark, store, scan(spark, store))
    assert (count, exact_queues) == (1, 0)
    (r,) = found.collect()
    assert (r.prev_offset, r.offset, r.prev_broker_id, r.broker_id, r.prev_master_epoch, r.master_epoch) == (30, 5, 0, 1, 1, 2)
