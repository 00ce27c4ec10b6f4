"""Controller transitions: one Postgres transaction each, ``SELECT ... FOR UPDATE`` on the broker
set's row first, then the pure rule, then the state and history writes; pushes after commit.

Any number of web processes and Celery workers may call these at once: the row lock makes the
transitions of one broker set take turns, and different sets proceed in parallel.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from functools import partial

from django.db import connection, transaction
from django.utils import timezone

from controlplane.models import Isolation
from controlplane.push import send_frames
from mqrules.codes import ResponseCode as C

from . import liveness, metrics, selectors
from .config_store import current_config
from .core import rules
from .core.preview import isolated_as_dead
from .core.state import Decision, LiveInfo, SyncState, Trigger, candidates
from .core.state import Replica as ReplicaValue
from .models import Replica, ReplicaGroup, Transition, TransitionKind
from .signals import announce_group_changed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    code: int
    state: SyncState | None  # the state after the call (unchanged when nothing was written)
    detail: str = ""
    extra: dict | None = None

    @property
    def ok(self) -> bool:
        return self.code == C.SUCCESS


_G, _R, _T = ReplicaGroup._meta.db_table, Replica._meta.db_table, Transition._meta.db_table
_I = Isolation._meta.db_table

# One round trip: lock the set's row and read its replicas, each with whether an operator isolated it
# (the lock is on the group row only).
_LOCK_SQL = f"""
SELECT g.id, g.cluster_name, g.master_broker_id, g.master_epoch, g.sync_state_set_epoch, g.next_assign_broker_id,
       r.broker_id, r.broker_address, r.register_check_code, r.in_sync_state_set, i.id IS NOT NULL
FROM {_G} g LEFT JOIN {_R} r ON r.group_id = g.id
     LEFT JOIN {_I} i ON i.cluster_name = g.cluster_name AND i.broker_addr = r.broker_address
WHERE g.broker_name = %s ORDER BY r.broker_id FOR UPDATE OF g
"""


# The replicas of each broker set as this process last locked it. An election reads their heartbeats
# (Redis) before it queues for the row lock, so the lock covers the Postgres statements only. That early
# view is used if the set still has the same replicas and the view is at most EARLY_VIEW_MAX_AGE_S old
# (well inside one heartbeat interval: the decision sees the beats it would have seen under the lock);
# otherwise the view is read again under the lock.
EARLY_VIEW_MAX_AGE_S = 0.2
_last_locked: dict[str, tuple[str, frozenset[int]]] = {}


@dataclass(frozen=True)
class _EarlyView:
    replicas: tuple[str, frozenset[int]]
    live: dict[int, LiveInfo]
    read_at: float


def _early_view(broker_name: str, now_ms: int | None = None) -> _EarlyView | None:
    replicas = _last_locked.get(broker_name)
    if replicas is None:
        return None
    return _EarlyView(replicas, liveness.live_infos(replicas[0], broker_name, replicas[1], now_ms), time.monotonic())


@dataclass(frozen=True)
class _Locked:
    gid: int | None
    state: SyncState | None
    isolated: frozenset[int] = frozenset()

    def live(self, early: _EarlyView | None = None, now_ms: int | None = None) -> dict[int, LiveInfo]:
        """The heartbeat view of the set (at ``now_ms``; None: Redis's clock); an isolated replica
        counts as dead: never a candidate."""
        if self.state is None:
            return {}
        replicas = _last_locked[self.state.broker_name] = (self.state.cluster_name, self.state.replica_ids)
        if early is not None and early.replicas == replicas and time.monotonic() - early.read_at <= EARLY_VIEW_MAX_AGE_S:
            return isolated_as_dead(early.live, self.isolated)
        return selectors.live_view(self.state, self.isolated, now_ms)


def _locked(broker_name: str) -> _Locked:
    """Lock a broker set (``SELECT ... FOR UPDATE``) and load its state; no state if unknown."""
    with connection.cursor() as cur:
        cur.execute(_LOCK_SQL, [broker_name])
        rows = cur.fetchall()
    if not rows:
        return _Locked(None, None)
    gid, cluster, master, master_epoch, ss_epoch, next_id = rows[0][:6]
    members = [r for r in rows if r[6] is not None]
    replicas = tuple(ReplicaValue(r[6], r[7], r[8]) for r in members)
    in_set = frozenset(r[6] for r in members if r[9])
    state = SyncState(cluster, broker_name, master, master_epoch, ss_epoch, in_set, replicas, next_id)
    return _Locked(gid, state, frozenset(r[6] for r in members if r[10]))


def _store(gid: int, old: SyncState, new: SyncState) -> None:
    """The general write, for the rare operations (ids, addresses, clean-up)."""
    ReplicaGroup.objects.filter(pk=gid).update(
        cluster_name=new.cluster_name,
        master_broker_id=new.master_broker_id,
        master_epoch=new.master_epoch,
        sync_state_set_epoch=new.sync_state_set_epoch,
        next_assign_broker_id=new.next_assign_broker_id,
        updated_at=timezone.now(),
    )
    old_replicas = {r.broker_id: r for r in old.replicas}
    new_ids = new.replica_ids
    gone = [i for i in old_replicas if i not in new_ids]
    if gone:
        Replica.objects.filter(group_id=gid, broker_id__in=gone).delete()
    for r in new.replicas:
        in_set = r.broker_id in new.sync_state_set
        before = old_replicas.get(r.broker_id)
        if before is None:
            Replica.objects.create(
                group_id=gid,
                broker_id=r.broker_id,
                broker_address=r.broker_address,
                register_check_code=r.register_check_code,
                in_sync_state_set=in_set,
            )
        elif before != r or (r.broker_id in old.sync_state_set) != in_set:
            Replica.objects.filter(group_id=gid, broker_id=r.broker_id).update(
                broker_address=r.broker_address, register_check_code=r.register_check_code, in_sync_state_set=in_set
            )


# Elections and alters change only the group's master and epochs and the membership flags: one
# statement writes those and the history row (one round trip under the lock instead of five).
_TRANSITION_COLUMNS = (
    "cluster_name",
    "broker_name",
    "kind",
    "trigger",
    "requested_by",
    "requested_broker_id",
    "old_master_broker_id",
    "new_master_broker_id",
    "old_master_epoch",
    "new_master_epoch",
    "old_sync_state_set_epoch",
    "new_sync_state_set_epoch",
    "old_sync_state_set",
    "new_sync_state_set",
    "candidates",
    "response_code",
    "detail",
)
_TRANSITION_SQL = f"""
WITH g AS (
  UPDATE {_G} SET master_broker_id = %(master)s, master_epoch = %(new_master_epoch)s,
         sync_state_set_epoch = %(new_sync_state_set_epoch)s, updated_at = now()
  WHERE id = %(gid)s
), r AS (
  UPDATE {_R} SET in_sync_state_set = (broker_id = ANY(%(new_sync_state_set)s::bigint[]))
  WHERE group_id = %(gid)s AND in_sync_state_set <> (broker_id = ANY(%(new_sync_state_set)s::bigint[]))
)
INSERT INTO {_T} ({", ".join(_TRANSITION_COLUMNS)}, created_at)
VALUES (%(cluster_name)s, %(broker_name)s, %(kind)s, %(trigger)s, %(requested_by)s, %(requested_broker_id)s,
        %(old_master_broker_id)s, %(new_master_broker_id)s, %(old_master_epoch)s, %(new_master_epoch)s,
        %(old_sync_state_set_epoch)s, %(new_sync_state_set_epoch)s, %(old_sync_state_set)s::bigint[],
        %(new_sync_state_set)s::bigint[], %(candidates)s::jsonb, %(response_code)s, %(detail)s, now())
"""


def _transition_values(
    kind: str,
    trigger: Trigger,
    old: SyncState,
    new: SyncState,
    decision: Decision,
    *,
    requested_by: str,
    requested_broker_id: int | None,
    live: dict[int, LiveInfo] | None = None,
) -> dict:
    return {
        "cluster_name": new.cluster_name,
        "broker_name": new.broker_name,
        "kind": kind,
        "trigger": trigger.value,
        "requested_by": requested_by[:255],
        "requested_broker_id": requested_broker_id,
        "old_master_broker_id": old.master_broker_id,
        "new_master_broker_id": new.master_broker_id,
        "old_master_epoch": old.master_epoch,
        "new_master_epoch": new.master_epoch,
        "old_sync_state_set_epoch": old.sync_state_set_epoch,
        "new_sync_state_set_epoch": new.sync_state_set_epoch,
        "old_sync_state_set": sorted(old.sync_state_set),
        "new_sync_state_set": sorted(new.sync_state_set),
        "candidates": [c.as_dict() for c in candidates(old, live)] if live is not None else [],
        "response_code": int(decision.code),
        "detail": decision.detail,
    }


def _write_transition(gid: int, *args, **kw) -> None:
    """Elections and alters: the group's new state and its history row in one statement (the arguments
    are ``_transition_values``')."""
    values = _transition_values(*args, **kw)
    values.update(gid=gid, master=values["new_master_broker_id"], candidates=json.dumps(values["candidates"]))
    with connection.cursor() as cur:
        cur.execute(_TRANSITION_SQL, values)


def _record(*args, **kw) -> None:
    """The history row of a rare operation written with ``_store`` (the arguments are ``_transition_values``')."""
    Transition.objects.create(**_transition_values(*args, **kw))


def role_change_payload(state: SyncState) -> dict:
    """``NOTIFY_BROKER_ROLE_CHANGED`` (1008): header plus the SyncStateSet body."""
    return {
        "masterAddress": state.master_address,
        "masterEpoch": state.master_epoch,
        "syncStateSetEpoch": state.sync_state_set_epoch,
        "masterBrokerId": state.master_broker_id,
        "syncStateSet": sorted(state.sync_state_set),
    }


def notify_role_changed(state: SyncState, live: dict[int, LiveInfo] | None = None) -> int:
    """Push the new roles to every live member of the broker set (best effort; brokers also poll).
    ``live`` is the heartbeat view the decision used, when the caller has it."""
    if not current_config().notify_broker_role_changed:
        return 0
    live = live if live is not None else selectors.live_view(state)
    members = [liveness.member(state.cluster_name, state.broker_name, i) for i, info in live.items() if info.alive]
    return send_frames(liveness.connections(members).values(), "notify_broker_role_changed", role_change_payload(state))


# --- operations ----------------------------------------------------------------------------------


def elect_master(
    broker_name: str,
    *,
    broker_id: int | None = None,
    designate: bool = False,
    trigger: Trigger = Trigger.BROKER,
    requested_by: str = "",
    now_ms: int | None = None,
) -> Outcome:
    """``CONTROLLER_ELECT_MASTER`` (reference §1.5), judging liveness at ``now_ms`` (None: Redis's clock)."""
    request = rules.ElectRequest(broker_name, broker_id, designate, trigger)
    enable_unclean = current_config().enable_elect_unclean_master
    early = _early_view(broker_name, now_ms)
    started = time.perf_counter()
    with transaction.atomic():
        locked = _locked(broker_name)
        gid, state, live = locked.gid, locked.state, locked.live(early, now_ms)
        decision = rules.elect_master(state, live, request, enable_unclean=enable_unclean)
        if decision.new_state is not None:
            _write_transition(
                gid,
                TransitionKind.ELECT,
                trigger,
                state,
                decision.new_state,
                decision,
                requested_by=requested_by,
                requested_broker_id=broker_id,
                live=live,
            )
            if decision.code == C.SUCCESS:
                transaction.on_commit(partial(notify_role_changed, decision.new_state, live), robust=True)
                transaction.on_commit(partial(announce_group_changed, broker_name), robust=True)
    metrics.election_observed(trigger, decision.code, time.perf_counter() - started)  # in memory: no I/O
    if decision.new_state is None:
        return Outcome(decision.code, state, decision.detail)
    log.info(
        "elect %s by %s: code %s, master %s, epoch %s",
        broker_name,
        trigger.value,
        decision.code,
        decision.new_state.master_broker_id,
        decision.new_state.master_epoch,
    )
    return Outcome(decision.code, decision.new_state, decision.detail)


def alter_sync_state_set(
    broker_name: str,
    *,
    master_broker_id: int,
    master_epoch: int,
    new_sync_state_set: set[int],
    sync_state_set_epoch: int,
    requested_by: str = "",
) -> Outcome:
    """``CONTROLLER_ALTER_SYNC_STATE_SET`` (reference §1.7), fenced by both epochs."""
    request = rules.AlterRequest(broker_name, master_broker_id, master_epoch, frozenset(new_sync_state_set), sync_state_set_epoch)
    with transaction.atomic():
        locked = _locked(broker_name)
        gid, state = locked.gid, locked.state
        alive = [i for i, info in locked.live().items() if info.alive]
        decision = rules.alter_sync_state_set(state, alive, request)
        if decision.new_state is None:
            return Outcome(decision.code, state, decision.detail)
        _write_transition(
            gid,
            TransitionKind.ALTER,
            Trigger.BROKER,
            state,
            decision.new_state,
            decision,
            requested_by=requested_by,
            requested_broker_id=master_broker_id,
        )
        transaction.on_commit(partial(announce_group_changed, broker_name), robust=True)
    return Outcome(decision.code, decision.new_state)


def get_next_broker_id(broker_name: str) -> int:
    """``CONTROLLER_GET_NEXT_BROKER_ID``: a read, as in RocketMQ (two new replicas may hear the same id;
    the first apply wins and the other retries)."""
    row = ReplicaGroup.objects.filter(broker_name=broker_name).first()
    return rules.next_broker_id(selectors.state_of(row) if row else None)


def apply_broker_id(
    cluster_name: str, broker_name: str, broker_id: int, register_check_code: str, requested_by: str = ""
) -> Outcome:
    """``CONTROLLER_APPLY_BROKER_ID`` (reference §1.8), idempotent for the same check code."""
    with transaction.atomic():
        ReplicaGroup.objects.bulk_create(
            [ReplicaGroup(cluster_name=cluster_name, broker_name=broker_name)], ignore_conflicts=True
        )
        locked = _locked(broker_name)
        gid, state = locked.gid, locked.state
        decision = rules.apply_broker_id(
            state if state.replicas else None, cluster_name, broker_name, broker_id, register_check_code
        )
        if decision.new_state is not None:
            _store(gid, state, decision.new_state)
            _record(
                TransitionKind.APPLY_BROKER_ID,
                Trigger.BROKER,
                state,
                decision.new_state,
                decision,
                requested_by=requested_by,
                requested_broker_id=broker_id,
            )
        elif not state.replicas:
            ReplicaGroup.objects.filter(pk=gid).delete()  # the set only existed for this refused call
        return Outcome(decision.code, decision.new_state or state, decision.detail)


def register_broker(broker_name: str, broker_id: int, broker_address: str, requested_by: str = "") -> Outcome:
    """``CONTROLLER_REGISTER_BROKER``: the current master (if alive) and SyncStateSet; updates a moved address."""
    with transaction.atomic():
        locked = _locked(broker_name)
        gid, state = locked.gid, locked.state
        decision = rules.register_broker(state, broker_id, broker_address, locked.live())
        if decision.new_state is not None:
            _store(gid, state, decision.new_state)
            _record(
                TransitionKind.UPDATE_ADDRESS,
                Trigger.BROKER,
                state,
                decision.new_state,
                decision,
                requested_by=requested_by,
                requested_broker_id=broker_id,
            )
        return Outcome(decision.code, decision.new_state or state, decision.detail, decision.extra)


def clean_broker_data(
    broker_name: str, broker_ids: set[int] | None, *, clean_living: bool = False, requested_by: str = ""
) -> Outcome:
    """``CLEAN_BROKER_DATA`` (reference §1.9): no epoch moves."""
    with transaction.atomic():
        locked = _locked(broker_name)
        gid, state = locked.gid, locked.state
        alive = [i for i, info in locked.live().items() if info.alive]
        decision = rules.clean_broker_data(
            state, frozenset(broker_ids) if broker_ids else None, clean_living=clean_living, alive=alive
        )
        if decision.new_state is None:
            return Outcome(decision.code, state, decision.detail)
        _record(
            TransitionKind.CLEAN,
            Trigger.OPERATOR,
            state,
            decision.new_state,
            decision,
            requested_by=requested_by,
            requested_broker_id=None,
        )
        if decision.extra.get("drop_set"):
            ReplicaGroup.objects.filter(pk=gid).delete()
        else:
            _store(gid, state, decision.new_state)
    return Outcome(decision.code, decision.new_state)


def heartbeat(beat: liveness.Beat) -> None:
    """``BROKER_HEARTBEAT`` to the controller: Redis only (reference §1.10)."""
    liveness.heartbeat(beat)


# --- inactivity -----------------------------------------------------------------------------------


def on_broker_inactive(cluster_name: str, broker_name: str, broker_id: int | None, now_ms: int | None = None) -> Outcome | None:
    """``ControllerManager.onBrokerInactive``: elect when the master went away (or when called by the
    inactive-master scan with no id), up to electMasterMaxRetryCount tries. Never while the control
    plane cannot hear most brokers (the blindness guard, controlplane/blindness.py): what it cannot
    hear is its own outage, not the master's, and the election waits until it hears again. ``now_ms``:
    the instant liveness is judged at (None: Redis's clock)."""
    if broker_id is not None:
        row = ReplicaGroup.objects.filter(broker_name=broker_name).first()
        if row is None or row.master_broker_id != broker_id:
            return None
    if liveness.hearing(now_ms).blind_now:
        log.warning("not electing for %s: the control plane cannot hear most brokers", broker_name)
        return None
    outcome = None
    for _ in range(current_config().elect_master_max_retry_count):
        outcome = elect_master(broker_name, trigger=Trigger.CONTROLLER, requested_by="controller", now_ms=now_ms)
        if outcome.code in (C.SUCCESS, C.CONTROLLER_MASTER_STILL_EXIST, C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED):
            break
    return outcome


def scan_inactive_brokers(now_ms: int | None = None) -> list[str]:
    """``scanNotActiveBroker`` of the controller: drop expired heartbeat entries and react.
    ``now_ms``: the instant expiry is judged at (None: Redis's clock, see liveness); time the control
    plane could not hear is not counted (``liveness.expired_members``)."""
    liveness.hearing(now_ms, look=True)  # every beat tick, whatever the interval: the blindness guard's record
    if not liveness.acquire_slot("scan-brokers", current_config().scan_not_active_broker_interval):
        return []
    expired = liveness.expired_members(now_ms)
    liveness.forget(expired)
    for value in expired:
        cluster, name, broker_id = liveness.split_member(value)
        try:
            on_broker_inactive(cluster, name, broker_id, now_ms)
        except Exception:
            log.exception("reacting to inactive broker %s failed", value)
    return expired


def scan_inactive_masters(now_ms: int | None = None) -> list[str]:
    """``scanNeedReelectBrokerSets``: sets whose master is dead while a replica lives, and sets left
    with no master once an electable replica lives, judged at ``now_ms`` (None: Redis's clock, see
    liveness), as is the election that follows. Not while the control plane is
    blind, nor before its hearing record is one heartbeat timeout old: a master missing from the
    table after a Redis restart is unknown, not dead."""
    hearing = liveness.hearing(now_ms, look=True)
    if not liveness.acquire_slot("scan-masters", current_config().scan_inactive_master_interval):
        return []
    if hearing.blind_now or not hearing.warm(liveness.DEFAULT_TIMEOUT_MILLIS):
        return []
    elected = []
    unclean = current_config().enable_elect_unclean_master
    every = selectors.states()
    live_by_set = liveness.live_infos_many([(s.cluster_name, s.broker_name, s.replica_ids) for s in every], now_ms)
    for state in every:
        if rules.need_reelect(state, live_by_set[state.broker_name], enable_unclean=unclean):
            outcome = on_broker_inactive(state.cluster_name, state.broker_name, None, now_ms)
            if outcome is not None and outcome.ok:
                elected.append(state.broker_name)
    return elected
