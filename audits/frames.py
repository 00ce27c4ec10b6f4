"""The audits' frame on the broker websocket: ``offset_events``, a broker's batch of consumer-offset
commits for the event store (docs/websocket.md). Registered with ``controlplane.ws`` in
``AuditsConfig.ready``."""

from __future__ import annotations

from controlplane import ws

from . import event_store
from .events import parse_offset_events


async def offset_events(connection: ws.BrokerConsumer, payload: dict) -> dict:
    batch = parse_offset_events(payload)
    await connection.check_binding(clusters=[batch.cluster_name], broker_sets=[batch.broker_name], remember=True)
    # The batches of all sockets of this process go to the Redis buffer in one call per round trip.
    await ws.coalescer("offset_events", ws.without_results(event_store.append_async)).submit(batch)
    return {"accepted": len(batch.events)}


def register_frames() -> None:
    ws.register("offset_events", offset_events)
