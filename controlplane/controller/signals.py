"""What the controller announces to the floors above it, which subscribe (it never calls them).

``replica_group_changed`` (sender: ``ReplicaGroup``, argument ``broker_name``) is sent after a
transition of a broker set commits: an election, an alter of the SyncStateSet. It is sent in the
thread that made the transition, so a receiver must be cheap: note the name and do its work elsewhere
(the dashboard publishes from a thread of its own, throttled)."""

from __future__ import annotations

import logging

from django.dispatch import Signal

from .models import ReplicaGroup

log = logging.getLogger(__name__)

replica_group_changed = Signal()


def announce_group_changed(broker_name: str) -> None:
    """Tell the subscribers; a receiver that fails is logged, never raised into the transition's caller."""
    for _, result in replica_group_changed.send_robust(sender=ReplicaGroup, broker_name=broker_name):
        if isinstance(result, Exception):
            log.error("a receiver of replica_group_changed failed: %r", result, exc_info=result)
