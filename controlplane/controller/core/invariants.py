"""Invariants of the controller's transition history (ARCHITECTURE §1, reference §9).

Checked per broker set, in commit order:
* at most one master per (brokerName, masterEpoch);
* masterEpoch never goes back, and each transition starts from the epochs the previous one left
  (so no transition was applied on top of a stale state);
* an election moves masterEpoch by exactly one, and a successful one also syncStateSetEpoch;
* an applied alter had the current masterEpoch and syncStateSetEpoch, and moved only the latter, by one;
* the SyncStateSet always contains the master.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .rules import DROPPED_SET


@dataclass(frozen=True)
class Row:
    id: int
    broker_name: str
    kind: str
    old_master_broker_id: int | None
    new_master_broker_id: int | None
    old_master_epoch: int
    new_master_epoch: int
    old_sync_state_set_epoch: int
    new_sync_state_set_epoch: int
    new_sync_state_set: tuple[int, ...]
    detail: str = ""


@dataclass(frozen=True)
class Violation:
    broker_name: str
    transition_id: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.broker_name} #{self.transition_id}: {self.rule}: {self.detail}"


def check(rows: Iterable[Row]) -> list[Violation]:
    violations: list[Violation] = []
    by_set: dict[str, list[Row]] = {}
    for r in sorted(rows, key=lambda r: r.id):
        by_set.setdefault(r.broker_name, []).append(r)
    for name, seq in by_set.items():
        masters_by_epoch: dict[int, int] = {}
        prev: Row | None = None
        for r in seq:

            def bad(rule: str, detail: str, r: Row = r, name: str = name) -> None:
                violations.append(Violation(name, r.id, rule, detail))

            if r.new_master_epoch < r.old_master_epoch:
                bad("masterEpoch decreased", f"{r.old_master_epoch} -> {r.new_master_epoch}")
            if prev is not None and prev.detail != DROPPED_SET:
                if r.old_master_epoch != prev.new_master_epoch or r.old_sync_state_set_epoch != prev.new_sync_state_set_epoch:
                    bad(
                        "stale transition",
                        f"started from epochs ({r.old_master_epoch}, {r.old_sync_state_set_epoch}) but the previous "
                        f"left ({prev.new_master_epoch}, {prev.new_sync_state_set_epoch})",
                    )
            if r.kind == "elect":
                if r.new_master_epoch != r.old_master_epoch + 1:
                    bad("elect must move masterEpoch by one", f"{r.old_master_epoch} -> {r.new_master_epoch}")
                if r.new_master_broker_id is not None:
                    if r.new_sync_state_set_epoch != r.old_sync_state_set_epoch + 1:
                        bad(
                            "elect must move syncStateSetEpoch by one",
                            f"{r.old_sync_state_set_epoch} -> {r.new_sync_state_set_epoch}",
                        )
                    if tuple(r.new_sync_state_set) != (r.new_master_broker_id,):
                        bad("an elected master starts alone in the SyncStateSet", f"set {list(r.new_sync_state_set)}")
                elif r.new_sync_state_set_epoch != r.old_sync_state_set_epoch:
                    bad(
                        "an election without a master keeps the SyncStateSet",
                        f"syncStateSetEpoch {r.old_sync_state_set_epoch} -> {r.new_sync_state_set_epoch}",
                    )
            else:
                if r.new_master_broker_id != r.old_master_broker_id and not (
                    r.kind == "clean" and r.new_master_broker_id is None
                ):
                    bad("master changed outside an election", f"{r.old_master_broker_id} -> {r.new_master_broker_id}")
                if r.kind == "alter":
                    if r.new_master_epoch != r.old_master_epoch:
                        bad("alter moved masterEpoch", f"{r.old_master_epoch} -> {r.new_master_epoch}")
                    if r.new_sync_state_set_epoch != r.old_sync_state_set_epoch + 1:
                        bad(
                            "alter must move syncStateSetEpoch by one",
                            f"{r.old_sync_state_set_epoch} -> {r.new_sync_state_set_epoch}",
                        )
                elif r.new_master_epoch != r.old_master_epoch or r.new_sync_state_set_epoch != r.old_sync_state_set_epoch:
                    bad(f"{r.kind} moved an epoch", "only elections and alters may")
            if r.new_master_broker_id is not None:
                holder = masters_by_epoch.setdefault(r.new_master_epoch, r.new_master_broker_id)
                if holder != r.new_master_broker_id:
                    bad("two masters in one epoch", f"epoch {r.new_master_epoch}: {holder} and {r.new_master_broker_id}")
            if r.new_master_broker_id is not None and r.new_master_broker_id not in r.new_sync_state_set:
                bad("SyncStateSet lacks the master", f"master {r.new_master_broker_id}, set {list(r.new_sync_state_set)}")
            prev = r
            if r.detail == DROPPED_SET:
                masters_by_epoch = {}
    return violations
