"""The audit's passes over the event files, run in Spark's Python workers (``mapInArrow``,
``applyInArrow``). Pure numpy / pyarrow, no Spark: tests call these functions directly.

**Scan** (``scan_files``): each task reads its share of the files with pyarrow (the library the
control plane writes them with) and cuts them into *segments* of up to SEGMENT_ROWS events. Per
segment, over the serving stream (schema.SERVING_SOURCES) ordered per queue by
(commit time, master epoch, broker id, offset, is reset):

* ``DEC`` rows: each decrease of a queue's committed offset inside the segment that is not an
  operator reset (rules.decreases, here vectorised), with the commit before it (``prev_*``);
* ``END`` rows: per queue, its first and its last commit in the segment, for the combine. They are
  as many as the queues times the segments, so they travel as Arrow IPC blobs, one per key bucket
  (Spark would otherwise convert every value into and out of its rows);
* ``MAX`` rows: serving commits beyond the queue's max offset, aggregated per (queue, broker,
  epoch): count, first and last commit time, largest excess and offset, smallest max offset;
* one ``COUNT`` row: the segment's events (all sources).

**Combine** (``combine_ends``, per key bucket): a queue's segments ordered by their first commit.
Where they do not overlap, the queue's sequence is the segments one after the other, and a
decrease between two of them is a segment's first commit below the previous one's last (``DEC``
rows). Where they overlap (one queue's reports that reached different flushes out of order), the
queue is named in an ``OVERLAP`` row and the job orders its commits exactly from its events
(``exact_rows``, then offset_audit.decreases_exact).

So the events are read once and never become Spark rows; only the few rows above do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.rules import COMMIT_ORDER
from spark_jobs.schema import COLUMNS, SERVING_SOURCES, Source, filesystem

DEC, END, MAX, COUNT, OVERLAP = 0, 1, 2, 3, 4
SEGMENT_ROWS = 1_000_000  # events per segment: bounds a worker's memory; END rows scale with segments
NAMES = ("cluster_name", "consumer_group", "topic", "broker_name", "queue_id", "role", "source")
ORDER = COMMIT_ORDER  # then is_reset (rules.commit_order)
INPUT = ("queue_key", *ORDER, "queue_max_offset", *NAMES)  # the columns the passes read

_TYPES = dict(COLUMNS)
_COMMIT = (*((c, pa.int64()) for c in ORDER), ("is_reset", pa.bool_()))
_INFO = (
    ("cluster_name", pa.string()),
    ("consumer_group", pa.string()),
    ("topic", pa.string()),
    ("broker_name", pa.string()),
    ("queue_id", pa.int32()),
    ("role", pa.string()),
    ("source", pa.string()),
    ("queue_max_offset", pa.int64()),
)
# A commit and the one before it (DEC), or a queue's first and last commit in a segment (END).
PAIR = pa.schema(
    [("k", pa.int64()), *_COMMIT, *_INFO, *((f"prev_{n}", t) for n, t in _COMMIT), *((f"prev_{n}", t) for n, t in _INFO)]
)
OUTPUT = pa.schema(
    [
        ("kind", pa.int8()),
        ("seg", pa.int64()),
        *PAIR,
        # MAX and COUNT rows
        ("events", pa.int64()),
        ("first_ms", pa.int64()),
        ("last_ms", pa.int64()),
        ("excess", pa.int64()),
        # END rows
        ("bucket", pa.int32()),
        ("blob", pa.binary()),
    ]
)
EVENTS = pa.schema([(c, getattr(pa, _TYPES[c])()) for c in INPUT])  # exact_rows' output
_STRINGS = {c for c in INPUT if _TYPES[c] == "string"}
READ = pa.schema([(f.name, pa.dictionary(pa.int32(), pa.string()) if f.name in _STRINGS else f.type) for f in EVENTS])


def ddl(schema: pa.Schema) -> str:
    """A schema as a Spark DDL string (mapInArrow's return type)."""
    kinds = {
        pa.int8(): "tinyint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.bool_(): "boolean",
        pa.string(): "string",
        pa.binary(): "binary",
    }
    return ", ".join(f"`{f.name}` {kinds[f.type]}" for f in schema)


_SERVING = pa.array([s.value for s in SERVING_SOURCES])


# --- reading ------------------------------------------------------------------------------------


def read_file(fs, path: str) -> pa.Table:
    """INPUT of one event file (READ: names as dictionary arrays, as the files encode them, so no
    string is materialized for the millions of rows that only their numbers are needed of); a
    column an older file lacks reads as nulls."""
    import pyarrow.parquet as pq

    present = set(pq.ParquetFile(path, filesystem=fs).schema_arrow.names)
    columns = [c for c in INPUT if c in present]
    table = pq.read_table(path, columns=columns, filesystem=fs, read_dictionary=[c for c in columns if c in _STRINGS])
    for c in INPUT:
        if c not in present:
            table = table.append_column(c, pa.nulls(table.num_rows, READ.field(c).type))
    return table.select(list(INPUT)).cast(READ)


def _segments(uri: str, paths: Sequence[str], segment_rows: int) -> Iterator[pa.Table]:
    fs, _ = filesystem(uri)
    pending: list[pa.Table] = []
    rows = 0
    for path in paths:
        table = read_file(fs, path)
        pending.append(table)
        rows += table.num_rows
        if rows >= segment_rows:
            yield pa.concat_tables(pending)
            pending, rows = [], 0
    if pending:
        yield pa.concat_tables(pending)


def _group_ids(batches: Iterable[pa.RecordBatch]) -> Iterator[int]:
    for batch in batches:
        yield from batch.column(0).to_pylist()


# --- scan ---------------------------------------------------------------------------------------


def scan_files(
    batches: Iterable[pa.RecordBatch],
    uri: str,
    groups: Sequence[Sequence[str]],
    buckets: int,
    segment_rows: int = SEGMENT_ROWS,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow over ``spark.range(len(groups))``: for each id, scan the files of that group."""
    for gid in _group_ids(batches):
        for n, segment in enumerate(_segments(uri, groups[gid], segment_rows)):
            yield from scan_segment(segment, (gid << 24) + n, buckets)


def _ints(column) -> np.ndarray:
    return pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _take(table: pa.Table, idx: np.ndarray, resets: np.ndarray, prefix: str = "") -> dict[str, pa.Array]:
    """The commit and names of the rows at ``idx`` (``resets``: is_reset of every row of ``table``)."""
    taken = table.take(pa.array(idx, type=pa.int64()))
    columns = {prefix + n: taken.column(n).combine_chunks().cast(t) for n, t in _COMMIT + _INFO if n != "is_reset"}
    columns[prefix + "is_reset"] = pa.array(resets[idx], pa.bool_())
    return columns


def _rows(schema: pa.Schema, n: int, columns: dict) -> pa.RecordBatch:
    arrays = []
    for f in schema:
        value = columns.get(f.name)
        if value is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(value, int):
            arrays.append(pa.array(np.full(n, value), f.type))
        else:
            arrays.append(pa.array(value, f.type) if isinstance(value, np.ndarray) else value.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def queue_order(k, ts, epoch, broker, offset, reset) -> np.ndarray:
    """``np.lexsort((reset, offset, broker, epoch, ts, k))``, the same permutation, cheaper: sorted by
    (queue, commit time) first, then only the runs of equal (queue, commit time), which are few,
    by the rest. Both sorts are stable, so rows equal in every key keep their order in either."""
    order = np.lexsort((ts, k))
    ks, tss = k[order], ts[order]
    tie = (ks[1:] == ks[:-1]) & (tss[1:] == tss[:-1])
    if not tie.any():
        return order
    run = np.cumsum(np.concatenate(([False], ~tie)))  # the run of equal (queue, time) of each position
    in_run = np.zeros(len(order), bool)
    in_run[1:] |= tie
    in_run[:-1] |= tie
    pos = np.flatnonzero(in_run)
    sub = order[pos]
    order[pos] = sub[np.lexsort((reset[sub], offset[sub], broker[sub], epoch[sub], run[pos]))]
    return order


def scan_segment(table: pa.Table, seg: int, buckets: int) -> Iterator[pa.RecordBatch]:
    """The DEC, END, MAX and COUNT rows of one segment (see the module docstring). The serving
    commits are worked on as numpy columns and positions in ``table``; only the rows that become
    output are taken from it."""
    yield _rows(OUTPUT, 1, {"kind": COUNT, "seg": seg, "events": pa.array([table.num_rows], pa.int64())})
    source = table.column("source")
    serving_at = np.flatnonzero(pc.fill_null(pc.is_in(source, value_set=_SERVING), False).to_numpy(zero_copy_only=False))
    if len(serving_at) == 0:
        return
    all_resets = pc.fill_null(pc.equal(source, Source.OPERATOR_RESET.value), False).to_numpy(zero_copy_only=False)
    k = _ints(table.column("queue_key"))[serving_at]
    ts, epoch, broker, offset = (_ints(table.column(c))[serving_at] for c in ORDER)
    reset = all_resets[serving_at]
    order = queue_order(k, ts, epoch, broker, offset, reset)
    ks, offs, resets = k[order], offset[order], reset[order]
    same = ks[1:] == ks[:-1]
    down = same & (offs[1:] < offs[:-1]) & ~resets[1:]
    if down.any():
        cur, prev = order[1:][down], order[:-1][down]
        pairs = {
            "k": ks[1:][down],
            **_take(table, serving_at[cur], all_resets),
            **_take(table, serving_at[prev], all_resets, "prev_"),
        }
        yield _rows(OUTPUT, len(cur), {"kind": DEC, "seg": seg, **pairs})
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.concatenate((starts[1:] - 1, [len(order) - 1]))
    first_last = {
        "k": ks[starts],
        **_take(table, serving_at[order[starts]], all_resets),
        **_take(table, serving_at[order[ends]], all_resets, "prev_"),
    }
    first_last = _rows(PAIR, len(starts), first_last)
    bucket_of = ks[starts] % buckets
    for b in range(buckets):
        part = first_last.filter(pa.array(bucket_of == b))
        if part.num_rows:
            yield _rows(OUTPUT, 1, {"kind": END, "seg": seg, "bucket": b, "blob": pa.array([_ipc(part)], pa.binary())})
    yield from _beyond_max(table, serving_at, k, offset, seg)


def _beyond_max(table: pa.Table, serving_at: np.ndarray, k: np.ndarray, offset: np.ndarray, seg: int) -> Iterator[pa.RecordBatch]:
    qmo = table.column("queue_max_offset")
    over = pc.is_valid(qmo).to_numpy(zero_copy_only=False)[serving_at] & (offset > _ints(qmo)[serving_at])
    if not over.any():
        return
    idx = np.flatnonzero(over)
    flagged = table.take(pa.array(serving_at[idx], type=pa.int64())).select(list(INPUT)).cast(EVENTS)
    flagged = flagged.append_column("excess", pc.subtract(flagged.column("offset"), flagged.column("queue_max_offset")))
    flagged = flagged.append_column("k", pa.array(k[idx]))
    # One row per (queue, broker, epoch): the aggregates and its first row's names.
    g = flagged.group_by(["k", "broker_id", "master_epoch"], use_threads=False).aggregate(
        [
            ("ts_ms", "min"),
            ("ts_ms", "max"),
            ("ts_ms", "count"),
            ("excess", "max"),
            ("offset", "max"),
            ("queue_max_offset", "min"),
            *((n, "first") for n in NAMES),
        ]
    )
    columns = {
        "kind": MAX,
        "seg": seg,
        "k": g.column("k"),
        "broker_id": g.column("broker_id"),
        "master_epoch": g.column("master_epoch"),
        "ts_ms": g.column("ts_ms_min"),
        "first_ms": g.column("ts_ms_min"),
        "last_ms": g.column("ts_ms_max"),
        "events": g.column("ts_ms_count"),
        "excess": g.column("excess_max"),
        "offset": g.column("offset_max"),
        "queue_max_offset": g.column("queue_max_offset_min"),
        **{n: g.column(f"{n}_first") for n in NAMES},
    }
    yield _rows(OUTPUT, g.num_rows, {n: v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v for n, v in columns.items()})


# --- combine ------------------------------------------------------------------------------------


def combine_ends(table: pa.Table) -> pa.Table:
    """applyInArrow over the END rows grouped by bucket: the decreases between a queue's segments
    (DEC rows) and the queues whose segments overlap (OVERLAP rows)."""
    blobs = table.column("blob").to_pylist()
    if not blobs:
        return pa.Table.from_batches([], schema=OUTPUT)
    ends = pa.concat_tables([pa.ipc.open_stream(b).read_all() for b in blobs])
    k = _ints(ends.column("k"))
    first = [_ints(ends.column(c)) for c in ORDER] + [ends.column("is_reset").to_numpy(zero_copy_only=False)]
    last = [_ints(ends.column(f"prev_{c}")) for c in ORDER] + [ends.column("prev_is_reset").to_numpy(zero_copy_only=False)]
    order = np.lexsort((*reversed(first), k))
    k = k[order]
    first = [c[order] for c in first]
    last = [c[order] for c in last]
    same = k[1:] == k[:-1]
    # cur.first < prev.last, compared as tuples: overlapping segments.
    less, equal = np.zeros(len(same), bool), np.ones(len(same), bool)
    for f, lst in zip(first, last, strict=True):
        cur, prev = f[1:].astype(np.int64), lst[:-1].astype(np.int64)
        less |= equal & (cur < prev)
        equal &= cur == prev
    overlap_pair = same & less
    overlapping = np.unique(k[1:][overlap_pair])
    clean = ~np.isin(k[1:], overlapping)
    down = same & clean & (first[3][1:] < last[3][:-1]) & ~first[4][1:]
    out = []
    if down.any():
        cur, prev = order[1:][down], order[:-1][down]
        cur_rows, prev_rows = ends.take(pa.array(cur, pa.int64())), ends.take(pa.array(prev, pa.int64()))
        columns = {"k": pa.array(k[1:][down])}
        for n, _ in (*_COMMIT, *_INFO):
            columns[n] = cur_rows.column(n).combine_chunks()
            columns[f"prev_{n}"] = prev_rows.column(f"prev_{n}").combine_chunks()
        out.append(_rows(OUTPUT, int(down.sum()), {"kind": DEC, **columns}))
    if len(overlapping):
        out.append(_rows(OUTPUT, len(overlapping), {"kind": OVERLAP, "k": overlapping}))
    return pa.Table.from_batches(out, schema=OUTPUT)


# --- exact --------------------------------------------------------------------------------------


def exact_rows(
    batches: Iterable[pa.RecordBatch], uri: str, groups: Sequence[Sequence[str]], keys: Sequence[int]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow over ``spark.range(len(groups))``: the events of the queues ``keys`` (EVENTS)."""
    wanted = pa.array(sorted(keys), pa.int64())
    fs, _ = filesystem(uri)
    for gid in _group_ids(batches):
        for path in groups[gid]:
            table = read_file(fs, path)
            table = table.filter(pc.is_in(table.column("queue_key"), value_set=wanted))
            yield from table.cast(EVENTS).to_batches()


def source_rows(
    batches: Iterable[pa.RecordBatch], uri: str, groups: Sequence[Sequence[str]], source: str
) -> Iterator[pa.RecordBatch]:
    """mapInArrow over ``spark.range(len(groups))``: the events reported with ``source`` (EVENTS);
    for the rare sources (a retention skip), whose queues the job then reads whole (``exact_rows``)."""
    fs, _ = filesystem(uri)
    for gid in _group_ids(batches):
        for path in groups[gid]:
            table = read_file(fs, path)
            table = table.filter(pc.equal(table.column("source"), source))
            yield from table.cast(EVENTS).to_batches()
