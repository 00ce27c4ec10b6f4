"""Pushes from the nameserver to brokers over their websocket (after commit, best effort).

A broker that misses a push learns the same thing from its periodic member-group poll, as in
RocketMQ (reference §5.1), so a lost push only delays.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.push import send_frames

from . import liveness
from .core.values import MinBrokerIdChange


def push(cluster_name: str, broker_addrs: Iterable[str], frame_type: str, payload: dict) -> int:
    """Send one frame to each listed broker that has a websocket open; returns how many were sent."""
    channels = liveness.connections([liveness.member(cluster_name, a) for a in broker_addrs])
    return send_frames(channels.values(), frame_type, payload)


def min_broker_id_changed(change: MinBrokerIdChange) -> int:
    return push(change.cluster_name, change.recipients, "notify_min_broker_id_change", change.header())
