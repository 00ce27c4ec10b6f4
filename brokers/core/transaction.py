"""Transactional messages' rules (RocketMQ's TransactionalMessageServiceImpl and
TransactionalMessageCheckService, reference §7; the index and the check loop that carry them out:
brokers/transaction.py, brokers/transaction_check.py): the properties a half message carries, which
EndTransaction is carried out, what a check run does with a half message, which broker of the set
relays a check to a producer. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from .codes import Code, Status
from .timer import REAL_QID, REAL_TOPIC

# RocketMQ's property names (MessageConst)
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
TRANSACTION_ID = "__transactionId__"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
TXN_KEYS = frozenset({TRAN_MSG, PGROUP, TRANSACTION_ID, CHECK_TIMES, REAL_TOPIC, REAL_QID})


class Resolution(StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    DISCARD = "DISCARD"  # checked transactionCheckMax times without an answer


class TxnRefused(ValueError):
    """An EndTransaction the broker refuses (INVALID_TRANSACTION_ID); nothing was written."""


@dataclass(frozen=True)
class Half:
    """The latest stored copy of an unresolved transaction's half message."""

    offset: int
    topic: str
    stored_ms: int
    checks: int


def resolution_allowed(known: Half | None, done: Resolution | None, topic: str, asked: Resolution) -> bool:
    """Whether an EndTransaction for ``topic`` asking ``asked`` is to be carried out (True) or
    answered OK with nothing to do (False: resolved alike before); TxnRefused otherwise."""
    if done is not None:
        if done is asked:
            return False
        raise TxnRefused(f"the transaction was resolved before ({done.value}), not {asked.value}")
    if known is None:
        raise TxnRefused("no such transaction is waiting on this broker set (unknown, or resolved long ago)")
    if known.topic != topic:
        raise TxnRefused(f"the transaction belongs to topic {known.topic}, not {topic}")
    return True


def end_answer(transaction_id: str, resolution: Resolution | None) -> Status | None:
    """An EndTransaction answered without being carried out: a blank transaction id is refused; an
    unresolved answer to a check (resolution unspecified) leaves it to the next check. None: carry it
    out (``resolution_allowed`` decides the rest against the index)."""
    if not transaction_id.strip():
        return Status(Code.INVALID_TRANSACTION_ID, "transaction_id is blank")
    if resolution is None:
        return Status(Code.OK, "unresolved: checked again later")
    return None


class CheckAction(StrEnum):
    """What a check run does with an unresolved half message that is due."""

    CHECK = "check"  # put a copy back for the producer to be asked
    DISCARD = "discard"  # asked transactionCheckMax times already: to TRANS_CHECK_MAX_TIME_TOPIC


def check_action(half: Half, now: int, timeout_ms: int, check_max: int, acting: bool = False) -> CheckAction | None:
    """What a check run does with an unresolved half message: None (too young), CHECK, or DISCARD
    (asked ``check_max`` times already). An acting master, which cannot write the discard, leaves it
    to its master: None."""
    if now - half.stored_ms < timeout_ms:
        return None
    if half.checks >= check_max:
        return None if acting else CheckAction.DISCARD
    return CheckAction.CHECK


# --- who relays a check (issue 34; brokers/transaction_check.py carries it out) -----------------------

C = TypeVar("C")


def relay_for(serving: str, members: Mapping[int, str], holders: AbstractSet[str]) -> str | None:
    """The one broker (by address) that relays a check of a producer group to a producer: the serving
    broker (master or acting master) when it holds one of the group's streams; else the live replica
    (``members``, broker id -> address) with the smallest id that does; None when no broker of the
    set does. ``holders``: the addresses holding a stream of the group."""
    if serving in holders:
        return serving
    return next((addr for _, addr in sorted(members.items()) if addr != serving and addr in holders), None)


def assign(
    checks: Sequence[C],
    group_of: Callable[[C], str],
    serving: str,
    members: Mapping[int, str],
    holders_of: Mapping[str, AbstractSet[str]],
) -> dict[str, list[C]]:
    """Each check to its relay (``relay_for`` of its group, ``group_of(check)``): relay address -> its
    checks, in order. A check whose group no broker holds is in none."""
    plan: dict[str, list[C]] = {}
    relays: dict[str, str | None] = {}
    for check in checks:
        group = group_of(check)
        if group not in relays:
            relays[group] = relay_for(serving, members, holders_of.get(group, frozenset()))
        relay = relays[group]
        if relay is not None:
            plan.setdefault(relay, []).append(check)
    return plan
