"""The cause of a rollback (spark_jobs/rules.py), row by row from seed 000 and reference §5.3-§5.4."""

from __future__ import annotations

import pytest

from spark_jobs.rules import (
    Commit,
    Election,
    Queue,
    attribute,
    is_rollback,
    messages_consumed_again,
    reset_scope,
    retention_losses,
)
from spark_jobs.schema import Cause

pytestmark = pytest.mark.unit


def c(broker_id: int, epoch: int, offset: int, role: str = "SYNC_MASTER", source: str = "client_commit") -> Commit:
    return Commit(broker_id, role, epoch, 0, offset, source)


def el(epoch: int, new_master: int, old_sss: tuple[int, ...], trigger: str = "controller") -> Election:
    return Election(77, epoch, new_master, old_sss, trigger)


@pytest.mark.parametrize(
    "previous, current, election, cause, epoch",
    [
        # a clean election (the new master was in the SyncStateSet) onto a replica whose offsets lagged
        (c(1, 1, 100), c(2, 2, 40, source="master_takeover"), el(2, 2, (1, 2)), Cause.FAILOVER_STALE_REPLICA, 2),
        # the same after an operator's switch-over: still a stale replica
        (c(1, 1, 100), c(2, 2, 40), el(2, 2, (1, 2), "operator"), Cause.FAILOVER_STALE_REPLICA, 2),
        # a replica outside the SyncStateSet was elected (enableElectUncleanMaster)
        (c(1, 2, 500), c(3, 3, 450), el(3, 3, (1,)), Cause.UNCLEAN_ELECTION, 3),
        # the first election ever (no SyncStateSet before) is not unclean
        (c(1, 0, 10), c(2, 1, 5), el(1, 2, ()), Cause.FAILOVER_STALE_REPLICA, 1),
        # a master back without pre-online sync, after a slave acted as master (same epoch, no election)
        (c(1, 1, 230, role="SLAVE"), c(0, 1, 200, source="master_takeover"), None, Cause.FORMER_MASTER_WITHOUT_PRE_ONLINE, 1),
        # ... or after another master served at a later epoch and it returns with its own older one
        (c(2, 3, 230), c(1, 2, 200), None, Cause.FORMER_MASTER_WITHOUT_PRE_ONLINE, 2),
        # a slave going back is not a returning master
        (c(0, 1, 230), c(1, 1, 200, role="SLAVE"), None, Cause.UNKNOWN, 1),
        # the same broker and epoch going back: nothing explains it
        (c(0, 4, 1000), c(0, 4, 900), None, Cause.UNKNOWN, 4),
        # an election whose new master is not the broker that went back
        (c(1, 1, 100), c(3, 2, 40), el(2, 2, (1, 2)), Cause.UNKNOWN, 2),
        # a pre-online sync that adopted older offsets (it must not: §5.3 adopts only data not older)
        (c(1, 1, 230, role="SLAVE"), c(0, 1, 200, source="pre_online_sync"), None, Cause.UNKNOWN, 1),
    ],
)
def test_the_cause_of_a_rollback(previous, current, election, cause, epoch):
    why = attribute(previous, current, election)
    assert (why.cause, why.master_epoch) == (cause, epoch)
    assert why.transition_id == (
        election.transition_id if cause in (Cause.FAILOVER_STALE_REPLICA, Cause.UNCLEAN_ELECTION) else None
    )


@pytest.mark.parametrize(
    "previous, current, rollback, again",
    [
        (c(1, 1, 100), c(2, 2, 40), True, 60),  # messages 40..99 are handed out again
        (c(1, 1, 100), c(1, 1, 100), False, 0),
        (c(1, 1, 100), c(1, 1, 101), False, 0),
        (c(1, 1, 100), c(1, 1, 0, source="operator_reset"), False, 100),  # intended: not a rollback
    ],
)
def test_what_counts_as_a_rollback_and_how_many_messages_come_again(previous, current, rollback, again):
    assert is_rollback(previous, current) is rollback
    assert messages_consumed_again(previous, current) == again


@pytest.mark.parametrize(
    "params, scope",
    [
        ({"consumerGroup": "g", "topic": "t", "queueId": 3}, ("g", "t", 3)),
        ({"consumerGroup": "g"}, ("g", None, None)),
        ({"consumerGroup": "g", "topic": "", "queueId": True}, ("g", None, None)),
        ({"topic": "t"}, None),
        ({}, None),
    ],
)
def test_which_queues_a_logged_operator_reset_covers(params, scope):
    assert reset_scope(params) == scope


def test_retention_losses_pair_each_skip_with_the_served_commit_before_it():
    q = Queue("g", "t", "rg", 0)
    commits = [
        (q, Commit(0, "SYNC_MASTER", 1, 10, 40, "client_commit")),
        (q, Commit(1, "SLAVE", 1, 15, 60, "slave_sync")),  # not served: a slave's copy
        (q, Commit(0, "SYNC_MASTER", 1, 20, 100, "retention_skip")),
        (q, Commit(0, "SYNC_MASTER", 1, 30, 120, "client_commit")),
        (q, Commit(0, "SYNC_MASTER", 1, 40, 300, "retention_skip")),
    ]
    found = retention_losses(reversed(commits))  # in any order: the rule orders by commit order
    assert [(f.previous_offset, f.offset, f.messages_lost) for f in found] == [(40, 100, 60), (120, 300, 180)]
    assert all(f.kind == "retention_skip" and f.cause is None for f in found)
