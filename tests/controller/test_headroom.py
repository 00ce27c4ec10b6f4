"""Headroom of a controller-mode broker set (controlplane/controller/core/headroom.py): how many more
replica losses before writes stop, by the brokers' own pre-write rule (brokers/ha/quorum.py
``need_ack_nums``, reference §4.2-4.3) and the SyncStateSet's shrink and re-election (§2.2, §1.5).
One row per case; then properties over random sets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.core.roles import BrokerRole
from brokers.ha.quorum import QuorumConfig, need_ack_nums
from brokers.store.store import PutMessageStatus
from controlplane.controller.core.headroom import Writes, losses_before_writes_stop

pytestmark = pytest.mark.unit

# (id, SyncStateSet, alive, master, inSyncReplicas, minInSyncReplicas, allAck) -> (losses, writes, ack losses)
CASES = [
    ("defaults-three-in-sync-two-losses", {1, 2, 3}, {1, 2, 3}, 1, 1, 1, False, 2, Writes.TAKEN, None),
    ("defaults-single-replica-no-loss", {1}, {1}, 1, 1, 1, False, 0, Writes.TAKEN, None),
    ("min2-three-in-sync-one-loss", {1, 2, 3}, {1, 2, 3}, 1, 1, 2, False, 1, Writes.TAKEN, None),
    ("min2-two-in-sync-no-loss", {1, 2}, {1, 2, 3}, 1, 1, 2, False, 0, Writes.TAKEN, None),
    ("min3-three-in-sync-no-loss", {1, 2, 3}, {1, 2, 3}, 1, 1, 3, False, 0, Writes.TAKEN, None),
    ("min0-counts-as-one", {1, 2}, {1, 2}, 1, 1, 0, False, 1, Writes.TAKEN, None),
    ("min2-shrunk-set-refuses-writes", {1}, {1, 2, 3}, 1, 1, 2, False, 0, Writes.REFUSED, None),
    ("dead-member-not-counted", {1, 2, 3}, {1, 2}, 1, 1, 1, False, 1, Writes.TAKEN, None),
    ("dead-members-still-in-set-writes-stop-at-shrink", {1, 2, 3}, {1}, 1, 1, 2, False, 0, Writes.TAKEN, None),
    ("outside-replica-not-counted", {1, 2}, {1, 2, 3}, 1, 1, 1, False, 1, Writes.TAKEN, None),
    ("master-dead-replaced-from-alive-members", {1, 2, 3}, {2, 3}, 1, 1, 1, False, 1, Writes.AWAIT_ELECTION, None),
    ("master-dead-min2-two-left-no-loss", {1, 2, 3}, {2, 3}, 1, 1, 2, False, 0, Writes.AWAIT_ELECTION, None),
    ("no-master-elected-yet", {1, 2}, {1, 2}, None, 1, 1, False, 1, Writes.AWAIT_ELECTION, None),
    ("master-outside-set-still-a-member", {2, 3}, {1, 2, 3}, 1, 1, 1, False, 2, Writes.TAKEN, None),
    ("no-member-alive", {1, 2}, {3}, 1, 1, 1, False, 0, Writes.NO_MEMBER, None),
    ("nothing-alive", {1, 2, 3}, set(), 1, 1, 1, False, 0, Writes.NO_MEMBER, None),
    ("count-mode-isr2-of-three-one-ack-loss", {1, 2, 3}, {1, 2, 3}, 1, 2, 1, False, 2, Writes.TAKEN, 1),
    ("count-mode-isr3-of-three-no-ack-loss", {1, 2, 3}, {1, 2, 3}, 1, 3, 1, False, 2, Writes.TAKEN, 0),
    ("count-mode-isr3-two-alive-acks-time-out", {1, 2, 3}, {1, 2}, 1, 3, 1, False, 1, Writes.TAKEN, 0),
    ("all-ack-ignores-isr", {1, 2, 3}, {1, 2, 3}, 1, 3, 2, True, 1, Writes.TAKEN, None),
]


@pytest.mark.parametrize(
    "sset, alive, master, isr, min_isr, all_ack, losses, writes, ack_losses",
    [pytest.param(*row[1:], id=row[0]) for row in CASES],
)
def test_headroom(sset, alive, master, isr, min_isr, all_ack, losses, writes, ack_losses):
    h = losses_before_writes_stop(frozenset(sset), frozenset(alive), master, isr, min_isr, all_ack)
    assert (h.losses, h.writes, h.ack_losses) == (losses, writes, ack_losses)
    assert h.reason and (h.ack_reason or ack_losses is None)


REASONS = [
    (
        "min2-names-the-rule-and-the-count",
        ({1, 2, 3}, {1, 2, 3}, 1, 1, 2, False),
        "writes stop when fewer than minInSyncReplicas=2 replicas are in the SyncStateSet; 3 are in it and alive",
    ),
    ("min1-last-member-writes", ({1, 2}, {1, 2}, 1, 1, 1, False), "while one SyncStateSet member is alive to be master"),
    ("refused-names-the-status", ({1}, {1, 2}, 1, 1, 2, False), "IN_SYNC_REPLICAS_NOT_ENOUGH"),
    ("dead-master-names-the-election", ({1, 2}, {2}, 1, 1, 1, False), "the master is not alive"),
    ("dead-member-will-leave", ({1, 2, 3}, {1}, 1, 1, 2, False), "drops the 2 that are not alive"),
    ("outside-replica-mentioned", ({1}, {1, 2}, 1, 1, 1, False), "1 alive outside the set"),
]


@pytest.mark.parametrize("args, phrase", [pytest.param(*row[1:], id=row[0]) for row in REASONS])
def test_reason_tells_the_operator(args, phrase):
    assert phrase in losses_before_writes_stop(*args).reason


def test_count_mode_reason_names_flush_slave_timeout():
    h = losses_before_writes_stop({1, 2}, {1}, 1, 2, 1, False)
    assert h.ack_losses == 0 and "FLUSH_SLAVE_TIMEOUT" in h.ack_reason and "inSyncReplicas=2" in h.ack_reason


# --- properties -------------------------------------------------------------------------------------

IDS = st.integers(min_value=1, max_value=7)
GROUPS = st.tuples(
    st.frozensets(IDS, max_size=7),
    st.frozensets(IDS, max_size=7),
    st.one_of(st.none(), IDS),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=5),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(GROUPS)
def test_never_negative_and_losing_one_alive_replica_costs_at_most_one(group):
    sset, alive, master, isr, min_isr, all_ack = group
    h = losses_before_writes_stop(sset, alive, master, isr, min_isr, all_ack)
    assert h.losses >= 0 and (h.ack_losses is None or h.ack_losses >= 0)
    for lost in alive:
        after = losses_before_writes_stop(sset, alive - {lost}, master, isr, min_isr, all_ack)
        assert h.losses - 1 <= after.losses <= h.losses
        if h.ack_losses is not None:
            assert h.ack_losses - 1 <= after.ack_losses <= h.ack_losses


@settings(max_examples=300, deadline=None)
@given(GROUPS, st.randoms(use_true_random=False))
def test_after_that_many_losses_writes_go_on_and_one_more_stops_them(group, rnd):
    """Lose ``losses`` alive members in any order: the settled set still takes writes; one more and
    it does not (the brokers' own pre-write check, need_ack_nums, says the same)."""
    sset, alive, master, isr, min_isr, all_ack = group
    h = losses_before_writes_stop(sset, alive, master, isr, min_isr, all_ack)
    members = sorted((sset | ({master} if master is not None else set())) & alive)
    if len(members) < max(min_isr, 1):
        assert h.losses == 0 and not h.steady_writable
        return
    rnd.shuffle(members)
    survivors = members[h.losses :]
    assert _broker_takes_writes(len(survivors), min_isr)
    assert not _broker_takes_writes(len(survivors) - 1, min_isr)
    left = losses_before_writes_stop(sset, frozenset(survivors), master, isr, min_isr, all_ack)
    assert left.losses == 0 and left.steady_writable


def _broker_takes_writes(sync_state_set_size: int, min_isr: int) -> bool:
    """A master with a settled SyncStateSet of this size: is a send refused before it is written?"""
    if sync_state_set_size < 1:
        return False  # nobody to be master
    config = QuorumConfig(in_sync_replicas=1, min_in_sync_replicas=min_isr)
    refusal, _ = need_ack_nums(
        config, BrokerRole.SYNC_MASTER, controller_mode=True, acting_master_mode=False, in_sync=sync_state_set_size
    )
    return refusal is not PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
