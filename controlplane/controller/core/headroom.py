"""Headroom of a controller-mode broker set: how many more replica losses before writes stop. Pure.

The rules it follows, all of them the brokers' own (brokers/ha/quorum.py ``need_ack_nums``, reference
§4.2-4.3, §2.2, §1.5):
- a master refuses every send while its SyncStateSet has fewer than ``minInSyncReplicas`` members
  (IN_SYNC_REPLICAS_NOT_ENOUGH, nothing written);
- a member that is lost leaves the SyncStateSet (its link closes, or it is not caught up for
  haMaxTimeSlaveNotCatchup): a lost member costs the set one member;
- a lost master is replaced by the controller from the alive members of the set, whose new set then
  starts as {new master} and takes the others back as they catch up (§2.2 expand): in steady state
  the set is again every alive member.
So in steady state the set is its alive members, and writes go on while at least
max(minInSyncReplicas, 1) of them are alive. Replicas outside the set are not counted: they join only
once they have caught up.

Beyond refusals, in count mode (allAckInSyncStateSet false, inSyncReplicas > 1) a send waits for
inSyncReplicas copies, the master's included (§4.3): with fewer replicas alive to copy it, every send
is stored but answered FLUSH_SLAVE_TIMEOUT after slaveTimeout. In all-ack mode a lost member delays
sends only until the master drops it from the set.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from enum import StrEnum


class Writes(StrEnum):
    """Whether the set takes writes now."""

    TAKEN = "taken"  # an alive master, a SyncStateSet of at least minInSyncReplicas
    AWAIT_ELECTION = "awaitElection"  # the master is not alive; an alive member of the set can be elected
    REFUSED = "refused"  # fewer than minInSyncReplicas in the SyncStateSet: IN_SYNC_REPLICAS_NOT_ENOUGH
    NO_MEMBER = "noMember"  # no member of the SyncStateSet is alive


@dataclass(frozen=True)
class Headroom:
    losses: int  # more replica losses the set can take and still take writes (steady state); never negative
    writes: Writes
    alive_in_sync: int  # members of the SyncStateSet that are alive (the master included)
    dead_in_sync: int  # members still in the set that are not alive: the master drops them
    alive_outside: int  # alive replicas outside the set: not counted until they catch up and join it
    floor: int  # max(minInSyncReplicas, 1): members the set needs to take writes
    reason: str
    ack_losses: int | None = None  # count mode: more losses before sends stop being acknowledged by enough replicas
    ack_reason: str = ""

    @property
    def steady_writable(self) -> bool:
        """Writes are possible once the set has settled (dead members dropped, a master elected)."""
        return self.alive_in_sync >= self.floor


def _members(n: int) -> str:
    return f"{n} member" if n == 1 else f"{n} members"


def losses_before_writes_stop(
    sync_state_set: Set[int],
    alive: Set[int],
    master_id: int | None,
    in_sync_replicas: int,
    min_in_sync_replicas: int,
    all_ack_in_sync_state_set: bool,
) -> Headroom:
    """The headroom of one broker set. ``alive``: the replicas the controller hears (an isolated one
    counts as lost: it is never elected and refuses writes)."""
    members = set(sync_state_set) | ({master_id} if master_id is not None else set())
    alive_members = members & set(alive)
    n, dead = len(alive_members), len(members) - len(alive_members)
    outside = len(set(alive) - members)
    floor = max(min_in_sync_replicas, 1)
    losses = max(0, n - floor)
    master_alive = master_id is not None and master_id in alive

    if n == 0:
        writes = Writes.NO_MEMBER
        reason = "no member of the SyncStateSet is alive: writes stopped until one comes back"
    elif not master_alive:
        writes = Writes.AWAIT_ELECTION
        reason = f"the master is not alive: writes wait for the controller to elect one of the {n} alive SyncStateSet members"
        if n < floor:
            reason += f"; fewer than minInSyncReplicas={min_in_sync_replicas}, so it will refuse them"
        elif floor > 1:
            reason += f", then for {floor - 1} more to catch up and rejoin it (minInSyncReplicas={min_in_sync_replicas})"
    elif len(members) < min_in_sync_replicas:
        writes = Writes.REFUSED
        reason = (
            f"writes are refused (IN_SYNC_REPLICAS_NOT_ENOUGH): {_members(len(members))} in the SyncStateSet, "
            f"fewer than minInSyncReplicas={min_in_sync_replicas}"
        )
    elif n < floor:
        writes = Writes.TAKEN
        reason = (
            f"writes stop when the master drops the {dead} that are not alive (within haMaxTimeSlaveNotCatchup): "
            f"then {n} in the SyncStateSet, fewer than minInSyncReplicas={min_in_sync_replicas}"
        )
    else:
        writes = Writes.TAKEN
        if floor == 1:
            reason = f"writes continue while one SyncStateSet member is alive to be master; {n} are in it and alive"
        else:
            reason = (
                f"writes stop when fewer than minInSyncReplicas={min_in_sync_replicas} replicas are in the "
                f"SyncStateSet; {n} are in it and alive"
            )
        if dead:
            reason += f" ({dead} more in it not alive: the master drops them)"
    if outside:
        reason += f"; {outside} alive outside the set count once they catch up and join it"
    ack_losses, ack_reason = _ack_headroom(n, in_sync_replicas, all_ack_in_sync_state_set)
    return Headroom(losses, writes, n, dead, outside, floor, reason, ack_losses, ack_reason)


def _ack_headroom(n: int, in_sync_replicas: int, all_ack: bool) -> tuple[int | None, str]:
    """Count mode (§4.3): a send is acknowledged once inSyncReplicas replicas, the master included, hold it."""
    if all_ack:
        return None, (
            "allAckInSyncStateSet: every SyncStateSet member acknowledges each send; a lost member delays sends "
            "(FLUSH_SLAVE_TIMEOUT) until the master drops it from the set"
        )
    if in_sync_replicas <= 1:
        return None, f"inSyncReplicas={in_sync_replicas}: sends wait for no replica"
    if n < in_sync_replicas:
        return 0, (
            f"sends are stored but answered FLUSH_SLAVE_TIMEOUT: {n} alive in the SyncStateSet, "
            f"fewer than inSyncReplicas={in_sync_replicas}"
        )
    return n - in_sync_replicas, (
        f"sends are answered FLUSH_SLAVE_TIMEOUT when fewer than inSyncReplicas={in_sync_replicas} replicas can copy "
        f"them; {n} are in the SyncStateSet and alive"
    )
