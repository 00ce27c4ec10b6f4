"""How many more replica losses a controller-mode broker set can take before writes stop (the rule:
``controlplane.controller.core.headroom``), from the controller's state of the set, which replicas it
hears (as getSyncStateData judges alive; an isolated replica counts as lost: never elected, refusing
writes) and the master's own configuration (its ``broker_status`` report: inSyncReplicas,
minInSyncReplicas, allAckInSyncStateSet). Without a report RocketMQ's defaults (1, 1, false) are used,
and the answer says so (``config.known`` false). ``of_states`` judges many sets with one read of each
source (the metrics' thousand sets), ``of_state`` one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.controller import selectors as ctl_selectors
from controlplane.controller.core.headroom import Headroom, losses_before_writes_stop
from controlplane.controller.core.preview import isolated_as_dead
from controlplane.controller.core.state import SyncState
from nameserver import broker_status


@dataclass(frozen=True)
class QuorumSettings:
    """The master's keys the rule needs, RocketMQ's defaults where unknown (reference §2.7)."""

    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    all_ack_in_sync_state_set: bool = False
    known: bool = False
    broker_id: int | None = None  # whose report they come from
    broker_addr: str | None = None
    stale: bool | None = None

    def as_dict(self) -> dict:
        return {
            "inSyncReplicas": self.in_sync_replicas,
            "minInSyncReplicas": self.min_in_sync_replicas,
            "allAckInSyncStateSet": self.all_ack_in_sync_state_set,
            "known": self.known,
            "fromBrokerId": self.broker_id,
            "fromBrokerAddr": self.broker_addr,
            "stale": self.stale,
        }


def _int(text: object, default: int) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        return default


def quorum_settings(state: SyncState) -> QuorumSettings:
    """The master's inSyncReplicas / minInSyncReplicas / allAckInSyncStateSet from its latest status
    report (``stale`` says whether it is recent); a set without a master, or a master that never
    reported (as a broker of this set), gets the defaults."""
    return _settings_of(state, broker_status.summaries(_masters([state])))


def _masters(states: Sequence[SyncState]) -> list[tuple[str, str]]:
    return [(s.cluster_name, s.master_address) for s in states if s.master_address is not None]


def _settings_of(state: SyncState, reports: dict[tuple[str, str], dict]) -> QuorumSettings:
    """``quorum_settings`` from the masters' status reports (``broker_status.summaries``)."""
    addr = state.master_address
    row = reports.get((state.cluster_name, addr)) if addr is not None else None
    if row is None or row["brokerName"] != state.broker_name:
        return QuorumSettings()
    config = row.get("config") or {}
    defaults = QuorumSettings()
    return QuorumSettings(
        in_sync_replicas=_int(config.get("inSyncReplicas", defaults.in_sync_replicas), defaults.in_sync_replicas),
        min_in_sync_replicas=_int(config.get("minInSyncReplicas", defaults.min_in_sync_replicas), defaults.min_in_sync_replicas),
        all_ack_in_sync_state_set=str(config.get("allAckInSyncStateSet", "false")).strip().lower() == "true",
        known=True,
        broker_id=row["brokerId"],
        broker_addr=row["brokerAddr"],
        stale=row["stale"],
    )


@dataclass(frozen=True)
class SetHeadroom:
    """One set judged: its headroom, the settings it used, the replicas the controller hears (its
    heartbeat table, isolation aside), those isolated, and those alive as elections see them (heard,
    not isolated)."""

    state: SyncState
    headroom: Headroom
    settings: QuorumSettings
    heard: frozenset[int]
    isolated: frozenset[int]
    alive: frozenset[int]


def of_states(states: Sequence[SyncState]) -> list[SetHeadroom]:
    """The headroom of each set, with one read of each source for all of them: the isolations (one
    query), the controller's heartbeat table (one Redis round trip) and the status reports (one)."""
    if not states:
        return []
    views = ctl_selectors.heartbeat_views(list(states))
    reports = broker_status.summaries(_masters(states))
    out = []
    for state in states:
        live, isolated = views[state.broker_name]
        alive = frozenset(i for i, info in isolated_as_dead(live, isolated).items() if info.alive)
        settings = _settings_of(state, reports)
        h = losses_before_writes_stop(
            state.sync_state_set,
            alive,
            state.master_broker_id,
            settings.in_sync_replicas,
            settings.min_in_sync_replicas,
            settings.all_ack_in_sync_state_set,
        )
        heard = frozenset(i for i, info in live.items() if info.alive)
        out.append(SetHeadroom(state, h, settings, heard, isolated, alive))
    return out


def of_state(state: SyncState) -> tuple[Headroom, QuorumSettings, frozenset[int], frozenset[int]]:
    """(headroom, the settings it used, the replicas alive, those isolated) of one set."""
    judged = of_states([state])[0]
    return judged.headroom, judged.settings, judged.alive, judged.isolated


def headroom(broker_name: str) -> dict | None:
    """The headroom of a controller-managed set, or None when the controller does not know it."""
    state = ctl_selectors.replica_info(broker_name)
    if state is None:
        return None
    h, settings, alive, isolated = of_state(state)
    return {
        "clusterName": state.cluster_name,
        "brokerName": state.broker_name,
        "masterBrokerId": state.master_broker_id,
        "masterEpoch": state.master_epoch,
        "syncStateSet": sorted(state.sync_state_set),
        "aliveBrokerIds": sorted(alive),
        "isolatedBrokerIds": sorted(isolated),
        "losses": h.losses,
        "writes": h.writes.value,
        "reason": h.reason,
        "aliveInSync": h.alive_in_sync,
        "deadInSync": h.dead_in_sync,
        "aliveOutside": h.alive_outside,
        "ackLosses": h.ack_losses,
        "ackReason": h.ack_reason,
        "config": settings.as_dict(),
        "configKnown": settings.known,
    }
