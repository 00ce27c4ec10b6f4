"""The controller's business rules (``ReplicasInfoManager``, ``DefaultElectPolicy``; reference §1.5–§1.9).

Each function takes the current state of one broker set (None when it is unknown), what the
heartbeat table says about its replicas, and a request; it returns a ``Decision``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from mqrules.codes import ResponseCode as C

from .state import FIRST_BROKER_CONTROLLER_ID, Decision, LiveInfo, Replica, SyncState, Trigger

DROPPED_SET = "dropped broker set"  # a clean-up that removed the whole set: its epochs start again


# --- election (§1.5, §1.6) -----------------------------------------------------------------------


def rank_key(info: LiveInfo) -> tuple:
    """Highest epoch, then highest maxOffset, then lowest electionPriority, then lowest id.
    Exact integer comparison (the Java port subtracts longs into an int; reference §1.6)."""
    return (-info.epoch, -info.max_offset, info.election_priority, info.broker_id)


def _try_elect(pool: Iterable[int], live: Mapping[int, LiveInfo], old_master: int | None, preferred: int | None) -> int | None:
    """The old master while it is alive (blind time not counted: the guard never deposes for silence
    it could not hear); otherwise only a replica with evidence of life (its last heartbeat within its
    own timeout, no discount) may be chosen."""
    pool = [i for i in pool if i in live]
    if old_master in pool and live[old_master].alive and (preferred is None or preferred == old_master):
        return old_master
    electable = [live[i] for i in pool if live[i].electable]
    if preferred is not None:
        return preferred if any(i.broker_id == preferred for i in electable) else None
    return min(electable, key=rank_key).broker_id if electable else None


def elect_policy(state: SyncState, live: Mapping[int, LiveInfo], *, enable_unclean: bool, preferred: int | None) -> int | None:
    """``DefaultElectPolicy.elect``: the SyncStateSet first, then (unclean) every replica."""
    chosen = _try_elect(state.sync_state_set, live, state.master_broker_id, preferred)
    if chosen is None and enable_unclean:
        chosen = _try_elect(state.replica_ids, live, state.master_broker_id, preferred)
    return chosen


@dataclass(frozen=True)
class ElectRequest:
    broker_name: str
    broker_id: int | None = None  # requester (broker) or designated replica (operator); None: controller
    designate: bool = False
    trigger: Trigger = Trigger.BROKER


def elect_master(
    state: SyncState | None, live: Mapping[int, LiveInfo], request: ElectRequest, *, enable_unclean: bool
) -> Decision:
    if state is None or not state.replicas:
        return Decision(C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, detail=f"broker set {request.broker_name} is unknown")
    requester = request.broker_id if request.broker_id is not None and request.broker_id >= 0 else None
    new_master: int | None = None
    # Step 3: the very first election goes to whoever asks, no liveness or membership check.
    if state.master_epoch == 0 and requester is not None:
        if state.replica(requester) is not None:
            new_master = requester
    if new_master is None:
        preferred = requester if request.designate else None
        new_master = elect_policy(state, live, enable_unclean=enable_unclean, preferred=preferred)

    if new_master is not None and new_master == state.master_broker_id:
        return Decision(C.CONTROLLER_MASTER_STILL_EXIST, detail="the master is still alive")
    if new_master is not None:
        new_state = state.with_master(new_master).with_sync_state_set(frozenset({new_master}))
        return Decision(C.SUCCESS, new_state)
    if requester is None:  # controller-triggered: master becomes null, the epoch still moves (§1.5 step 7)
        return Decision(
            C.CONTROLLER_MASTER_NOT_AVAILABLE,
            state.with_master(None),
            detail="no replica could be elected; the broker set has no master",
        )
    return Decision(C.CONTROLLER_ELECT_MASTER_FAILED, detail="no eligible replica (alive and in the SyncStateSet)")


# --- alterSyncStateSet (§1.7) ---------------------------------------------------------------------


@dataclass(frozen=True)
class AlterRequest:
    broker_name: str
    master_broker_id: int
    master_epoch: int
    new_sync_state_set: frozenset[int]
    sync_state_set_epoch: int


def alter_sync_state_set(state: SyncState | None, alive: Iterable[int], request: AlterRequest) -> Decision:
    """The ordered checks of reference §1.7; the first that fails gives the code."""
    alive = set(alive)
    new_set = frozenset(request.new_sync_state_set)
    if state is None or not state.replicas:
        return Decision(C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, detail=f"broker set {request.broker_name} is unknown")
    if new_set == state.sync_state_set:
        return Decision(C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, detail="the new SyncStateSet equals the current one")
    if state.master_broker_id is None or state.master_broker_id != request.master_broker_id:
        return Decision(
            C.CONTROLLER_INVALID_MASTER, detail=f"the master is {state.master_broker_id}, not {request.master_broker_id}"
        )
    if request.master_epoch != state.master_epoch:
        return Decision(
            C.CONTROLLER_FENCED_MASTER_EPOCH, detail=f"masterEpoch {request.master_epoch} is not the current {state.master_epoch}"
        )
    if request.sync_state_set_epoch != state.sync_state_set_epoch:
        return Decision(
            C.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            detail=f"syncStateSetEpoch {request.sync_state_set_epoch} is not the current {state.sync_state_set_epoch}",
        )
    unknown = sorted(new_set - state.replica_ids)
    if unknown:
        return Decision(C.CONTROLLER_INVALID_REPLICAS, detail=f"not registered in this broker set: {unknown}")
    dead = sorted(i for i in new_set if i not in alive)
    if dead:
        return Decision(C.CONTROLLER_BROKER_NOT_ALIVE, detail=f"not alive: {dead}")
    if state.master_broker_id not in new_set:
        return Decision(C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, detail="the new SyncStateSet lacks the master")
    return Decision(C.SUCCESS, state.with_sync_state_set(new_set))


# --- broker ids and registration (§1.8) ----------------------------------------------------------


def next_broker_id(state: SyncState | None) -> int:
    return FIRST_BROKER_CONTROLLER_ID if state is None or not state.replicas else state.next_assign_broker_id


def apply_broker_id(
    state: SyncState | None, cluster_name: str, broker_name: str, broker_id: int, register_check_code: str
) -> Decision:
    if broker_id < FIRST_BROKER_CONTROLLER_ID:
        return Decision(C.CONTROLLER_BROKER_ID_INVALID, detail=f"controller ids start at {FIRST_BROKER_CONTROLLER_ID}")
    address = register_check_code.split(";", 1)[0]
    replica = Replica(broker_id, address, register_check_code)
    if state is None or not state.replicas:
        if broker_id != FIRST_BROKER_CONTROLLER_ID:
            return Decision(
                C.CONTROLLER_BROKER_ID_INVALID,
                detail=f"a new broker set starts with id {FIRST_BROKER_CONTROLLER_ID}, not {broker_id}",
            )
        base = state or SyncState(cluster_name, broker_name)
        return Decision(C.SUCCESS, replace(base, replicas=(replica,), next_assign_broker_id=broker_id + 1))
    existing = state.replica(broker_id)
    if existing is None:
        # nextAssignBrokerId grows by one per accepted new id, whatever id it was (reference §1.8).
        return Decision(
            C.SUCCESS, replace(state, replicas=(*state.replicas, replica), next_assign_broker_id=state.next_assign_broker_id + 1)
        )
    if existing.register_check_code == register_check_code:
        return Decision(C.SUCCESS)  # an idempotent retry after a crash: nothing to write
    return Decision(C.CONTROLLER_BROKER_ID_INVALID, detail=f"broker id {broker_id} is taken by another replica")


def register_broker(state: SyncState | None, broker_id: int, broker_address: str, live: Mapping[int, LiveInfo]) -> Decision:
    """``registerBroker`` ("registerSuccess"): the current master if it is alive, the SyncStateSet,
    and an address update when the replica moved."""
    me = state.replica(broker_id) if state is not None else None
    if state is None or me is None:
        return Decision(
            C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, detail=f"broker id {broker_id} is not registered; apply for an id first"
        )
    master = state.master_broker_id
    master_alive = master is not None and master in live and live[master].alive
    new_state = None
    if me.broker_address != broker_address:
        replicas = tuple(replace(r, broker_address=broker_address) if r.broker_id == broker_id else r for r in state.replicas)
        new_state = replace(state, replicas=replicas)
    return Decision(C.SUCCESS, new_state, extra={"master_alive": master_alive})


def clean_broker_data(
    state: SyncState | None, ids: frozenset[int] | None, *, clean_living: bool, alive: Iterable[int]
) -> Decision:
    """``cleanBrokerData``: remove ids (no epoch bump) or the whole set (reference §1.9)."""
    if state is None or not state.replicas:
        return Decision(C.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, detail="unknown broker set")
    alive = set(alive)
    if not clean_living:
        if not ids and state.master_broker_id is not None:
            return Decision(
                C.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, detail="the broker set still has a master; name the ids to clean"
            )
        living = sorted(i for i in (ids or ()) if i in alive)
        if living:
            return Decision(C.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, detail=f"still alive: {living}")
    if not ids:
        return Decision(
            C.SUCCESS,
            replace(state, replicas=(), sync_state_set=frozenset(), master_broker_id=None),
            detail=DROPPED_SET,
            extra={"drop_set": True},
        )
    replicas = tuple(r for r in state.replicas if r.broker_id not in ids)
    new_set = state.sync_state_set - ids
    # A set exists only while both its replica table and its SyncStateSet do (reference §1.2, §1.4):
    # emptying either drops the whole set.
    if not replicas or (state.sync_state_set and not new_set):
        return Decision(
            C.SUCCESS,
            replace(state, replicas=(), sync_state_set=frozenset(), master_broker_id=None),
            detail=DROPPED_SET,
            extra={"drop_set": True},
        )
    # Ours: a cleaned master id no longer names a master (upstream keeps pointing at the removed id).
    master = None if state.master_broker_id in ids else state.master_broker_id
    new_state = replace(state, replicas=replicas, sync_state_set=new_set, master_broker_id=master)
    return Decision(C.SUCCESS, new_state, extra={"drop_set": False})


def need_reelect(state: SyncState, live: Mapping[int, LiveInfo], *, enable_unclean: bool = False) -> bool:
    """``scanNeedReelectBrokerSets``: a master that is not alive while some replica is; and (ours) a
    set left with no master once a replica the election policy would take is alive again, so that it
    does not wait for a broker's own poll. A set whose election would find nobody is left alone: a
    controller-triggered election that elects nobody still moves the epoch."""
    if state.master_broker_id is None:
        return elect_policy(state, live, enable_unclean=enable_unclean, preferred=None) is not None
    master = live.get(state.master_broker_id)
    if master is not None and master.alive:
        return False
    return any(info.alive for i, info in live.items() if state.replica(i) is not None)
