"""Operator actions on replica groups: elect (automatic or a designated replica), isolate, write
permission. Each one goes through the same services as the REST API and is written to the operator
audit log with the state before and after."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane import audit
from controlplane.codes import ResponseCode
from controlplane.controller import selectors as ctl
from controlplane.controller import services
from controlplane.controller.config_store import current_config as controller_config
from controlplane.controller.core import rules
from controlplane.controller.core.state import Trigger
from controlplane.isolation import set_isolated
from nameserver import services as ns_services

from . import live, selectors


class ActionError(ValueError):
    def __init__(self, detail: str, fields: dict | None = None, status: int = 400):
        super().__init__(detail)
        self.detail, self.fields, self.status = detail, fields or {}, status


@dataclass(frozen=True)
class Preview:
    winner: int | None
    data_at_risk_bytes: int
    unclean: bool
    detail: str

    def as_dict(self) -> dict:
        return {"winner": self.winner, "dataAtRiskBytes": self.data_at_risk_bytes, "unclean": self.unclean,
                "detail": self.detail}


def _state(broker_name: str):
    state = ctl.replica_info(broker_name)
    if state is None:
        raise ActionError(f"{broker_name} is not managed by the controller", status=404)
    return state


def preview_elect(broker_name: str, broker_id: int | None) -> Preview:
    """What an election would do now, decided by the same pure rule without committing: the winner,
    the bytes the current master has that the winner lacks, and whether it is unclean."""
    state = _state(broker_name)
    live_infos = services._live(state)
    request = rules.ElectRequest(broker_name, broker_id, broker_id is not None, Trigger.OPERATOR)
    decision = rules.elect_master(state, live_infos, request, enable_unclean=controller_config().enable_elect_unclean_master)
    winner = decision.new_state.master_broker_id if decision.new_state is not None else None
    if winner is None and broker_id is not None and decision.code != ResponseCode.SUCCESS:
        winner_detail = decision.detail or ResponseCode(decision.code).name
        return Preview(None, 0, broker_id not in state.sync_state_set, winner_detail)
    best = max((i.max_offset for i in live_infos.values() if i.max_offset is not None), default=0)
    candidate = live_infos.get(winner) if winner is not None else None
    at_risk = max(0, best - candidate.max_offset) if candidate is not None and candidate.max_offset >= 0 else 0
    unclean = winner is not None and winner not in state.sync_state_set
    ok = decision.code == ResponseCode.SUCCESS
    return Preview(winner, at_risk, unclean, decision.detail or ("" if ok else ResponseCode(decision.code).name))


def elect(actor: str, broker_name: str, broker_id: int | None) -> dict:
    before = selectors.group_state(broker_name) or {}
    if not before:
        raise ActionError(f"{broker_name} is not managed by the controller", status=404)
    outcome = services.elect_master(broker_name, broker_id=broker_id, designate=broker_id is not None,
                                    trigger=Trigger.OPERATOR, requested_by=actor)
    after = selectors.group_state(broker_name) or {}
    ok = outcome.code == ResponseCode.SUCCESS
    result = "ok" if ok else ResponseCode(outcome.code).name
    audit.record(actor, "elect_master", cluster_name=(outcome.state.cluster_name if outcome.state else ""),
                 broker_name=broker_name, broker_id=broker_id, params={"brokerId": broker_id}, before=before,
                 after=after, result=result, detail=outcome.detail or "")
    return {"ok": ok, "result": result, "detail": outcome.detail or "", "before": before, "after": after}


def _member(broker_name: str, broker_id: int) -> dict:
    group = selectors.group_detail(broker_name)
    if group is None:
        raise ActionError(f"unknown replica group {broker_name}", status=404)
    member = next((m for m in group["members"] if m["brokerId"] == broker_id), None)
    if member is None:
        raise ActionError("no such broker in this group", {"brokerId": [f"not a member of {broker_name}"]})
    return {**member, "clusterName": group["clusterName"]}


def isolate(actor: str, broker_name: str, broker_id: int, isolated: bool) -> dict:
    member = _member(broker_name, broker_id)
    before = {"isolated": member["isolated"]}
    changed = set_isolated(member["clusterName"], broker_name, member["address"], isolated, by=actor)
    after = {"isolated": isolated}
    audit.record(actor, "isolate" if isolated else "unisolate", cluster_name=member["clusterName"],
                 broker_name=broker_name, broker_id=broker_id, params={"address": member["address"]}, before=before,
                 after=after, result="ok" if changed else "unchanged")
    live.publish_state(broker_name)
    return {"ok": True, "result": "ok" if changed else "unchanged", "before": before, "after": after}


def set_write_perm(actor: str, broker_name: str, writable: bool) -> dict:
    try:
        topics = ns_services.change_write_perm(broker_name, writeable=writable)
    except ns_services.UnknownBrokers as exc:
        raise ActionError(f"unknown replica group {broker_name}", status=404) from exc
    audit.record(actor, "add_write_perm" if writable else "wipe_write_perm", broker_name=broker_name,
                 params={"writable": writable}, after={"topicsChanged": topics}, result="ok")
    return {"ok": True, "result": "ok", "topicsChanged": topics, "before": {}, "after": {"writable": writable}}
