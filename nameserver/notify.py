"""Pushes from the nameserver to brokers over their websocket (after commit, best effort).

A broker that misses a push learns the same thing from its periodic member-group poll, as in
RocketMQ (reference §5.1), so a lost push only delays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from . import liveness
from .core.values import MinBrokerIdChange

log = logging.getLogger(__name__)

# The message type the broker websocket consumer handles (``BrokerConsumer.broker_push``).
PUSH_MESSAGE_TYPE = "broker.push"


def push(cluster_name: str, broker_addrs: Iterable[str], frame_type: str, payload: dict) -> int:
    """Send one frame to each listed broker that has a websocket open; returns how many were sent."""
    members = [liveness.member(cluster_name, a) for a in broker_addrs]
    channels = liveness.connections(members)
    if not channels:
        return 0
    layer = get_channel_layer()
    sent = 0
    for channel in channels.values():
        try:
            async_to_sync(layer.send)(channel, {"type": PUSH_MESSAGE_TYPE, "frame_type": frame_type, "payload": payload})
            sent += 1
        except Exception:  # a full or vanished channel must not break the caller's flow
            log.warning("push of %s to %s failed", frame_type, channel, exc_info=True)
    return sent


def min_broker_id_changed(change: MinBrokerIdChange) -> int:
    return push(change.cluster_name, change.recipients, "notify_min_broker_id_change", change.header())
