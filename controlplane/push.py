"""Frames pushed to brokers over their websocket (the ``BrokerConsumer.broker_push`` handler).

Best effort, after commit: brokers also poll, so a lost push only delays (ARCHITECTURE §1).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

PUSH_MESSAGE_TYPE = "broker.push"


def send_frames(channel_names: Iterable[str], frame_type: str, payload: dict) -> int:
    """Send one frame to each websocket channel; returns how many were sent. One hop into the
    event loop for all of them (each async_to_sync costs milliseconds)."""
    channels = list(channel_names)
    if not channels:
        return 0
    return async_to_sync(_send_all)(channels, {"type": PUSH_MESSAGE_TYPE, "frame_type": frame_type, "payload": payload})


async def _send_all(channels: list[str], message: dict) -> int:
    layer = get_channel_layer()
    sent = 0
    for channel in channels:
        try:
            await layer.send(channel, message)
            sent += 1
        except Exception:  # a full or vanished channel must not break the caller's flow
            log.warning("push of %s to %s failed", message["frame_type"], channel, exc_info=True)
    return sent
