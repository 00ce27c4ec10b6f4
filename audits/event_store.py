"""The offset event store: reported batches are buffered in Redis, then appended as Parquet files
partitioned by date under ``settings.AUDIT_EVENTS_URI`` (spark_jobs/schema.py has the format).

Why a buffer: brokers report every second; one Parquet file per report would leave the job millions
of tiny files. Every process of the control plane pushes batches onto one Redis list (one round trip
per coalesced group of websocket frames), and a Celery beat task (``audits.flush_offset_events``,
every AUDIT_EVENTS_FLUSH_SECONDS) writes what has accumulated as one file per date.

A flush renames the list to ``...:flushing:<id>`` first, so new reports go to a fresh list, and
deletes that key only after its files are written; a flush that dies midway leaves the key for the
next one, which writes the same file names again (``part-<id>-<chunk>.parquet``): no loss, no
duplicate. The buffer is bounded (AUDIT_EVENTS_BUFFER_MAX_BATCHES): beyond it reports are refused
(SYSTEM_BUSY) and brokers keep their latest offsets until the next report.
"""

from __future__ import annotations

import secrets
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from rest_framework import status

from controlplane.errors import ApiError, ResponseCode
from controlplane.redis import LUA_NOW_MS, async_client, key, sync_client
from spark_jobs.schema import COLUMNS, PARTITION_COLUMN, arrow_schema, queue_key
from spark_jobs.schema import filesystem as store_filesystem

from .events import OffsetEventBatch

CHUNK_BATCHES = 20_000  # batches per Parquet file written by one flush
LOCK_TTL_MS = 300_000

# KEYS: the buffer. ARGV: max batches, batch JSON... Each item is stamped "<Redis ms> <json>".
_APPEND = (
    LUA_NOW_MS
    + """
local n = #ARGV - 1
if redis.call('LLEN', KEYS[1]) + n > tonumber(ARGV[1]) then return -1 end
local items = {}
for i = 2, #ARGV do items[#items + 1] = now .. ' ' .. ARGV[i] end
return redis.call('RPUSH', KEYS[1], unpack(items))
"""
)
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def buffer_key() -> str:
    return key("audits", "offset-events")


def _flushing_prefix() -> str:
    return key("audits", "offset-events", "flushing", "")


def _buffer_full() -> ApiError:
    return ApiError(
        ResponseCode.SYSTEM_BUSY,
        "the offset event buffer is full; report again later",
        http_status=status.HTTP_429_TOO_MANY_REQUESTS,
    )


def _append_args(batches: Sequence[OffsetEventBatch]) -> list:
    return [1, buffer_key(), settings.AUDIT_EVENTS_BUFFER_MAX_BATCHES, *(b.to_json() for b in batches)]


def append(batches: Sequence[OffsetEventBatch]) -> None:
    if batches and sync_client().eval(_APPEND, *_append_args(batches)) == -1:
        raise _buffer_full()


async def append_async(batches: Sequence[OffsetEventBatch]) -> None:
    if batches and await async_client().eval(_APPEND, *_append_args(batches)) == -1:
        raise _buffer_full()


def pending_batches() -> list[tuple[int, OffsetEventBatch]]:
    """What the buffer holds now, oldest first, as (received ms, batch): for tests and inspection."""
    return [_decode(item) for item in sync_client().lrange(buffer_key(), 0, -1)]


def _decode(item: str) -> tuple[int, OffsetEventBatch]:
    received, _, raw = item.partition(" ")
    return int(received), OffsetEventBatch.from_json(raw)


# --- writing Parquet ------------------------------------------------------------------------------


def rows_by_date(items: Iterable[tuple[int, OffsetEventBatch]]) -> dict[str, dict[str, list]]:
    """Column lists per ``event_date`` (UTC date of the commit)."""
    names = [n for n, _ in COLUMNS]
    out: dict[str, dict[str, list]] = defaultdict(lambda: {n: [] for n in names})
    for received_ms, b in items:
        head = (b.cluster_name, b.broker_name, b.broker_id, b.role, b.master_epoch)
        for e in b.events:
            cols = out[datetime.fromtimestamp(e.ts_ms / 1000, tz=UTC).date().isoformat()]
            key = queue_key(e.consumer_group, e.topic, b.broker_name, e.queue_id)
            for name, value in zip(
                names,
                (
                    key,
                    *head,
                    e.consumer_group,
                    e.topic,
                    e.queue_id,
                    e.offset,
                    e.queue_max_offset,
                    e.source,
                    e.ts_ms,
                    *b.data_version,
                    received_ms,
                ),
                strict=True,
            ):
                cols[name].append(value)
    return out


def write_parquet(uri: str, file_stem: str, columns_by_date: dict[str, dict[str, list]]) -> list[str]:
    """One file per date, ``<uri>/event_date=<date>/<file_stem>.parquet``, written under a hidden
    name and moved into place (readers skip names starting with '.')."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    filesystem, base = store_filesystem(uri)
    schema = arrow_schema()
    written = []
    for date, cols in sorted(columns_by_date.items()):
        folder = f"{base.rstrip('/')}/{PARTITION_COLUMN}={date}"
        filesystem.create_dir(folder, recursive=True)
        final, tmp = f"{folder}/{file_stem}.parquet", f"{folder}/.{file_stem}.{secrets.token_hex(4)}.tmp"
        pq.write_table(pa.Table.from_pydict(cols, schema=schema), tmp, filesystem=filesystem, compression="zstd")
        filesystem.move(tmp, final)
        written.append(final)
    return written


@dataclass(frozen=True)
class FlushReport:
    batches: int = 0
    events: int = 0
    files: int = 0
    skipped: bool = False  # another flush held the lock


def flush(uri: str | None = None) -> FlushReport:
    """Append everything buffered to the event store (see the module docstring)."""
    uri = uri or settings.AUDIT_EVENTS_URI
    client = sync_client()
    lock, token = key("audits", "offset-events", "flush-lock"), secrets.token_hex(8)
    if not client.set(lock, token, nx=True, px=LOCK_TTL_MS):
        return FlushReport(skipped=True)
    batches = events = files = 0
    try:
        pending = sorted(client.scan_iter(_flushing_prefix() + "*", count=1000))  # a crashed flush's leftovers
        fresh = _flushing_prefix() + uuid.uuid4().hex
        if client.exists(buffer_key()):
            client.rename(buffer_key(), fresh)
            pending.append(fresh)
        for flushing in pending:
            batch_id = flushing.rsplit(":", 1)[1]
            total = client.llen(flushing)
            for chunk, start in enumerate(range(0, total, CHUNK_BATCHES)):
                items = [_decode(i) for i in client.lrange(flushing, start, start + CHUNK_BATCHES - 1)]
                by_date = rows_by_date(items)
                files += len(write_parquet(uri, f"part-{batch_id}-{chunk:05d}", by_date))
                batches += len(items)
                events += sum(len(cols["offset"]) for cols in by_date.values())
            client.delete(flushing)
    finally:
        client.eval(_RELEASE, 1, lock, token)
    return FlushReport(batches, events, files)
