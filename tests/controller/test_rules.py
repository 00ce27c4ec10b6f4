"""Reference §1.5–§1.10 (electMaster, DefaultElectPolicy, alterSyncStateSet, ids, registerBroker, clean,
scanNeedReelectBrokerSets): one row per rule of the pure controller core."""

from __future__ import annotations

import pytest

from controlplane.controller.core.rules import (
    DROPPED_SET,
    AlterRequest,
    ElectRequest,
    alter_sync_state_set,
    apply_broker_id,
    clean_broker_data,
    elect_master,
    elect_policy,
    need_reelect,
    next_broker_id,
    rank_key,
    register_broker,
)
from controlplane.controller.core.state import INT_MAX, LiveInfo, Replica, SyncState, Trigger
from mqrules.codes import ResponseCode as C

pytestmark = pytest.mark.unit

NAME = "b1"


def addr(i: int) -> str:
    return f"10.0.0.{i}:10911"


def code(i: int, millis: int = 1_700_000_000_000) -> str:
    return f"{addr(i)};{millis + i}"


def rep(i: int) -> Replica:
    return Replica(i, addr(i), code(i))


def state(
    replicas=(1, 2, 3), *, master: int | None = None, me: int = 0, sse: int = 0, sset=(), nxt: int | None = None
) -> SyncState:
    return SyncState(
        "c1",
        NAME,
        master,
        me,
        sse,
        frozenset(sset),
        tuple(rep(i) for i in replicas),
        nxt if nxt is not None else max(replicas, default=0) + 1,
    )


def L(i: int, alive: bool = True, epoch: int = 0, off: int = 0, prio: int = INT_MAX) -> LiveInfo:  # noqa: N802
    return LiveInfo(i, alive, epoch=epoch, max_offset=off, election_priority=prio, broker_address=addr(i))


def live(*alive: int, dead=()) -> dict[int, LiveInfo]:
    out = {i: L(i) for i in alive}
    out.update({i: L(i, alive=False) for i in dead})
    return out


def broker(i: int) -> ElectRequest:
    return ElectRequest(NAME, i, False, Trigger.BROKER)


def controller() -> ElectRequest:
    return ElectRequest(NAME, None, False, Trigger.CONTROLLER)


def operator(i: int) -> ElectRequest:
    return ElectRequest(NAME, i, True, Trigger.OPERATOR)


FRESH = state()  # registered replicas 1, 2, 3; never had a master (masterEpoch 0)
# master 1 at masterEpoch 3, SyncStateSet {1, 2} at syncStateSetEpoch 5, replica 3 outside the set
RUNNING = state(master=1, me=3, sse=5, sset=(1, 2))
NO_STATE = object()


def assert_elect_outcome(before: SyncState | None, d, code_: int, master) -> None:
    """The state transitions of reference §1.4 ELECT_MASTER_EVENT, checked for every row."""
    assert d.code == code_, d.detail
    if master is NO_STATE:
        assert d.new_state is None
        return
    new = d.new_state
    assert new is not None
    assert new.master_broker_id == master
    assert new.master_epoch == before.master_epoch + 1
    assert new.replicas == before.replicas and new.next_assign_broker_id == before.next_assign_broker_id
    if master is None:  # not elected: master null, masterEpoch+1, SyncStateSet and its epoch kept
        assert new.sync_state_set == before.sync_state_set
        assert new.sync_state_set_epoch == before.sync_state_set_epoch
    else:  # elected: SyncStateSet = {new}, syncStateSetEpoch+1
        assert new.sync_state_set == {master}
        assert new.sync_state_set_epoch == before.sync_state_set_epoch + 1


# --- §1.5 electMaster -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, lv, request_, unclean, code_, master",
    [
        # step 1
        pytest.param(
            None, {}, broker(1), False, C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, NO_STATE, id="step1-unknown-set-2010"
        ),
        pytest.param(
            None,
            {},
            controller(),
            True,
            C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            NO_STATE,
            id="step1-unknown-set-controller-triggered-2010",
        ),
        pytest.param(
            state(()),
            {},
            operator(1),
            False,
            C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            NO_STATE,
            id="step1-set-without-replicas-is-unknown-2010",
        ),
        # step 3: the first election goes to the requester, no liveness or membership check
        pytest.param(FRESH, {}, broker(2), False, C.SUCCESS, 2, id="step3-first-election-requester-without-heartbeat"),
        pytest.param(FRESH, live(dead=(1, 2, 3)), broker(2), False, C.SUCCESS, 2, id="step3-first-election-dead-requester"),
        pytest.param(
            FRESH,
            {1: L(1, epoch=9, off=10**9), 2: L(2, alive=False)},
            broker(2),
            False,
            C.SUCCESS,
            2,
            id="step3-first-election-ignores-ranking",
        ),
        pytest.param(FRESH, live(1), operator(3), False, C.SUCCESS, 3, id="step3-first-election-operator-requester"),
        # our port: the requester must be a registered replica, else the policy decides
        pytest.param(
            FRESH,
            live(1, 2, 3),
            broker(9),
            False,
            C.CONTROLLER_ELECT_MASTER_FAILED,
            NO_STATE,
            id="step3-port-first-election-unregistered-requester-falls-to-policy-2012",
        ),
        pytest.param(
            FRESH,
            {2: L(2, epoch=1), 3: L(3, epoch=2)},
            broker(9),
            True,
            C.SUCCESS,
            3,
            id="step3-port-first-election-unregistered-requester-policy-unclean",
        ),
        # step 3 (controller-triggered): no requester, so the policy decides even the first time
        pytest.param(
            FRESH,
            live(1, 2, 3),
            controller(),
            False,
            C.CONTROLLER_MASTER_NOT_AVAILABLE,
            None,
            id="step3-controller-first-election-through-policy-empty-set-2004",
        ),
        pytest.param(
            FRESH,
            {1: L(1, epoch=1), 2: L(2, epoch=2), 3: L(3, alive=False, epoch=5)},
            controller(),
            True,
            C.SUCCESS,
            2,
            id="step3-controller-first-election-through-policy-unclean",
        ),
        # step 5: the old master is alive
        pytest.param(
            RUNNING,
            live(1, 2, 3),
            broker(2),
            False,
            C.CONTROLLER_MASTER_STILL_EXIST,
            NO_STATE,
            id="step5-old-master-alive-broker-triggered-2011",
        ),
        pytest.param(
            RUNNING,
            {1: L(1, epoch=0), 2: L(2, epoch=7, off=10**12)},
            controller(),
            True,
            C.CONTROLLER_MASTER_STILL_EXIST,
            NO_STATE,
            id="step5-old-master-alive-beats-better-ranked-2011",
        ),
        pytest.param(
            RUNNING,
            live(1, 2),
            operator(1),
            False,
            C.CONTROLLER_MASTER_STILL_EXIST,
            NO_STATE,
            id="step5-designating-the-live-master-2011",
        ),
        # step 6: success
        pytest.param(RUNNING, live(2, 3, dead=(1,)), broker(2), False, C.SUCCESS, 2, id="step6-success-broker-triggered"),
        pytest.param(RUNNING, live(2, 3), controller(), False, C.SUCCESS, 2, id="step6-success-controller-triggered"),
        pytest.param(
            RUNNING, live(2, 3, dead=(1,)), broker(3), False, C.SUCCESS, 2, id="step6-requester-outside-set-gets-the-set-member"
        ),
        # step 7: nothing electable
        pytest.param(
            RUNNING,
            live(3, dead=(1, 2)),
            controller(),
            False,
            C.CONTROLLER_MASTER_NOT_AVAILABLE,
            None,
            id="step7-nobody-electable-controller-2004-master-null-epoch-moves-set-kept",
        ),
        pytest.param(
            state(master=None, me=4, sse=5, sset=(1, 2)),
            live(3),
            controller(),
            False,
            C.CONTROLLER_MASTER_NOT_AVAILABLE,
            None,
            id="step7-no-master-again-epoch-moves-again-2004",
        ),
        pytest.param(
            RUNNING,
            live(3, dead=(1, 2)),
            broker(3),
            False,
            C.CONTROLLER_ELECT_MASTER_FAILED,
            NO_STATE,
            id="step7-nobody-electable-broker-2012-no-state",
        ),
        pytest.param(
            RUNNING, {}, broker(2), False, C.CONTROLLER_ELECT_MASTER_FAILED, NO_STATE, id="step7-no-heartbeats-at-all-broker-2012"
        ),
        # consequences: designated elect
        pytest.param(
            RUNNING, live(1, 2, 3), operator(2), False, C.SUCCESS, 2, id="designated-moves-mastership-away-from-live-master"
        ),
        pytest.param(
            RUNNING,
            live(1, 3, dead=(2,)),
            operator(2),
            False,
            C.CONTROLLER_ELECT_MASTER_FAILED,
            NO_STATE,
            id="designated-not-alive-null-no-comparator-fallback-2012",
        ),
        pytest.param(
            RUNNING,
            live(1, 3, dead=(2,)),
            operator(2),
            True,
            C.CONTROLLER_ELECT_MASTER_FAILED,
            NO_STATE,
            id="designated-not-alive-unclean-retry-still-null-2012",
        ),
        pytest.param(
            RUNNING,
            live(1, 2, 3),
            operator(3),
            False,
            C.CONTROLLER_ELECT_MASTER_FAILED,
            NO_STATE,
            id="designated-not-in-set-clean-only-2012",
        ),
        pytest.param(
            RUNNING,
            live(1, 2, 3),
            operator(3),
            True,
            C.SUCCESS,
            3,
            id="designated-not-in-set-retried-against-all-replicas-when-unclean",
        ),
        pytest.param(
            RUNNING, live(2, 3, dead=(1,)), operator(3), True, C.SUCCESS, 3, id="designated-not-in-set-dead-master-unclean"
        ),
        pytest.param(
            RUNNING, live(1, 2), operator(9), True, C.CONTROLLER_ELECT_MASTER_FAILED, NO_STATE, id="designated-unregistered-2012"
        ),
        # unclean election
        pytest.param(RUNNING, live(3, dead=(1, 2)), controller(), True, C.SUCCESS, 3, id="unclean-enabled-picks-outside-set"),
        pytest.param(
            RUNNING, live(3, dead=(1, 2)), broker(3), True, C.SUCCESS, 3, id="unclean-enabled-broker-triggered-picks-outside-set"
        ),
        pytest.param(
            RUNNING,
            {2: L(2, epoch=1, off=1), 3: L(3, epoch=9, off=10**12, prio=0)},
            controller(),
            True,
            C.SUCCESS,
            2,
            id="unclean-enabled-set-member-still-first",
        ),
        pytest.param(
            RUNNING,
            {1: L(1, alive=False), 2: L(2, alive=False), 3: L(3, epoch=9)},
            broker(2),
            False,
            C.CONTROLLER_ELECT_MASTER_FAILED,
            NO_STATE,
            id="unclean-disabled-never-outside-set",
        ),
    ],
)
def test_elect_master(before, lv, request_, unclean, code_, master):
    d = elect_master(before, lv, request_, enable_unclean=unclean)
    assert_elect_outcome(before, d, code_, master)


def test_elect_success_epoch_arithmetic_exactly():
    before = state(master=1, me=41, sse=77, sset=(1, 2, 3))
    d = elect_master(before, live(3, dead=(1,)), controller(), enable_unclean=False)
    assert d.code == C.SUCCESS
    new = d.new_state
    assert (new.master_broker_id, new.master_epoch, new.sync_state_set_epoch, new.sync_state_set) == (3, 42, 78, {3})
    assert new.master_address == addr(3)


def test_elect_2004_then_elect_again_moves_from_the_null_master():
    no_master = elect_master(RUNNING, live(dead=(1, 2)), controller(), enable_unclean=False).new_state
    assert (no_master.master_broker_id, no_master.master_epoch, no_master.sync_state_set) == (None, 4, {1, 2})
    d = elect_master(no_master, live(2), broker(2), enable_unclean=False)
    assert d.code == C.SUCCESS
    assert (d.new_state.master_broker_id, d.new_state.master_epoch, d.new_state.sync_state_set_epoch) == (2, 5, 6)


def test_refused_elect_leaves_the_input_state_alone():
    before = RUNNING
    snapshot = (before.master_broker_id, before.master_epoch, before.sync_state_set_epoch, before.sync_state_set)
    for req in (broker(2), operator(3), operator(1)):
        elect_master(before, live(1, 2, 3), req, enable_unclean=False)
    assert (before.master_broker_id, before.master_epoch, before.sync_state_set_epoch, before.sync_state_set) == snapshot


# --- §1.6 DefaultElectPolicy ranking --------------------------------------------------------------

SET_123 = state(master=1, me=2, sse=2, sset=(1, 2, 3))  # master 1 dead in every ranking row


@pytest.mark.parametrize(
    "infos, expected",
    [
        pytest.param([L(2, epoch=5, off=10**9), L(3, epoch=6, off=0)], 3, id="epoch-desc-first"),
        pytest.param([L(2, epoch=5, off=100), L(3, epoch=5, off=200)], 3, id="equal-epoch-maxoffset-desc"),
        pytest.param(
            [L(2, epoch=5, off=100, prio=5), L(3, epoch=5, off=100, prio=1)], 3, id="equal-offsets-electionpriority-asc"
        ),
        pytest.param([L(2, epoch=5, off=101, prio=INT_MAX), L(3, epoch=5, off=100, prio=0)], 2, id="maxoffset-beats-priority"),
        pytest.param([L(2, epoch=4, off=10**15, prio=0), L(3, epoch=5, off=0)], 3, id="epoch-beats-offset-and-priority"),
        pytest.param([L(2, epoch=5, off=2**31 + 5), L(3, epoch=5, off=5)], 2, id="offset-gap-2^31-exact-integer-comparison"),
        pytest.param(
            [L(2, epoch=5, off=2**32 + 7, prio=9), L(3, epoch=5, off=7, prio=1)], 2, id="offset-gap-2^32-would-cast-to-0-in-java"
        ),
        pytest.param([L(3, epoch=5, off=3 * 2**31), L(2, epoch=5, off=2**31)], 3, id="offset-gap-2^32-large-offsets"),
        pytest.param([L(3, epoch=5, off=100, prio=7), L(2, epoch=5, off=100, prio=7)], 2, id="exact-tie-lowest-broker-id"),
        pytest.param([L(3), L(2)], 2, id="exact-tie-defaults-lowest-broker-id"),
        pytest.param([LiveInfo(3, True), LiveInfo(2, True, epoch=0)], 2, id="heartbeat-defaults-rank-last"),
        pytest.param([L(2, alive=False, epoch=99), L(3, epoch=0)], 3, id="dead-candidates-are-filtered-first"),
    ],
)
def test_policy_ranking(infos, expected):
    lv = {i.broker_id: i for i in infos}
    lv[1] = L(1, alive=False, epoch=100, off=10**18)
    assert elect_policy(SET_123, lv, enable_unclean=False, preferred=None) == expected
    d = elect_master(SET_123, lv, controller(), enable_unclean=False)
    assert d.code == C.SUCCESS and d.new_state.master_broker_id == expected


def test_rank_key_orders_epoch_desc_offset_desc_priority_asc_then_id():
    infos = [
        L(4, epoch=1, off=5, prio=1),
        L(2, epoch=2, off=0),
        L(5, epoch=1, off=5, prio=0),
        L(3, epoch=1, off=2**40),
        L(1, epoch=1, off=5, prio=1),
    ]
    assert [i.broker_id for i in sorted(infos, key=rank_key)] == [2, 3, 5, 1, 4]


def test_policy_returns_none_when_the_pool_has_nobody_alive():
    assert elect_policy(SET_123, live(dead=(1, 2, 3)), enable_unclean=True, preferred=None) is None
    assert elect_policy(SET_123, {}, enable_unclean=True, preferred=None) is None


def blind(i: int) -> LiveInfo:
    """Alive only because the control plane could not hear (blind time discounted): its last heartbeat
    is past its own timeout."""
    return LiveInfo(i, True, broker_address=addr(i), within_timeout=False)


@pytest.mark.parametrize(
    "lv, request_, code_, master",
    [
        pytest.param(
            {1: blind(1), 2: L(2), 3: L(3)},
            broker(2),
            C.CONTROLLER_MASTER_STILL_EXIST,
            1,
            id="blindness-never-deposes-the-master",
        ),
        pytest.param(
            {1: L(1, alive=False), 2: blind(2), 3: L(3)},
            operator(2),
            C.CONTROLLER_ELECT_MASTER_FAILED,
            None,
            id="designating-a-broker-past-its-timeout-2012",
        ),
        pytest.param(
            {1: L(1, alive=False), 2: blind(2), 3: L(3)}, controller(), C.SUCCESS, 3, id="only-evidence-of-life-is-electable"
        ),
        pytest.param(
            {1: L(1, alive=False), 2: blind(2), 3: blind(3)},
            broker(2),
            C.CONTROLLER_ELECT_MASTER_FAILED,
            None,
            id="nobody-within-timeout-nobody-elected",
        ),
    ],
)
def test_an_election_needs_a_heartbeat_within_the_declared_timeout(lv, request_, code_, master):
    """Issue 34: the blindness guard may postpone deposing a master; it never makes a broker whose
    last heartbeat is past its own timeout electable (RocketMQ: 2012, nothing changes)."""
    before = state(master=1, me=3, sse=5, sset=(1, 2, 3))
    d = elect_master(before, lv, request_, enable_unclean=False)
    assert d.code == code_
    if code_ == C.SUCCESS:
        assert d.new_state.master_broker_id == master
    elif code_ != C.CONTROLLER_MASTER_NOT_AVAILABLE:
        assert d.new_state is None


# --- §1.7 alterSyncStateSet ----------------------------------------------------------------------

# replicas 1..4 (4 registered but not alive), master 1 at masterEpoch 3, SyncStateSet {1, 2} at epoch 5
ALTER_BASE = state((1, 2, 3, 4), master=1, me=3, sse=5, sset=(1, 2))
ALIVE = (1, 2, 3)


def alter(new_set, *, master=1, me=3, sse=5) -> AlterRequest:
    return AlterRequest(NAME, master, me, frozenset(new_set), sse)


@pytest.mark.parametrize(
    "before, request_, code_",
    [
        pytest.param(None, alter({1, 2, 3}), C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, id="check1-unknown-set-2013"),
        pytest.param(state(()), alter({1}), C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, id="check1-set-without-replicas-2013"),
        pytest.param(ALTER_BASE, alter({1, 2}), C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, id="check2-same-set-2013"),
        pytest.param(
            state((1, 2, 3, 4), master=None, me=4, sse=5, sset=(1, 2)),
            alter({1, 2, 3}),
            C.CONTROLLER_INVALID_MASTER,
            id="check3-no-master-2002",
        ),
        pytest.param(ALTER_BASE, alter({1, 2, 3}, master=2), C.CONTROLLER_INVALID_MASTER, id="check3-other-master-2002"),
        pytest.param(ALTER_BASE, alter({1, 2, 3}, me=2), C.CONTROLLER_FENCED_MASTER_EPOCH, id="check4-stale-master-epoch-2000"),
        pytest.param(ALTER_BASE, alter({1, 2, 3}, me=4), C.CONTROLLER_FENCED_MASTER_EPOCH, id="check4-future-master-epoch-2000"),
        pytest.param(
            ALTER_BASE,
            alter({1, 2, 3}, sse=4),
            C.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            id="check5-stale-sync-state-set-epoch-2001",
        ),
        pytest.param(
            ALTER_BASE,
            alter({1, 2, 3}, sse=6),
            C.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            id="check5-future-sync-state-set-epoch-2001",
        ),
        pytest.param(ALTER_BASE, alter({1, 2, 9}), C.CONTROLLER_INVALID_REPLICAS, id="check6-unregistered-id-2003"),
        pytest.param(ALTER_BASE, alter({1, 2, 4}), C.CONTROLLER_BROKER_NOT_ALIVE, id="check7-dead-id-2006"),
        pytest.param(ALTER_BASE, alter({2, 3}), C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, id="check8-lacks-master-2013"),
        pytest.param(ALTER_BASE, alter(set()), C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, id="check8-empty-set-2013"),
        # several checks fail: the first one's code wins
        pytest.param(
            ALTER_BASE,
            alter({1, 2}, master=3, me=0, sse=0),
            C.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
            id="first-wins-same-set-before-master-and-epochs",
        ),
        pytest.param(
            ALTER_BASE,
            alter({2, 4, 9}, master=2, me=0, sse=0),
            C.CONTROLLER_INVALID_MASTER,
            id="first-wins-master-before-epochs-replicas-liveness",
        ),
        pytest.param(
            ALTER_BASE,
            alter({2, 4, 9}, me=2, sse=4),
            C.CONTROLLER_FENCED_MASTER_EPOCH,
            id="first-wins-master-epoch-before-set-epoch",
        ),
        pytest.param(
            ALTER_BASE,
            alter({2, 4, 9}, sse=4),
            C.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            id="first-wins-set-epoch-before-replicas",
        ),
        pytest.param(ALTER_BASE, alter({2, 4, 9}), C.CONTROLLER_INVALID_REPLICAS, id="first-wins-replicas-before-liveness"),
        pytest.param(ALTER_BASE, alter({2, 4}), C.CONTROLLER_BROKER_NOT_ALIVE, id="first-wins-liveness-before-lacks-master"),
    ],
)
def test_alter_checks_in_order(before, request_, code_):
    d = alter_sync_state_set(before, ALIVE, request_)
    assert d.code == code_, d.detail
    assert d.new_state is None


@pytest.mark.parametrize(
    "new_set",
    [
        pytest.param({1, 2, 3}, id="expand"),
        pytest.param({1}, id="shrink-to-master"),
        pytest.param({1, 3}, id="swap-member"),
    ],
)
def test_alter_success_moves_only_the_sync_state_set_epoch(new_set):
    d = alter_sync_state_set(ALTER_BASE, ALIVE, alter(new_set))
    assert d.code == C.SUCCESS
    new = d.new_state
    assert new.sync_state_set == new_set
    assert new.sync_state_set_epoch == ALTER_BASE.sync_state_set_epoch + 1
    assert new.master_epoch == ALTER_BASE.master_epoch and new.master_broker_id == ALTER_BASE.master_broker_id
    assert new.replicas == ALTER_BASE.replicas


def test_alter_after_success_needs_the_new_epoch():
    first = alter_sync_state_set(ALTER_BASE, ALIVE, alter({1, 2, 3})).new_state
    assert alter_sync_state_set(first, ALIVE, alter({1})).code == C.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert alter_sync_state_set(first, ALIVE, alter({1}, sse=6)).code == C.SUCCESS


# --- §1.8 ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, expected",
    [
        pytest.param(None, 1, id="unknown-set-next-id-is-1"),
        pytest.param(state(()), 1, id="set-without-replicas-next-id-is-1"),
        pytest.param(state((1, 2), nxt=3), 3, id="known-set-next-assign-broker-id"),
        pytest.param(state((1, 7), nxt=3), 3, id="known-set-next-assign-is-not-max-plus-one"),
    ],
)
def test_next_broker_id(before, expected):
    assert next_broker_id(before) == expected


@pytest.mark.parametrize(
    "broker_id, code_",
    [
        pytest.param(1, C.SUCCESS, id="unknown-set-id-1-creates-the-set"),
        pytest.param(2, C.CONTROLLER_BROKER_ID_INVALID, id="unknown-set-id-2-2014"),
        pytest.param(0, C.CONTROLLER_BROKER_ID_INVALID, id="unknown-set-id-0-2014"),
        pytest.param(-1, C.CONTROLLER_BROKER_ID_INVALID, id="unknown-set-negative-id-2014"),
    ],
)
def test_apply_broker_id_on_unknown_set_only_id_1(broker_id, code_):
    d = apply_broker_id(None, "c1", NAME, broker_id, code(broker_id))
    assert d.code == code_
    if code_ != C.SUCCESS:
        assert d.new_state is None
        return
    new = d.new_state
    assert (new.cluster_name, new.broker_name) == ("c1", NAME)
    assert new.replicas == (Replica(1, addr(1), code(1)),)
    assert new.next_assign_broker_id == 2
    assert (new.master_broker_id, new.master_epoch, new.sync_state_set_epoch, new.sync_state_set) == (None, 0, 0, set())


@pytest.mark.parametrize(
    "broker_id",
    [pytest.param(3, id="the-advertised-id"), pytest.param(7, id="another-unused-id"), pytest.param(4, id="next-plus-one")],
)
def test_apply_unused_id_accepted_and_next_assign_grows_by_one_regardless(broker_id):
    before = state((1, 2), master=1, me=2, sse=3, sset=(1, 2), nxt=3)
    d = apply_broker_id(before, "c1", NAME, broker_id, code(broker_id))
    assert d.code == C.SUCCESS
    new = d.new_state
    assert new.next_assign_broker_id == 4
    assert new.replica(broker_id) == Replica(broker_id, addr(broker_id), code(broker_id))
    assert new.replica_ids == {1, 2, broker_id}
    assert (new.master_broker_id, new.master_epoch, new.sync_state_set_epoch, new.sync_state_set) == (1, 2, 3, {1, 2})


def test_apply_taken_advertised_id_after_a_gap_is_refused():
    """nextAssignBrokerId is a counter, not max(id)+1: after id 3 was taken out of turn, id 3 is offered again."""
    after_gap = apply_broker_id(state((1, 2), nxt=3), "c1", NAME, 4, code(4)).new_state
    assert next_broker_id(after_gap) == 4
    assert apply_broker_id(after_gap, "c1", NAME, 4, code(9)).code == C.CONTROLLER_BROKER_ID_INVALID


@pytest.mark.parametrize(
    "broker_id, check_code, code_, new_state",
    [
        pytest.param(2, code(2), C.SUCCESS, False, id="same-check-code-idempotent-success-no-new-state"),
        pytest.param(2, code(2, millis=1), C.CONTROLLER_BROKER_ID_INVALID, False, id="different-check-code-2014"),
        pytest.param(
            2, f"{addr(2)};{1_700_000_000_002}x", C.CONTROLLER_BROKER_ID_INVALID, False, id="same-address-different-code-2014"
        ),
        pytest.param(0, code(0), C.CONTROLLER_BROKER_ID_INVALID, False, id="id-0-2014"),
        pytest.param(-3, code(3), C.CONTROLLER_BROKER_ID_INVALID, False, id="negative-id-2014"),
        pytest.param(3, code(3), C.SUCCESS, True, id="unused-id-success"),
    ],
)
def test_apply_broker_id_on_known_set(broker_id, check_code, code_, new_state):
    before = state((1, 2), nxt=3)
    d = apply_broker_id(before, "c1", NAME, broker_id, check_code)
    assert d.code == code_
    assert (d.new_state is not None) is new_state


@pytest.mark.parametrize(
    "check_code, address",
    [
        pytest.param("10.1.2.3:30911;1700000000000", "10.1.2.3:30911", id="address-before-semicolon"),
        pytest.param("host-a:10911;1;2", "host-a:10911", id="address-before-first-semicolon"),
        pytest.param("host-b:10911", "host-b:10911", id="no-semicolon-whole-code"),
    ],
)
def test_apply_broker_id_address_comes_from_the_check_code(check_code, address):
    for before in (None, state((1, 2), nxt=3)):
        broker_id = 1 if before is None else 3
        new = apply_broker_id(before, "c1", NAME, broker_id, check_code).new_state
        assert new.replica(broker_id) == Replica(broker_id, address, check_code)


# --- §1.8 registerBroker --------------------------------------------------------------------------

REGISTERED = state((1, 2, 3), master=1, me=2, sse=4, sset=(1, 2))


@pytest.mark.parametrize(
    "before, broker_id",
    [
        pytest.param(None, 1, id="unknown-set-2010"),
        pytest.param(state(()), 1, id="set-without-replicas-2010"),
        pytest.param(REGISTERED, 9, id="unknown-id-2010"),
    ],
)
def test_register_broker_unknown_2010(before, broker_id):
    d = register_broker(before, broker_id, addr(broker_id), live(1, 2, 3))
    assert d.code == C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED and d.new_state is None


@pytest.mark.parametrize(
    "before, lv, master_alive",
    [
        pytest.param(REGISTERED, live(1, 2), True, id="master-alive"),
        pytest.param(REGISTERED, live(2, dead=(1,)), False, id="master-dead"),
        pytest.param(REGISTERED, live(2), False, id="master-without-heartbeat"),
        pytest.param(state((1, 2, 3), master=None, me=3, sse=4, sset=(1, 2)), live(1, 2), False, id="no-master"),
    ],
)
def test_register_broker_master_alive_flag(before, lv, master_alive):
    d = register_broker(before, 2, addr(2), lv)
    assert d.code == C.SUCCESS
    assert d.extra["master_alive"] is master_alive
    assert d.new_state is None  # same address: nothing to write


def test_register_broker_address_change_keeps_check_code_and_epochs():
    d = register_broker(REGISTERED, 2, "10.9.9.9:20911", live(1, 2))
    assert d.code == C.SUCCESS
    new = d.new_state
    assert new.replica(2) == Replica(2, "10.9.9.9:20911", code(2))
    assert new.replica(1) == rep(1) and new.replica(3) == rep(3)
    assert (new.master_broker_id, new.master_epoch, new.sync_state_set_epoch, new.sync_state_set) == (1, 2, 4, {1, 2})
    assert new.next_assign_broker_id == REGISTERED.next_assign_broker_id


# --- §1.9 cleanBrokerData -------------------------------------------------------------------------

CLEAN_BASE = state((1, 2, 3), master=1, me=3, sse=5, sset=(1, 2))
CLEAN_NO_MASTER = state((1, 2, 3), master=None, me=4, sse=5, sset=(1, 2))


@pytest.mark.parametrize(
    "before, ids, living, alive",
    [
        pytest.param(None, frozenset({1}), False, (), id="unknown-set-2009"),
        pytest.param(None, None, True, (), id="unknown-set-clean-living-2009"),
        pytest.param(state(()), None, False, (), id="set-without-replicas-2009"),
        pytest.param(CLEAN_BASE, None, False, (), id="no-ids-set-still-has-master-2009"),
        pytest.param(CLEAN_BASE, frozenset(), False, (), id="empty-ids-set-still-has-master-2009"),
        pytest.param(CLEAN_BASE, frozenset({2, 3}), False, (3,), id="listed-id-alive-2009"),
        pytest.param(CLEAN_NO_MASTER, frozenset({3}), False, (1, 3), id="listed-id-alive-no-master-2009"),
    ],
)
def test_clean_refused_2009(before, ids, living, alive):
    d = clean_broker_data(before, ids, clean_living=living, alive=alive)
    assert d.code == C.CONTROLLER_INVALID_CLEAN_BROKER_METADATA and d.new_state is None


@pytest.mark.parametrize(
    "before, ids, living, alive",
    [
        pytest.param(CLEAN_NO_MASTER, None, False, (1, 2, 3), id="no-ids-no-master-drops-whole-set"),
        pytest.param(CLEAN_BASE, None, True, (1, 2, 3), id="no-ids-clean-living-drops-set-with-master"),
        pytest.param(CLEAN_BASE, frozenset({1, 2, 3}), False, (), id="all-ids-drops-whole-set"),
    ],
)
def test_clean_drops_the_whole_set(before, ids, living, alive):
    d = clean_broker_data(before, ids, clean_living=living, alive=alive)
    assert d.code == C.SUCCESS
    assert d.extra.get("drop_set") is True and d.detail == DROPPED_SET
    assert not d.new_state.replicas and d.new_state.master_broker_id is None and not d.new_state.sync_state_set
    # no epoch moves in the recorded transition
    assert (d.new_state.master_epoch, d.new_state.sync_state_set_epoch) == (before.master_epoch, before.sync_state_set_epoch)
    # afterwards the set is unknown: ids start again at 1 and an election needs registration
    assert next_broker_id(d.new_state) == 1
    assert elect_master(d.new_state, {}, broker(1), enable_unclean=True).code == C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


@pytest.mark.parametrize(
    "before, ids, living, alive, replicas, sset",
    [
        pytest.param(CLEAN_BASE, frozenset({3}), False, (1, 2), {1, 2}, {1, 2}, id="remove-dead-id-outside-set"),
        pytest.param(CLEAN_BASE, frozenset({2}), False, (1,), {1, 3}, {1}, id="remove-dead-id-from-set-no-epoch-bump"),
        pytest.param(CLEAN_BASE, frozenset({2, 3}), True, (1, 2, 3), {1}, {1}, id="clean-living-removes-alive-ids"),
        pytest.param(CLEAN_NO_MASTER, frozenset({2}), False, (3,), {1, 3}, {1}, id="remove-id-no-master"),
    ],
)
def test_clean_removes_ids_without_epoch_bump(before, ids, living, alive, replicas, sset):
    d = clean_broker_data(before, ids, clean_living=living, alive=alive)
    assert d.code == C.SUCCESS
    new = d.new_state
    assert not d.extra.get("drop_set") and d.detail != DROPPED_SET
    assert new.replica_ids == replicas and new.sync_state_set == sset
    assert (new.master_epoch, new.sync_state_set_epoch) == (before.master_epoch, before.sync_state_set_epoch)
    assert new.next_assign_broker_id == before.next_assign_broker_id
    assert new.master_broker_id == before.master_broker_id


def test_clean_of_the_dead_master_id_leaves_no_master_outside_the_set():
    d = clean_broker_data(state((1, 2, 3), master=1, me=3, sse=5, sset=(1, 2)), frozenset({1}), clean_living=False, alive=(2, 3))
    assert d.code == C.SUCCESS
    new = d.new_state
    assert new.replica_ids == {2, 3} and new.sync_state_set == {2}
    assert (new.master_epoch, new.sync_state_set_epoch) == (3, 5)
    assert new.master_broker_id is None or new.master_broker_id in new.sync_state_set


def test_clean_that_empties_the_sync_state_set_drops_the_set():
    """§1.4 CLEAN_BROKER_DATA_EVENT: "drop a map entry if it became empty", and §1.2: a set exists only if
    both maps hold it. Emptying the SyncStateSet drops the SyncStateInfo, so the broker set is unknown even
    though replicas 2 and 3 are still in the replica table."""
    before = state((1, 2, 3), master=1, me=3, sse=5, sset=(1,))
    d = clean_broker_data(before, frozenset({1}), clean_living=False, alive=(2, 3))
    assert d.code == C.SUCCESS
    assert d.extra.get("drop_set") is True and d.detail == DROPPED_SET


# --- §1.9 scanNeedReelectBrokerSets ---------------------------------------------------------------

MASTERLESS = state(master=None, me=2, sse=2, sset=(1, 2))  # a controller election found nobody


@pytest.mark.parametrize(
    "before, lv, expected",
    [
        pytest.param(state(master=None, me=1, sse=0), live(1, 2), False, id="no-master-empty-set-no-reelect"),
        pytest.param(MASTERLESS, live(2, dead=(1,)), True, id="no-master-set-replica-back-reelect"),
        pytest.param(MASTERLESS, live(3, dead=(1, 2)), False, id="no-master-only-outsider-alive-no-reelect"),
        pytest.param(RUNNING, live(1), False, id="master-alive-no-reelect"),
        pytest.param(RUNNING, live(2, dead=(1,)), True, id="master-dead-replica-alive-reelect"),
        pytest.param(RUNNING, live(3), True, id="master-without-heartbeat-replica-outside-set-alive-reelect"),
        pytest.param(RUNNING, live(dead=(1, 2, 3)), False, id="nobody-alive-no-reelect"),
        pytest.param(RUNNING, {}, False, id="no-heartbeats-no-reelect"),
        pytest.param(RUNNING, live(9, dead=(1,)), False, id="only-unregistered-id-alive-no-reelect"),
    ],
)
def test_need_reelect(before, lv, expected):
    assert need_reelect(before, lv) is expected


def test_a_masterless_set_with_only_an_outsider_alive_is_reelected_only_when_unclean_elections_are_allowed():
    assert not need_reelect(MASTERLESS, live(3, dead=(1, 2)))
    assert need_reelect(MASTERLESS, live(3, dead=(1, 2)), enable_unclean=True)
