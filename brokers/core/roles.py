"""A broker's role and write permission, as values and pure rules.

- ``BrokerRole`` (brokerRole in broker.conf) and ``WriteReason``: why a broker takes sends or not.
- ``write_gate``: the one rule over the facts (role, fenced, isolated, pre-online) that says whether
  sends are taken; ``brokers/ha/gate.py`` keeps the facts and asks it.
- ``role_to_take`` / ``after_poll``: the role a controller-mode broker takes from an answer naming a
  master (a ``notify_broker_role_changed`` push, an election's reply) or from its replica-info poll
  (reference §2.1: only a strictly greater master epoch moves the role); ``brokers/control/replicas.py``
  carries the decision out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class WriteReason(StrEnum):
    """Why the broker takes sends or not; a refused send carries ``detail``."""

    WRITABLE = "WRITABLE"
    ISOLATED = "ISOLATED"  # an operator isolated it (outlives role changes and restarts)
    FENCED = "FENCED"  # controller mode, before the controller assigned a role (reference §2.1)
    PRE_ONLINE = "PRE_ONLINE"  # a returning master taking back what its acting slave served (§5.3)
    SLAVE = "SLAVE"  # a slave copies its master's log and refuses sends (reference §4.1)
    DISK_FULL = "DISK_FULL"  # disk use past diskSpaceWarningLevelRatio (brokers/core/retention.py)

    @property
    def detail(self) -> str:
        return _DETAILS[self]


_DETAILS = {
    WriteReason.WRITABLE: "",
    WriteReason.ISOLATED: "isolated by an operator",
    WriteReason.FENCED: "fenced: waiting for the controller to assign a role",
    WriteReason.PRE_ONLINE: "pre-online: taking back consumer state from the replica that acted as master",
    WriteReason.SLAVE: "this broker is a SLAVE",
    WriteReason.DISK_FULL: "the disk is full: its use passed diskSpaceWarningLevelRatio",
}


def write_gate(
    role: BrokerRole, *, fenced: bool, isolated: bool, pre_online: bool = False, disk_full: bool = False
) -> tuple[bool, WriteReason]:
    """(writable, reason). Isolation is named first: it is the one fact a role change does not lift;
    a full disk last: a slave refuses (and forwards) sends as a slave whatever its disk."""
    if isolated:
        return False, WriteReason.ISOLATED
    if fenced:
        return False, WriteReason.FENCED
    if pre_online:
        return False, WriteReason.PRE_ONLINE
    if role is BrokerRole.SLAVE:
        return False, WriteReason.SLAVE
    if disk_full:
        return False, WriteReason.DISK_FULL
    return True, WriteReason.WRITABLE


class RoleAction(StrEnum):
    NONE = "NONE"  # nothing to do: the answer is not newer than the role held
    MASTER = "MASTER"  # changeToMaster
    SLAVE = "SLAVE"  # changeToSlave
    ELECT = "ELECT"  # a newer epoch without a master: ask the controller to elect (brokerElect)
    SYNC_STATE_SET = "SYNC_STATE_SET"  # the master's own epoch: adopt the SyncStateSet the controller holds


@dataclass(frozen=True)
class RoleDecision:
    action: RoleAction
    epoch: int = 0
    master_id: int | None = None
    master_addr: str | None = None
    members: frozenset[int] = frozenset()  # the SyncStateSet a new master starts with
    sync_state_set_epoch: int = 0


NOTHING = RoleDecision(RoleAction.NONE)


def role_to_take(answer: Mapping, broker_id: int, master_epoch: int) -> RoleDecision:
    """The role an answer naming a master moves this broker to: only a strictly greater epoch does."""
    if answer.get("masterBrokerId") is None or int(answer.get("masterEpoch", 0)) <= master_epoch:
        return NOTHING
    epoch, master_id = int(answer["masterEpoch"]), int(answer["masterBrokerId"])
    if master_id == broker_id:
        members = frozenset(answer.get("syncStateSet") or ())
        return RoleDecision(RoleAction.MASTER, epoch, master_id, None, members, int(answer.get("syncStateSetEpoch", 0)))
    return RoleDecision(RoleAction.SLAVE, epoch, master_id, answer.get("masterAddress"))


def after_poll(info: Mapping, broker_id: int, master_epoch: int, master_id: int | None) -> RoleDecision:
    """What a replica-info poll's answer asks of this broker (holding ``master_epoch``, following
    ``master_id``): a newer master's role, an election when the newer epoch has none, the master's own
    SyncStateSet at its epoch, or nothing."""
    epoch = int(info.get("masterEpoch", 0))
    if epoch > master_epoch and info.get("masterBrokerId") is None:
        return RoleDecision(RoleAction.ELECT, epoch)
    if epoch > master_epoch:
        return role_to_take(info, broker_id, master_epoch)
    if epoch == master_epoch and master_id == broker_id:
        return RoleDecision(RoleAction.SYNC_STATE_SET, epoch)
    return NOTHING
