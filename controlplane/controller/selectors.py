"""Reads of the controller's state."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from controlplane.isolation import isolated_addrs

from . import liveness
from .config_store import current_config
from .core.preview import ElectionPreview, isolated_as_dead, preview_election
from .core.state import LiveInfo, SyncState
from .core.state import Replica as ReplicaValue
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
        replicas=tuple(
            ReplicaValue(r.broker_id, r.broker_address, r.register_check_code)
            for r in sorted(replicas, key=lambda r: r.broker_id)
        ),
        next_assign_broker_id=row.next_assign_broker_id,
    )


@contextmanager
def one_snapshot() -> Iterator[None]:
    """The reads inside see the database as of one moment. A set's state is two queries (its row,
    then its replicas); read apart, a transition committed between them showed one epoch's
    SyncStateSet with another's members. Inside a transaction already (a transition reading the
    row it locked) the reads are left as they are."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def replica_info(broker_name: str) -> SyncState | None:
    with one_snapshot():
        row = ReplicaGroup.objects.filter(broker_name=broker_name).first()
        return state_of(row) if row else None


_GROUP_FIELDS = (
    "id",
    "cluster_name",
    "broker_name",
    "master_broker_id",
    "master_epoch",
    "sync_state_set_epoch",
    "next_assign_broker_id",
)
_REPLICA_FIELDS = ("group_id", "broker_id", "broker_address", "register_check_code", "in_sync_state_set")


def states(broker_names: list[str] | None = None) -> list[SyncState]:
    """The state of every set (of the named ones), by brokerName: two queries of plain rows in one
    snapshot (model instances made the thousand sets of the scans and the metrics cost 10x more)."""
    groups = ReplicaGroup.objects.order_by("broker_name")
    replicas = Replica.objects.order_by("group_id", "broker_id")
    if broker_names is not None:
        groups = groups.filter(broker_name__in=broker_names)
        replicas = replicas.filter(group__broker_name__in=broker_names)
    with one_snapshot():
        group_rows = list(groups.values_list(*_GROUP_FIELDS))
        by_group: dict[int, list[tuple]] = {}
        for r in replicas.values_list(*_REPLICA_FIELDS):
            by_group.setdefault(r[0], []).append(r)
    out = []
    for gid, cluster, name, master, master_epoch, ss_epoch, next_id in group_rows:
        members = by_group.get(gid, [])
        out.append(
            SyncState(
                cluster_name=cluster,
                broker_name=name,
                master_broker_id=master,
                master_epoch=master_epoch,
                sync_state_set_epoch=ss_epoch,
                sync_state_set=frozenset(r[1] for r in members if r[4]),
                replicas=tuple(ReplicaValue(r[1], r[2], r[3]) for r in members),
                next_assign_broker_id=next_id,
            )
        )
    return out


def history(broker_name: str | None = None, limit: int = 200, *, cluster_name: str | None = None):
    qs = Transition.objects.order_by("-id")
    if broker_name:
        qs = qs.filter(broker_name=broker_name)
    if cluster_name:
        qs = qs.filter(cluster_name=cluster_name)
    return list(qs[:limit])


def broker_set_clusters(broker_names: list[str]) -> list[tuple[str, str]]:
    """(brokerName, clusterName) of the named sets the controller knows: its reader for the token
    binding (``controlplane.auth.register_broker_set_reader``)."""
    return list(ReplicaGroup.objects.filter(broker_name__in=broker_names).values_list("broker_name", "cluster_name"))


def replica_addrs() -> set[tuple[str, str]]:
    """(clusterName, brokerAddress) of every replica the controller knows."""
    return set(Replica.objects.values_list("group__cluster_name", "broker_address"))


def isolated_ids(state: SyncState, isolated: set[tuple[str, str]] | None = None) -> frozenset[int]:
    """The replicas of a set that an operator isolated (the ground ``Isolation`` table, by address).
    ``isolated``: every (cluster, address) isolated, when the caller already read them (``isolated_addrs()``)."""
    pairs = isolated_addrs(state.cluster_name) if isolated is None else isolated
    if not pairs:
        return frozenset()
    return frozenset(r.broker_id for r in state.replicas if (state.cluster_name, r.broker_address) in pairs)


def live_view(state: SyncState | None, isolated: frozenset[int] | None = None, now_ms: int | None = None) -> dict[int, LiveInfo]:
    """The heartbeat view of a set as elections see it (at ``now_ms``; None: Redis's clock): an isolated
    replica counts as dead. ``isolated``: the isolated ids when the caller already has them (the
    locked read has)."""
    if state is None:
        return {}
    live = liveness.live_infos(state.cluster_name, state.broker_name, state.replica_ids, now_ms)
    return isolated_as_dead(live, isolated_ids(state) if isolated is None else isolated)


def heartbeat_views(found: list[SyncState]) -> dict[str, tuple[dict[int, LiveInfo], frozenset[int]]]:
    """Per set, its heartbeat table (isolation not applied: ``live_view`` applies it) and its isolated
    replicas, for many sets in one query and one Redis round trip."""
    if not found:
        return {}
    isolated = isolated_addrs()
    live_by_set = liveness.live_infos_many([(s.cluster_name, s.broker_name, s.replica_ids) for s in found])
    return {s.broker_name: (live_by_set[s.broker_name], isolated_ids(s, isolated)) for s in found}


def election_preview(broker_name: str, broker_id: int | None) -> ElectionPreview | None:
    """What electing ``broker_id`` (or the controller's choice, when None) would do now; None if the
    set is unknown. Decided by the same rule as ``services.elect_master``, nothing is written."""
    state = replica_info(broker_name)
    if state is None:
        return None
    return preview_election(state, live_view(state), broker_id, enable_unclean=current_config().enable_elect_unclean_master)


def sync_state_data(broker_names: list[str]) -> dict[str, dict]:
    """CONTROLLER_GET_SYNC_STATE_DATA (1006): ``BrokerReplicasInfo.replicasInfoTable`` of the named
    sets the controller knows (unknown names absent, as ``ReplicasInfoManager.getSyncStateData``
    skips them), each replica with whether its heartbeat is alive. Served by REST and remoting."""
    out = {}
    found = states(broker_names)
    # One Redis round trip and one hearing view for every set asked for.
    live_by_set = liveness.live_infos_many([(st.cluster_name, st.broker_name, st.replica_ids) for st in found])
    for state in found:
        live = live_by_set[state.broker_name]

        def identity(r: ReplicaValue, state: SyncState = state, live: dict[int, LiveInfo] = live) -> dict:
            return {
                "brokerName": state.broker_name,
                "brokerId": r.broker_id,
                "brokerAddress": r.broker_address,
                "alive": bool(live.get(r.broker_id) and live[r.broker_id].alive),
            }

        out[state.broker_name] = {
            "masterBrokerId": state.master_broker_id,
            "masterAddress": state.master_address,
            "masterEpoch": state.master_epoch,
            "syncStateSetEpoch": state.sync_state_set_epoch,
            "inSyncReplicas": [identity(r) for r in state.replicas if r.broker_id in state.sync_state_set],
            "notInSyncReplicas": [identity(r) for r in state.replicas if r.broker_id not in state.sync_state_set],
        }
    return out


def metadata(host: str) -> dict:
    """CONTROLLER_GET_METADATA_INFO (1005) as this process answers it: Postgres is the consensus point,
    so every control-plane process is a leader (brokers may call any of them). ``host``: how the
    caller reached this process."""
    return {
        "group": "postgres",
        "controllerLeaderId": f"{socket.gethostname()}:{os.getpid()}",
        "controllerLeaderAddress": host,
        "isLeader": True,
        "peers": "",
    }
