"""Building offset-event batches and writing them to the event store the way the control plane does."""

from __future__ import annotations

import time
import uuid

from audits import event_store
from audits.events import OffsetEvent, OffsetEventBatch


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(
    broker_name: str,
    broker_id: int,
    role: str,
    epoch: int,
    events: list[tuple],
    cluster: str = "c1",
    data_version: tuple[int, int, int] = (0, 0, 0),
) -> OffsetEventBatch:
    """``events``: (group, topic, queueId, offset, source, ts_ms[, queueMaxOffset])."""
    return OffsetEventBatch(
        cluster,
        broker_name,
        broker_id,
        role,
        epoch,
        data_version,
        tuple(OffsetEvent(*e[:6], e[6] if len(e) > 6 else None) for e in events),
    )


def store(uri: str, *batches: OffsetEventBatch) -> list[str]:
    """One Parquet file per date with these batches, as a flush writes them."""
    rows = event_store.rows_by_date([(now_ms(), b) for b in batches])
    return event_store.write_parquet(uri, f"part-{uuid.uuid4().hex}-00000", rows)


def wire(b: OffsetEventBatch) -> dict:
    """The batch as a broker sends it (docs/websocket.md ``offset_events``)."""
    return {
        "clusterName": b.cluster_name,
        "brokerName": b.broker_name,
        "brokerId": b.broker_id,
        "role": b.role,
        "masterEpoch": b.master_epoch,
        "dataVersion": dict(zip(("stateVersion", "counter", "timestamp"), b.data_version, strict=True)),
        "events": [
            {
                "consumerGroup": e.consumer_group,
                "topic": e.topic,
                "queueId": e.queue_id,
                "offset": e.offset,
                "source": e.source,
                "timestampMs": e.ts_ms,
                **({"queueMaxOffset": e.queue_max_offset} if e.queue_max_offset is not None else {}),
            }
            for e in b.events
        ],
    }
