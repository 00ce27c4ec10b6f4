"""The audit's formats (docs/audits.md): the contracts between the control plane and the audit job.

* The offset event store, which the control plane appends to and the job reads: one row per
  reported consumer-offset commit, Parquet files partitioned by ``event_date`` (UTC date of
  ``ts_ms``) under the store's URI: ``<uri>/event_date=2025-01-31/part-<batch id>.parquet``.
* ``Finding``, what the job writes (table ``audits_finding``) and the control plane serves: its
  fields are named here once; the Django model and the REST shape are checked against them
  (tests/audits/test_finding_record.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Source(StrEnum):
    """Where a committed offset came from (reference §5.3-§5.4)."""

    CLIENT_COMMIT = "client_commit"  # a consumer's ack/commit on the serving broker
    SLAVE_SYNC = "slave_sync"  # a slave overwrote its offsets with its master's (syncConsumerOffset)
    PRE_ONLINE_SYNC = "pre_online_sync"  # a returning master adopted a slave's newer offsets (§5.3 step 3c)
    OPERATOR_RESET = "operator_reset"  # an operator reset the offset on purpose
    # Ours: the offsets a broker serves from when it starts serving as master at an epoch (its whole
    # table, once). A rollback then shows at the moment of the failover, with its exact size, before
    # any consumer commits on the new master.
    MASTER_TAKEOVER = "master_takeover"
    # Ours: a broker found a committed offset beyond its queue's end (a shorter log became the
    # master's in an unclean election) and started the group again at the end (OFFSET_OVERFLOW).
    OFFSET_CORRECTED = "offset_corrected"
    # Ours: a committed offset was below its queue's min offset (retention deleted the messages before
    # the group consumed them) and the broker moved the group to the min offset (OFFSET_TOO_SMALL).
    RETENTION_SKIP = "retention_skip"


# Sources that say what the serving broker of a replica group holds. A slave's synced copy lags its
# master's by design; it rolls the group back only once it is served, which shows as MASTER_TAKEOVER
# or a CLIENT_COMMIT of that broker.
SERVING_SOURCES = (
    Source.CLIENT_COMMIT,
    Source.PRE_ONLINE_SYNC,
    Source.OPERATOR_RESET,
    Source.MASTER_TAKEOVER,
    Source.OFFSET_CORRECTED,
    Source.RETENTION_SKIP,
)


class Cause(StrEnum):
    FAILOVER_STALE_REPLICA = "failover_stale_replica"  # a clean election of a replica whose offsets lagged
    FORMER_MASTER_WITHOUT_PRE_ONLINE = "former_master_without_pre_online_sync"  # seed 000 §"reverse synchronization"
    UNCLEAN_ELECTION = "unclean_election"  # a replica outside the SyncStateSet was elected
    UNKNOWN = "unknown"


class FindingKind(StrEnum):
    ROLLBACK = "rollback"
    BEYOND_MAX_OFFSET = "beyond_max_offset"
    RETENTION_SKIP = "retention_skip"

    @property
    def label(self) -> str:
        return _FINDING_KIND_LABELS[self]


_FINDING_KIND_LABELS = {
    FindingKind.ROLLBACK: "committed offset went back",
    FindingKind.BEYOND_MAX_OFFSET: "committed offset beyond the queue's max offset",
    FindingKind.RETENTION_SKIP: "messages deleted by retention before the group consumed them",
}


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One finding of an audit run: a rollback (spark_jobs/rules.py ``rollback_finding``) or commits
    beyond a queue's max offset (one per queue, broker and epoch)."""

    kind: FindingKind
    cause: Cause | None = None  # rollbacks only
    cluster_name: str
    consumer_group: str
    topic: str
    broker_name: str
    queue_id: int
    master_epoch: int  # the epoch the rollback belongs to (an election's, else the commit's)
    broker_id: int  # the broker that reported the rolled-back (or beyond-max) offset
    role: str
    source: str
    previous_broker_id: int | None = None
    previous_master_epoch: int | None = None
    previous_offset: int | None = None
    previous_at: datetime | None = None
    offset: int
    messages_again: int = 0
    messages_lost: int = 0  # retention skips: messages deleted before the group consumed them
    queue_max_offset: int | None = None
    excess: int | None = None  # offset - queue max offset (beyond-max findings)
    event_count: int = 1
    detected_at: datetime
    last_seen_at: datetime | None = None
    transition_id: int | None = None  # the election (controlplane_transition) a rollback is attributed to
    operator_initiated: bool = False  # that election was an operator's switch-over

    def values(self) -> tuple:
        """The values in FINDING_FIELDS order: a row of ``audits_finding`` without its run."""
        return tuple(getattr(self, name) for name in FINDING_FIELDS)

    def identity(self) -> tuple:
        """What tells two findings of one run apart (and orders them): the queue, the kind, the commit
        and the one before it."""
        previous = -1 if self.previous_offset is None else self.previous_offset
        q = (self.consumer_group, self.topic, self.broker_name, self.queue_id)
        return (*q, self.kind, self.detected_at, self.master_epoch, self.broker_id, self.offset, previous)


FINDING_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Finding))


def queue_key(consumer_group: str, topic: str, broker_name: str, queue_id: int) -> int:
    """A 64-bit key of the queue (group, topic, brokerName, queueId), stored with every event so the
    audit sorts on one long instead of three strings. A collision can only hide a rollback, never
    invent one (the job compares the names too); for a million queues its odds are ~3e-8."""
    raw = f"{consumer_group}\x1f{topic}\x1f{broker_name}\x1f{queue_id}".encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)


# (column, Arrow type name). Order is the files' column order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("queue_key", "int64"),  # queue_key(consumer_group, topic, broker_name, queue_id)
    ("cluster_name", "string"),
    ("broker_name", "string"),
    ("broker_id", "int64"),
    ("role", "string"),
    ("master_epoch", "int64"),
    ("consumer_group", "string"),
    ("topic", "string"),
    ("queue_id", "int32"),
    ("offset", "int64"),
    ("queue_max_offset", "int64"),  # null when the reporter does not know it
    ("source", "string"),
    ("ts_ms", "int64"),  # the broker's clock when the offset was committed
    ("dv_state_version", "int64"),
    ("dv_counter", "int64"),
    ("dv_timestamp", "int64"),
    ("received_ms", "int64"),  # the control plane's clock when the batch arrived
)
PARTITION_COLUMN = "event_date"
NULLABLE = frozenset({"queue_max_offset"})


def filesystem(uri: str):
    """(pyarrow filesystem, base path) of the store: a local folder, or any URI pyarrow reads
    (s3://, gs://, hdfs://, file://). The control plane writes and the audit reads through it."""
    import os

    from pyarrow import fs

    if "://" in uri:
        return fs.FileSystem.from_uri(uri)
    return fs.LocalFileSystem(), os.path.abspath(uri)


def arrow_schema():
    import pyarrow as pa

    return pa.schema([pa.field(name, getattr(pa, kind)(), nullable=name in NULLABLE) for name, kind in COLUMNS])
