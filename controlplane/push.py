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
    """Send one frame to each websocket channel; returns how many were sent."""
    layer = get_channel_layer()
    sent = 0
    for channel in channel_names:
        try:
            async_to_sync(layer.send)(channel, {"type": PUSH_MESSAGE_TYPE, "frame_type": frame_type, "payload": payload})
            sent += 1
        except Exception:  # a full or vanished channel must not break the caller's flow
            log.warning("push of %s to %s failed", frame_type, channel, exc_info=True)
    return sent
