"""What an election would do now, without doing it: the same pure rule as ``rules.elect_master``, plus
the bytes the best-informed replica has that the winner lacks (data at risk) and whether the winner is
outside the SyncStateSet (unclean). The dashboard's elect dialog shows it before an operator commits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from mqrules.codes import ResponseCode as C

from . import rules
from .state import LiveInfo, SyncState, Trigger


@dataclass(frozen=True)
class ElectionPreview:
    winner: int | None
    data_at_risk_bytes: int
    unclean: bool
    detail: str

    def as_dict(self) -> dict:
        return {"winner": self.winner, "dataAtRiskBytes": self.data_at_risk_bytes, "unclean": self.unclean, "detail": self.detail}


def isolated_as_dead(live: Mapping[int, LiveInfo], isolated_ids: frozenset[int]) -> dict[int, LiveInfo]:
    """An isolated replica is never a candidate: the election sees it as dead."""
    if not isolated_ids:
        return dict(live)
    return {i: replace(info, alive=False) if i in isolated_ids else info for i, info in live.items()}


def preview_election(
    state: SyncState, live: Mapping[int, LiveInfo], broker_id: int | None, *, enable_unclean: bool
) -> ElectionPreview:
    """An operator's election of ``broker_id`` (designated), or the controller's choice when None."""
    request = rules.ElectRequest(state.broker_name, broker_id, broker_id is not None, Trigger.OPERATOR)
    decision = rules.elect_master(state, live, request, enable_unclean=enable_unclean)
    ok = decision.code == C.SUCCESS
    detail = decision.detail or ("" if ok else C(decision.code).name)
    winner = decision.new_state.master_broker_id if decision.new_state is not None else None
    if winner is None and broker_id is not None and not ok:
        return ElectionPreview(None, 0, broker_id not in state.sync_state_set, detail)
    best = max((info.max_offset for info in live.values()), default=0)
    chosen = live.get(winner) if winner is not None else None
    at_risk = max(0, best - chosen.max_offset) if chosen is not None and chosen.max_offset >= 0 else 0
    return ElectionPreview(winner, at_risk, winner is not None and winner not in state.sync_state_set, detail)
