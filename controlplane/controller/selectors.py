"""Reads of the controller's state."""

from __future__ import annotations

from .core.state import Replica as ReplicaValue
from .core.state import SyncState
from .models import Replica, ReplicaGroup, Transition


def state_of(row: ReplicaGroup, replicas=None) -> SyncState:
    if replicas is None:
        replicas = list(Replica.objects.filter(group=row).order_by("broker_id"))
    return SyncState(
        cluster_name=row.cluster_name,
        broker_name=row.broker_name,
        master_broker_id=row.master_broker_id,
        master_epoch=row.master_epoch,
        sync_state_set_epoch=row.sync_state_set_epoch,
        sync_state_set=frozenset(r.broker_id for r in replicas if r.in_sync_state_set),
        replicas=tuple(ReplicaValue(r.broker_id, r.broker_address, r.register_check_code)
                       for r in sorted(replicas, key=lambda r: r.broker_id)),
        next_assign_broker_id=row.next_assign_broker_id,
    )


def replica_info(broker_name: str) -> SyncState | None:
    row = ReplicaGroup.objects.filter(broker_name=broker_name).first()
    return state_of(row) if row else None


def states(broker_names: list[str] | None = None, *, with_master_only: bool = False) -> list[SyncState]:
    rows = ReplicaGroup.objects.prefetch_related("replicas").order_by("broker_name")
    if broker_names is not None:
        rows = rows.filter(broker_name__in=broker_names)
    if with_master_only:
        rows = rows.filter(master_broker_id__isnull=False)
    return [state_of(r, list(r.replicas.all())) for r in rows]


def history(broker_name: str | None = None, limit: int = 200):
    qs = Transition.objects.order_by("-id")
    if broker_name:
        qs = qs.filter(broker_name=broker_name)
    return list(qs[:limit])
