"""Why a committed offset went back: the audit's decisions, as pure functions (values in, values out).

The Spark job finds each decrease of a queue's committed offset in the serving stream of its replica
group and joins it with the controller's elections between the two commits; ``attribute`` decides the
cause from those values. Background: seed 000 ("no reverse synchronization of metadata ... the
consumer offset of this group of brokers rollback"), reference §5.3 (pre-online) and §5.4 (data
versions), §1.5/§1.6 (elections; unclean = a replica outside the SyncStateSet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .schema import Cause, Source

SLAVE_ROLE = "SLAVE"


@dataclass(frozen=True)
class Commit:
    """One committed offset of a queue as a broker of the replica group reported it."""

    broker_id: int
    role: str
    master_epoch: int
    ts_ms: int
    offset: int
    source: str


@dataclass(frozen=True)
class Election:
    """A committed ``elect`` transition of the controller (controlplane.controller.models.Transition)."""

    transition_id: int
    master_epoch: int  # the epoch it opened
    new_master_broker_id: int | None
    old_sync_state_set: tuple[int, ...]
    trigger: str  # broker / controller / operator


@dataclass(frozen=True)
class Attribution:
    cause: Cause
    master_epoch: int  # the epoch the rollback belongs to (the election's, else the rolled-back commit's)
    transition_id: int | None = None


def messages_consumed_again(previous: Commit, current: Commit) -> int:
    """Offsets are "next to consume": going from P back to C hands messages C..P-1 out again."""
    return max(0, previous.offset - current.offset)


def is_rollback(previous: Commit, current: Commit) -> bool:
    """A decrease that nobody asked for: operator resets are intended. (The job applies this rule
    as a DataFrame expression, ``offset_audit.decreases``; this is its reference.)"""
    return current.offset < previous.offset and current.source != Source.OPERATOR_RESET


def attribute(previous: Commit, current: Commit, election: Election | None) -> Attribution:
    """The cause of the decrease ``previous`` -> ``current``; ``election``: the latest elect transition
    of the group with ``previous.master_epoch < epoch <= current.master_epoch``, if any."""
    if election is not None and election.new_master_broker_id == current.broker_id:
        if election.old_sync_state_set and current.broker_id not in election.old_sync_state_set:
            return Attribution(Cause.UNCLEAN_ELECTION, election.master_epoch, election.transition_id)
        return Attribution(Cause.FAILOVER_STALE_REPLICA, election.master_epoch, election.transition_id)
    if (
        election is None
        and current.broker_id != previous.broker_id
        and current.role != SLAVE_ROLE
        and current.master_epoch <= previous.master_epoch
        and current.source != Source.PRE_ONLINE_SYNC
    ):
        # A master came back and served its own older table while another broker had been serving
        # (acting master), with no election in between: the pre-online reverse sync did not run.
        return Attribution(Cause.FORMER_MASTER_WITHOUT_PRE_ONLINE, current.master_epoch)
    return Attribution(Cause.UNKNOWN, current.master_epoch)


def reset_scope(params: Mapping[str, object]) -> tuple[str, str | None, int | None] | None:
    """The queues an operator's logged offset reset covers (OperatorAction ``reset_offset``, params
    ``{"consumerGroup", "topic"?, "queueId"?}``): (group, topic or None = all, queueId or None = all),
    or None when the params name no consumer group."""
    group, topic, qid = params.get("consumerGroup"), params.get("topic"), params.get("queueId")
    if not isinstance(group, str) or not group:
        return None
    return (
        group,
        topic if isinstance(topic, str) and topic else None,
        qid if isinstance(qid, int) and not isinstance(qid, bool) else None,
    )
