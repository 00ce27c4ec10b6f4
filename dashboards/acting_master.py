"""What the pages say about a replica group's acting master. The nameserver decides it
(``nameserver.selectors.acting_masters``: the routes' rule held against the brokers' reported modes);
this only puts it in words, once, for the rendered pages and the live payloads alike."""

from __future__ import annotations

from nameserver import wire
from nameserver.core.acting import ActingAgreement, ActingMasterState


def _ids(ids: list[int]) -> str:
    return ("broker " if len(ids) == 1 else "brokers ") + ", ".join(str(i) for i in ids)


def describe(view: dict) -> str:
    """One line, always starting with "acting master" (static/js/live.js drops such reasons by it)."""
    agreement = ActingAgreement(view["agreement"])
    broker_id, others, mode = view["brokerId"], view["othersActing"], view["reportedMode"]
    shown = len(view["topics"])
    scope = f" for {shown} of its {shown + view['otherTopics']} topics" if view["otherTopics"] else ""
    report = "report" if len(others) > 1 else "reports"
    match agreement:
        case ActingAgreement.AGREED:
            return f"acting master {broker_id} (read-only){scope}"
        case ActingAgreement.BROKER_NOT_ACTING:
            return f"acting master {broker_id} in the routes{scope} — broker {broker_id} not acting (it reports {mode})"
        case ActingAgreement.BROKER_UNREPORTED:
            return f"acting master {broker_id} in the routes{scope} — broker {broker_id} has not reported its mode"
        case ActingAgreement.ANOTHER_BROKER_ACTING:
            return f"acting master {broker_id} in the routes{scope} — {_ids(others)} {report} acting instead"
        case ActingAgreement.ROUTES_NOT_ACTING:
            return f"acting master: none in the routes — {_ids(others)} {report} acting"
    return "acting master: none"


def view(state: ActingMasterState | None) -> dict | None:
    """The state as the pages and their live payloads carry it, with its words; None when there is
    no acting master anywhere (no route shows one, no broker reports acting)."""
    if state is None or state.agreement is ActingAgreement.NONE:
        return None
    out = wire.acting_master(state)
    out["text"] = describe(out)
    return out
