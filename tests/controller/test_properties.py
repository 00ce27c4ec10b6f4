"""Property tests of the pure controller core: random sequences of operations applied to an in-memory
model (one ``SyncState`` per broker set, a heartbeat table), recording history rows the way
``services._record`` does, then ``invariants.check`` and the epoch rules of reference §9."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.controller.core import invariants
from controlplane.controller.core.rules import (
    AlterRequest,
    ElectRequest,
    alter_sync_state_set,
    apply_broker_id,
    clean_broker_data,
    elect_master,
    elect_policy,
    next_broker_id,
    register_broker,
)
from controlplane.controller.core.state import INT_MAX, Decision, LiveInfo, Replica, SyncState, Trigger
from mqrules.codes import ResponseCode as C

pytestmark = pytest.mark.unit

CLUSTER = "c1"
NAMES = ("b1", "b2")
IDS = st.integers(min_value=0, max_value=6)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# --- operations -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApplyId:
    name: str
    broker_id: int | None  # None: the id getNextBrokerId advertises
    variant: int  # the millis part of the check code: equal variants are retries of one broker


@dataclass(frozen=True)
class Register:
    name: str
    broker_id: int
    host: int


@dataclass(frozen=True)
class Heartbeat:
    name: str
    broker_id: int
    alive: bool
    epoch: int
    max_offset: int
    priority: int


@dataclass(frozen=True)
class Elect:
    name: str
    trigger: Trigger
    broker_id: int | None
    designate: bool
    unclean: bool


@dataclass(frozen=True)
class Alter:
    name: str
    master: int | None  # None: the current master
    master_epoch_delta: int
    sync_state_set_epoch_delta: int
    shape: str  # "alive": master + the live registered replicas but `ids`; "toggle": current set ^ `ids`; "explicit": `ids`
    ids: frozenset[int]


@dataclass(frozen=True)
class Clean:
    name: str
    ids: frozenset[int] | None
    clean_living: bool


names = st.sampled_from(NAMES)
deltas = st.sampled_from([0, 0, 0, 0, -1, 1])
id_sets = st.frozensets(st.integers(min_value=1, max_value=6), max_size=4)

elects = st.one_of(
    st.builds(Elect, names, st.just(Trigger.BROKER), IDS, st.just(False), st.booleans()),
    st.builds(Elect, names, st.just(Trigger.CONTROLLER), st.none(), st.just(False), st.booleans()),
    st.builds(Elect, names, st.just(Trigger.OPERATOR), IDS, st.sampled_from([True, True, False]), st.booleans()),
)
alters = st.builds(
    Alter,
    names,
    st.one_of(st.none(), st.none(), IDS),
    deltas,
    deltas,
    st.sampled_from(["alive", "alive", "toggle", "explicit"]),
    id_sets,
)
operations = st.one_of(
    st.builds(ApplyId, names, st.one_of(st.none(), IDS), st.integers(min_value=0, max_value=2)),
    st.builds(Register, names, IDS, st.integers(min_value=0, max_value=1)),
    st.builds(
        Heartbeat,
        names,
        st.integers(min_value=1, max_value=7),
        st.sampled_from([True, True, False]),
        st.integers(min_value=0, max_value=3),
        st.sampled_from([0, 1, 100, 2**31, 2**32 + 1, 2**40]),
        st.sampled_from([0, 1, INT_MAX]),
    ),
    elects,
    alters,
    st.builds(Clean, names, st.one_of(st.none(), id_sets), st.sampled_from([False, False, False, True])),
)


# --- the model ------------------------------------------------------------------------------------


def address(broker_id: int, host: int = 0) -> str:
    return f"10.0.{host}.{broker_id}:10911"


@dataclass
class Model:
    states: dict[str, SyncState | None] = field(default_factory=lambda: dict.fromkeys(NAMES))
    live: dict[str, dict[int, LiveInfo]] = field(default_factory=lambda: {n: {} for n in NAMES})
    rows: list[invariants.Row] = field(default_factory=list)
    incarnation: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NAMES, 0))
    masters: dict[tuple[str, int, int], int] = field(default_factory=dict)  # (name, incarnation, epoch) -> master

    def alive(self, name: str) -> set[int]:
        return {i for i, info in self.live[name].items() if info.alive}

    def record(self, kind: str, old: SyncState, new: SyncState, decision: Decision) -> None:
        """As ``services._record`` writes a ``Transition``."""
        self.rows.append(
            invariants.Row(
                id=len(self.rows) + 1,
                broker_name=new.broker_name,
                kind=kind,
                old_master_broker_id=old.master_broker_id,
                new_master_broker_id=new.master_broker_id,
                old_master_epoch=old.master_epoch,
                new_master_epoch=new.master_epoch,
                old_sync_state_set_epoch=old.sync_state_set_epoch,
                new_sync_state_set_epoch=new.sync_state_set_epoch,
                new_sync_state_set=tuple(sorted(new.sync_state_set)),
                detail=decision.detail,
            )
        )

    def commit(self, kind: str, name: str, decision: Decision, *, old: SyncState | None = None) -> None:
        before = self.states[name]
        old = old or before
        new = decision.new_state
        self.record(kind, old, new, decision)
        if decision.extra.get("drop_set"):
            self.states[name] = None
            self.incarnation[name] += 1
        else:
            self.states[name] = new
            assert new.master_epoch >= old.master_epoch, "masterEpoch went back"
            assert new.sync_state_set_epoch >= old.sync_state_set_epoch, "syncStateSetEpoch went back"
            if new.master_broker_id is not None:
                key = (name, self.incarnation[name], new.master_epoch)
                holder = self.masters.setdefault(key, new.master_broker_id)
                assert holder == new.master_broker_id, f"two masters in epoch {key}: {holder}, {new.master_broker_id}"

    # each step returns the decision; the state changes only through `commit`

    def step(self, op) -> Decision:
        name = op.name
        state = self.states[name]
        handler = getattr(self, "_" + type(op).__name__.lower())
        decision = handler(op, state)
        # a refused call (any code but SUCCESS, and 2004 which records "no master") has nothing to write
        if decision.code not in (C.SUCCESS, C.CONTROLLER_MASTER_NOT_AVAILABLE):
            assert decision.new_state is None, f"refused with code {decision.code} but a new state"
        if decision.new_state is None:
            assert self.states[name] is state, "a call without a new state changed the state"
        return decision

    def _applyid(self, op: ApplyId, state: SyncState | None) -> Decision:
        broker_id = next_broker_id(state) if op.broker_id is None else op.broker_id
        check_code = f"{address(broker_id)};{op.variant}"
        d = apply_broker_id(state, CLUSTER, op.name, broker_id, check_code)
        known = state is not None and bool(state.replicas)
        existing = state.replica(broker_id) if known else None
        if broker_id < 1 or (not known and broker_id != 1) or (existing and existing.register_check_code != check_code):
            assert d.code == C.CONTROLLER_BROKER_ID_INVALID
        else:
            assert d.code == C.SUCCESS
        if existing is not None or d.code != C.SUCCESS:
            assert d.new_state is None  # refused, or an idempotent retry: nothing to write
            return d
        old = state if known else SyncState(CLUSTER, op.name)
        new = d.new_state
        assert new.replica(broker_id) == Replica(broker_id, address(broker_id), check_code)
        assert new.next_assign_broker_id == (old.next_assign_broker_id + 1 if known else 2)
        assert new.replica_ids == old.replica_ids | {broker_id}
        self.commit("apply_broker_id", op.name, d, old=old)
        return d

    def _register(self, op: Register, state: SyncState | None) -> Decision:
        d = register_broker(state, op.broker_id, address(op.broker_id, op.host), self.live[op.name])
        if state is None or state.replica(op.broker_id) is None:
            assert d.code == C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
            return d
        assert d.code == C.SUCCESS
        assert d.extra["master_alive"] is (state.master_broker_id in self.alive(op.name))
        if state.replica(op.broker_id).broker_address == address(op.broker_id, op.host):
            assert d.new_state is None
            return d
        new = d.new_state
        assert new.replica(op.broker_id).register_check_code == state.replica(op.broker_id).register_check_code
        self.commit("update_address", op.name, d)
        return d

    def _heartbeat(self, op: Heartbeat, state: SyncState | None) -> Decision:
        """The controller's heartbeat table (§1.10): (epoch, maxOffset) only move forward."""
        table = self.live[op.name]
        prev = table.get(op.broker_id)
        epoch, offset = op.epoch, op.max_offset
        if prev is not None and not (epoch > prev.epoch or (epoch == prev.epoch and offset > prev.max_offset)):
            epoch, offset = prev.epoch, prev.max_offset
        table[op.broker_id] = LiveInfo(
            op.broker_id,
            op.alive,
            epoch=epoch,
            max_offset=offset,
            election_priority=op.priority,
            broker_address=address(op.broker_id),
        )
        return Decision(C.SUCCESS)

    def _elect(self, op: Elect, state: SyncState | None) -> Decision:
        request = ElectRequest(op.name, op.broker_id, op.designate, op.trigger)
        d = elect_master(state, self.live[op.name], request, enable_unclean=op.unclean)
        if state is None or not state.replicas:
            assert d.code == C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
            return d
        alive = self.alive(op.name)
        first = state.master_epoch == 0 and op.broker_id is not None and state.replica(op.broker_id) is not None
        if d.code == C.CONTROLLER_MASTER_STILL_EXIST:
            assert state.master_broker_id is not None and state.master_broker_id in alive and not first
        elif d.code == C.SUCCESS:
            new = d.new_state
            m = new.master_broker_id
            assert m is not None and m != state.master_broker_id and state.replica(m) is not None
            assert (new.master_epoch, new.sync_state_set_epoch) == (state.master_epoch + 1, state.sync_state_set_epoch + 1)
            assert new.sync_state_set == {m}
            if first:
                assert m == op.broker_id
            else:
                assert m in alive, "elected a replica that is not alive"
                if not op.unclean:
                    assert m in state.sync_state_set, "unclean election while it is disabled"
                if op.designate:
                    assert m == op.broker_id
            self.commit("elect", op.name, d)
        elif d.code == C.CONTROLLER_MASTER_NOT_AVAILABLE:
            assert op.trigger is Trigger.CONTROLLER and not first
            new = d.new_state
            assert new.master_broker_id is None and new.master_epoch == state.master_epoch + 1
            assert (new.sync_state_set, new.sync_state_set_epoch) == (state.sync_state_set, state.sync_state_set_epoch)
            pool = state.replica_ids if op.unclean else state.sync_state_set
            assert not (pool & alive), "a replica was electable"
            self.commit("elect", op.name, d)
        else:
            assert d.code == C.CONTROLLER_ELECT_MASTER_FAILED and op.trigger is not Trigger.CONTROLLER
        return d

    def _alter(self, op: Alter, state: SyncState | None) -> Decision:
        current = state or SyncState(CLUSTER, op.name)
        master = current.master_broker_id if op.master is None else op.master
        if op.shape == "alive":
            new_set = ((self.alive(op.name) & current.replica_ids) - op.ids) | ({current.master_broker_id} - {None})
        elif op.shape == "toggle":
            new_set = current.sync_state_set ^ op.ids
        else:
            new_set = op.ids
        request = AlterRequest(
            op.name,
            master if master is not None else -1,
            current.master_epoch + op.master_epoch_delta,
            new_set,
            current.sync_state_set_epoch + op.sync_state_set_epoch_delta,
        )
        d = alter_sync_state_set(state, self.alive(op.name), request)
        if d.code != C.SUCCESS:
            return d
        fresh = op.master_epoch_delta == 0 and op.sync_state_set_epoch_delta == 0
        assert fresh and state.master_broker_id == request.master_broker_id, "a fenced alter was applied"
        new = d.new_state
        assert new.sync_state_set == new_set and state.master_broker_id in new_set
        assert new_set <= state.replica_ids and new_set <= self.alive(op.name)
        assert (new.master_epoch, new.sync_state_set_epoch) == (state.master_epoch, state.sync_state_set_epoch + 1)
        self.commit("alter", op.name, d)
        return d

    def _clean(self, op: Clean, state: SyncState | None) -> Decision:
        d = clean_broker_data(state, op.ids, clean_living=op.clean_living, alive=self.alive(op.name))
        if d.code != C.SUCCESS:
            assert d.code == C.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
            return d
        assert op.clean_living or not (set(op.ids or ()) & self.alive(op.name)), "cleaned a living broker"
        new = d.new_state
        assert (new.master_epoch, new.sync_state_set_epoch) == (state.master_epoch, state.sync_state_set_epoch)
        self.commit("clean", op.name, d)
        return d

    def check_state(self) -> None:
        for name, s in self.states.items():
            if s is None:
                continue
            assert s.master_broker_id is None or s.master_broker_id in s.sync_state_set, "SyncStateSet lacks the master"
            assert s.sync_state_set <= s.replica_ids, "SyncStateSet holds an unregistered id"
            assert all(i >= 1 for i in s.replica_ids) and len(s.replica_ids) == len(s.replicas)
            assert s.master_epoch >= 0 and s.sync_state_set_epoch >= 0
            assert s.broker_name == name and s.cluster_name == CLUSTER


@SETTINGS
@given(st.lists(operations, max_size=60))
def test_random_operation_sequences_keep_the_invariants(ops):
    model = Model()
    for op in ops:
        model.step(op)
        model.check_state()
    assert invariants.check(model.rows) == []


# Sequences that register replicas 1..4 of both sets and start their heartbeats first, so that
# elections and alters act on existing sets with live replicas much more often.
bootstrap = st.lists(st.builds(ApplyId, names, st.none(), st.just(0)), min_size=6, max_size=8)
beats = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2), st.sampled_from([0, 50, 2**33]), st.sampled_from([1, INT_MAX])),
    min_size=2 * 4,
    max_size=2 * 4,
)


@SETTINGS
@given(bootstrap, beats, st.lists(st.one_of(elects, alters, alters, operations), min_size=10, max_size=60))
def test_registered_sets_under_random_operations_keep_the_invariants(registered, beating, ops):
    model = Model()
    heartbeats = [
        Heartbeat(name, i, True, *beat)
        for (name, i), beat in zip([(n, i) for n in NAMES for i in range(1, 5)], beating, strict=True)
    ]
    for op in (*registered, *heartbeats, *ops):
        model.step(op)
        model.check_state()
    assert invariants.check(model.rows) == []


# --- the election against a reading of reference §1.5/§1.6 ---------------------------------------


def better(a: LiveInfo, b: LiveInfo) -> bool:
    """DefaultElectPolicy's comparator, written out: epoch desc, maxOffset desc, priority asc; ties by id."""
    if a.epoch != b.epoch:
        return a.epoch > b.epoch
    if a.max_offset != b.max_offset:
        return a.max_offset > b.max_offset
    if a.election_priority != b.election_priority:
        return a.election_priority < b.election_priority
    return a.broker_id < b.broker_id


def oracle_try_elect(pool, live, old_master, preferred):
    alive = [live[i] for i in sorted(pool) if i in live and live[i].alive]
    if not alive:
        return None
    ids = {i.broker_id for i in alive}
    if old_master in ids and preferred in (None, old_master):
        return old_master
    if preferred is not None:
        return preferred if preferred in ids else None
    best = alive[0]
    for info in alive[1:]:
        if better(info, best):
            best = info
    return best.broker_id


@st.composite
def election_inputs(draw):
    replica_ids = draw(st.frozensets(st.integers(min_value=1, max_value=6), min_size=1))
    sset = draw(st.frozensets(st.sampled_from(sorted(replica_ids))))
    master = draw(st.one_of(st.none(), st.sampled_from(sorted(sset)))) if sset else None
    state = SyncState(
        CLUSTER,
        "b1",
        master,
        draw(st.integers(min_value=0, max_value=5)),
        draw(st.integers(min_value=0, max_value=5)),
        sset,
        tuple(Replica(i, address(i), f"{address(i)};0") for i in sorted(replica_ids)),
        max(replica_ids) + 1,
    )
    if state.master_epoch == 0:
        state = replace(state, master_broker_id=None, sync_state_set=frozenset())
    live = {}
    for i in draw(st.frozensets(st.integers(min_value=1, max_value=7))):
        live[i] = LiveInfo(
            i,
            draw(st.booleans()),
            epoch=draw(st.integers(min_value=-1, max_value=2)),
            max_offset=draw(st.sampled_from([-1, 0, 7, 2**31 - 1, 2**31, 2**32 + 7, 2**63 - 1])),
            election_priority=draw(st.sampled_from([0, 1, INT_MAX])),
        )
    trigger = draw(st.sampled_from(list(Trigger)))
    broker_id = None if trigger is Trigger.CONTROLLER else draw(st.integers(min_value=0, max_value=7))
    designate = trigger is Trigger.OPERATOR and draw(st.booleans())
    return state, live, ElectRequest("b1", broker_id, designate, trigger), draw(st.booleans())


@SETTINGS
@given(election_inputs())
def test_elect_master_follows_the_reference_algorithm(inputs):
    state, live, request, unclean = inputs
    # §1.5 steps 2–7 (with our port's extra rule: the first-time requester must be a registered replica)
    new_master = None
    if state.master_epoch == 0 and request.broker_id is not None and state.replica(request.broker_id) is not None:
        new_master = request.broker_id
    if new_master is None:
        preferred = request.broker_id if request.designate else None
        new_master = oracle_try_elect(state.sync_state_set, live, state.master_broker_id, preferred)
        if new_master is None and unclean:
            new_master = oracle_try_elect(state.replica_ids, live, state.master_broker_id, preferred)
        assert elect_policy(state, live, enable_unclean=unclean, preferred=preferred) == new_master
    d = elect_master(state, live, request, enable_unclean=unclean)
    if new_master is not None and new_master == state.master_broker_id:
        assert (d.code, d.new_state) == (C.CONTROLLER_MASTER_STILL_EXIST, None)
    elif new_master is not None:
        assert d.code == C.SUCCESS
        assert (d.new_state.master_broker_id, d.new_state.sync_state_set) == (new_master, {new_master})
    elif request.broker_id is None:
        assert d.code == C.CONTROLLER_MASTER_NOT_AVAILABLE and d.new_state.master_broker_id is None
    else:
        assert (d.code, d.new_state) == (C.CONTROLLER_ELECT_MASTER_FAILED, None)
