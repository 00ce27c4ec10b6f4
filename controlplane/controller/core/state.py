"""The controller's state of one broker set (``SyncStateInfo`` + ``BrokerReplicaInfo``, reference §1.2)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

FIRST_BROKER_CONTROLLER_ID = 1
INT_MAX = 2**31 - 1  # default electionPriority: lower is preferred


@dataclass(frozen=True)
class Replica:
    broker_id: int
    broker_address: str
    register_check_code: str


@dataclass(frozen=True)
class SyncState:
    cluster_name: str
    broker_name: str
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    replicas: tuple[Replica, ...] = ()
    next_assign_broker_id: int = FIRST_BROKER_CONTROLLER_ID

    def replica(self, broker_id: int | None) -> Replica | None:
        return next((r for r in self.replicas if r.broker_id == broker_id), None)

    @property
    def replica_ids(self) -> frozenset[int]:
        return frozenset(r.broker_id for r in self.replicas)

    @property
    def master_address(self) -> str | None:
        r = self.replica(self.master_broker_id)
        return r.broker_address if r else None

    def with_master(self, master_id: int | None) -> SyncState:
        """``updateMasterInfo``: masterEpoch always moves, also to "no master"."""
        return replace(self, master_broker_id=master_id, master_epoch=self.master_epoch + 1)

    def with_sync_state_set(self, new_set: frozenset[int]) -> SyncState:
        """``updateSyncStateSetInfo``: a new set always has a new epoch."""
        return replace(self, sync_state_set=frozenset(new_set), sync_state_set_epoch=self.sync_state_set_epoch + 1)


@dataclass(frozen=True)
class LiveInfo:
    """What the controller's heartbeat table knows of one replica at decision time (reference §1.10)."""

    broker_id: int
    alive: bool  # not silent past its timeout, blind time not counted: not to be deposed (blindness.py)
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = INT_MAX
    broker_address: str = ""
    # Its last heartbeat within its own declared timeout, no discount: evidence of life, which an
    # election needs (blindness may postpone deposing a master, never make a silent broker electable).
    within_timeout: bool = True

    @property
    def electable(self) -> bool:
        return self.alive and self.within_timeout


class Trigger(StrEnum):
    BROKER = "broker"
    CONTROLLER = "controller"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Candidate:
    """One replica as the election saw it, for the history and the dashboard."""

    broker_id: int
    alive: bool
    in_sync_state_set: bool
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int

    def as_dict(self) -> dict:
        return {
            "brokerId": self.broker_id,
            "alive": self.alive,
            "inSyncStateSet": self.in_sync_state_set,
            "epoch": self.epoch,
            "maxOffset": self.max_offset,
            "confirmOffset": self.confirm_offset,
            "electionPriority": self.election_priority,
        }


def candidates(state: SyncState, live: dict[int, LiveInfo]) -> tuple[Candidate, ...]:
    out = []
    for r in sorted(state.replicas, key=lambda r: r.broker_id):
        info = live.get(r.broker_id) or LiveInfo(r.broker_id, alive=False)
        out.append(
            Candidate(
                r.broker_id,
                info.alive,
                r.broker_id in state.sync_state_set,
                info.epoch,
                info.max_offset,
                info.confirm_offset,
                info.election_priority,
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class Decision:
    """The outcome of one controller operation: a response code, and the new state if it changed."""

    code: int
    new_state: SyncState | None = None  # None: nothing to write
    detail: str = ""
    extra: dict = field(default_factory=dict)
