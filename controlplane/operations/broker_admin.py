"""An operator's changes that brokers carry out (docs/admin.md): a dynamic config key
(mqadmin ``updateBrokerConfig``) and a consumer group's offsets reset to a time or an offset
(``resetOffsetByTime``). The dashboard's forms and the REST endpoints both come here.

Each broker is asked over its websocket and answers (``controlplane.broker_rpc``). A broker's change
cannot share a transaction with the operator audit log, so the order is: check everything (the
targets are alive and reachable, the keys are dynamic, a preview asked of every broker that will
act), then write and COMMIT the audit record (result ``sent``), then ask the brokers, then complete the
record with what each did. A record that cannot be written refuses the action before anything
changes; an answer never reports an error for a change that was made (a partial outcome is a 200
that names what was applied where).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from controlplane import audit, broker_rpc
from mqrules import validation as v
from mqrules.codes import ResponseCode
from nameserver import broker_status
from nameserver import liveness as ns_liveness
from nameserver import selectors as ns_selectors

from .refused import Refused

SERVICE_NOT_AVAILABLE = ResponseCode.SERVICE_NOT_AVAILABLE
RESTART_ONLY = "not a key a running broker can change (restart with it in broker.conf)"
MAX_UPDATES = 50
LONG_MAX = v.LONG_MAX  # broker.conf's integers are Java's at most
LONG_MIN = -v.LONG_MAX - 1
VALUE_MAX = 1000


class AdminError(Refused):
    """Refused before anything changed (an invalid input is 400 + 29 by default)."""

    def __init__(self, status: int, detail: str, fields: dict | None = None, code: int = ResponseCode.INVALID_PARAMETER):
        super().__init__(status, code, detail, fields)


@dataclass(frozen=True)
class _Broker:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str

    def channel(self) -> str | None:
        member = ns_liveness.member(self.cluster_name, self.broker_addr)
        return ns_liveness.connections([member]).get(member)

    def as_dict(self) -> dict:
        return {"brokerName": self.broker_name, "brokerId": self.broker_id, "brokerAddr": self.broker_addr}


def _ask(broker: _Broker, kind: str, payload: dict) -> dict:
    return broker_rpc.call(broker.channel(), kind, payload, settings.BROKER_RPC_TIMEOUT_SECONDS)


def _refusal(exc: Exception) -> str:
    if isinstance(exc, broker_rpc.BrokerRefused):
        return f"{exc.code} {exc.name}: {exc.detail}".strip()
    return str(exc)


def _preview(broker: _Broker, kind: str, payload: dict, nothing: str) -> dict:
    """The broker's answer to a preview; a refusal or silence refuses the whole action (``nothing``:
    what the operator is told did not happen)."""
    who = f"broker {broker.broker_name}[{broker.broker_id}]"
    try:
        return _ask(broker, kind, {**payload, "preview": True})
    except broker_rpc.BrokerRefused as exc:
        status = 404 if exc.code == 17 else 400
        raise AdminError(status, f"{who} refused: {exc.detail}; {nothing}", exc.fields or None, exc.code) from exc
    except broker_rpc.BrokerUnreachable as exc:
        raise AdminError(503, f"{who} did not answer ({exc}); {nothing}", code=SERVICE_NOT_AVAILABLE) from exc


def _sent(actor: str, action: str, *, cluster_name: str, broker_name: str, broker_id=None, params: dict, before: dict) -> int:
    """The audit record, committed before any broker is asked."""
    with transaction.atomic():
        row = audit.record(
            actor,
            action,
            cluster_name=cluster_name,
            broker_name=broker_name,
            broker_id=broker_id,
            params=params,
            before=before,
            result="sent",
        )
    return row.pk


def _completed(record_id: int, result: str, after: dict, detail: str = "") -> None:
    audit.complete(record_id, result=result, after=after, detail=detail)


# --- updateBrokerConfig ------------------------------------------------------------------------------


def _check_updates(updates: object) -> dict[str, str]:
    if not isinstance(updates, dict) or not updates:
        raise AdminError(400, "invalid input", {"updates": ["required: an object of broker.conf keys and values"]})
    if len(updates) > MAX_UPDATES:
        raise AdminError(400, "invalid input", {"updates": [f"at most {MAX_UPDATES} keys at once"]})
    out, errors = {}, {}
    for key, value in updates.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int):
            if not LONG_MIN <= value <= LONG_MAX:
                errors[str(key)[:100]] = ["an integer beyond a Java long"]
                continue
            value = str(value)
        if not isinstance(key, str) or not key.isidentifier() or len(key) > 100:
            errors[str(key)[:100]] = ["not a broker.conf key name"]
        elif (bad := v.text(VALUE_MAX)(value)) is not None or "\n" in value or "\r" in value:
            errors[key] = [bad or "must fit on one line"]
        else:
            out[key] = value.strip()
    if errors:
        raise AdminError(400, "invalid input", {"updates": errors})
    return out


def update_config(actor: str, broker_name: str, broker_id: int | None, updates: object, *, preview: bool) -> dict:
    """Change dynamic keys of one broker (``broker_id``) or of every live broker of the set. Every key
    must be one the broker says it can change at runtime (its report's ``dynamicKeys``); the broker
    checks the values as it checks broker.conf, applies them and writes them to its broker.conf."""
    audit.outside_transactions("a change brokers carry out")
    rows = broker_status.reports(broker_name, broker_id)
    if not rows:
        which = f"{broker_name}" + (f" id {broker_id}" if broker_id is not None else "")
        raise AdminError(404, f"no status report from broker {which}: is it running?", code=ResponseCode.BROKER_NOT_EXIST)
    wanted = _check_updates(updates)
    live = [r for r in rows if r["alive"]]
    if not live:
        which = f" with id {broker_id}" if broker_id is not None else ""
        raise AdminError(409, f"no live broker in {broker_name}{which}", code=SERVICE_NOT_AVAILABLE)
    errors = {}
    for key in wanted:
        if any(key not in r["dynamicKeys"] for r in live):
            known = key in live[0]["config"]
            errors[key] = [
                "not a key a running broker can change (restart with it in broker.conf)" if known else "unknown broker.conf key"
            ]
    if errors:
        raise AdminError(400, "invalid input", {"updates": errors})
    targets = [_Broker(r["clusterName"], r["brokerName"], r["brokerId"], r["brokerAddr"]) for r in live]
    # the brokers check the values: a refusal here changes nothing anywhere
    previews = {b: _preview(b, "update_broker_config", {"updates": wanted}, "nothing was changed") for b in targets}
    if preview:
        return {"preview": True, "brokers": [{**b.as_dict(), "changed": previews[b].get("changed", {})} for b in targets]}
    record = _sent(
        actor,
        "update_broker_config",
        cluster_name=targets[0].cluster_name,
        broker_name=broker_name,
        broker_id=broker_id,
        params={"updates": wanted},
        before={f"{b.broker_name}[{b.broker_id}]": previews[b].get("changed", {}) for b in targets},
    )
    out, failed = [], []
    for b in targets:
        try:
            answer = _ask(b, "update_broker_config", {"updates": wanted, "preview": False})
            out.append({**b.as_dict(), "changed": answer.get("changed", {}), "persisted": answer.get("persisted", False)})
        except (broker_rpc.BrokerRefused, broker_rpc.BrokerUnreachable) as exc:
            failed.append(f"{b.broker_name}[{b.broker_id}]")
            out.append({**b.as_dict(), "changed": {}, "error": _refusal(exc)})
    result = "ok" if not failed else ("failed" if len(failed) == len(targets) else "partial")
    _completed(record, result, {"brokers": out}, ("not applied on " + ", ".join(failed)) if failed else "")
    return {"preview": False, "applied": not failed, "brokers": out}


# --- resetOffsetByTime / resetOffset ----------------------------------------------------------------


def topic_sets(topic: str) -> list[str]:
    """The broker sets of ``topic``'s route (where a reset acts)."""
    route = ns_selectors.topic_route(topic)
    return sorted({q.broker_name for q in route.queue_datas}) if route is not None else []


def _serving_masters(topic: str) -> list[_Broker]:
    """The broker that serves each set of ``topic``'s route: the live master writing its consumer
    metadata. A set without one refuses the whole reset (before anything changes)."""
    names = topic_sets(topic)
    if not names:
        raise AdminError(404, f"topic {topic} has no route", code=ResponseCode.TOPIC_NOT_EXIST)
    reports = broker_status.reports()
    out, missing = [], []
    for name in names:
        serving = [r for r in reports if r["brokerName"] == name and r["alive"] and r["status"].get("metaMode") == "WRITER"]
        if not serving:
            missing.append(name)
        else:
            r = max(serving, key=lambda r: r["reportedAtMs"])
            out.append(_Broker(r["clusterName"], r["brokerName"], r["brokerId"], r["brokerAddr"]))
    if missing:
        detail = f"no live master serves broker set(s) {', '.join(missing)}: nothing was reset (retry after the failover)"
        raise AdminError(409, detail, code=SERVICE_NOT_AVAILABLE)
    return out


def _check_reset(group: str, topic: str, timestamp_ms: object, offset: object) -> dict:
    errors = {}
    if (bad := v.name(group)) is not None:
        errors["group"] = [bad]
    if (bad := v.name(topic)) is not None:
        errors["topic"] = [bad]
    if (timestamp_ms is None) == (offset is None):
        errors["timestampMs"] = ["give exactly one of timestampMs and offset"]
    elif timestamp_ms is not None and (bad := v.integer(0, v.LONG_MAX)(timestamp_ms)) is not None:
        errors["timestampMs"] = [bad]
    elif offset is not None and (bad := v.integer(-1, v.LONG_MAX)(offset)) is not None:
        errors["offset"] = [bad + " (-1: each queue's max offset)"]
    if errors:
        raise AdminError(400, "invalid input", errors)
    return {"timestampMs": timestamp_ms} if timestamp_ms is not None else {"offset": offset}


def _queue_rows(broker: _Broker, answer: dict) -> list[dict]:
    rows = []
    for q in answer.get("queues", ()):
        committed, new = q.get("committedOffset"), q["newOffset"]
        rows.append(
            {
                "brokerName": broker.broker_name,
                "queueId": q["queueId"],
                "committedOffset": committed,
                "newOffset": new,
                "maxOffset": q.get("maxOffset"),
                "reconsumed": max(0, committed - new) if committed is not None else 0,
                "skipped": max(0, new - committed) if committed is not None else 0,
            }
        )
    return rows


def reset_offset(
    actor: str, group: str, topic: str, *, timestamp_ms: int | None = None, offset: int | None = None, preview: bool
) -> dict:
    """Reset ``group``'s committed offsets on ``topic`` (every queue of every set) to the first message
    stored at or after ``timestamp_ms`` (RocketMQ's searchOffset), or to ``offset`` (-1: the end).
    Carried out by each set's serving master as a consumer-metadata record, so its slaves have it; the
    brokers report it as ``operator_reset`` and the offset audit never counts it as a rollback."""
    audit.outside_transactions("a change brokers carry out")
    target = _check_reset(group, topic, timestamp_ms, offset)
    masters = _serving_masters(topic)
    ask = {"group": group, "topic": topic, **target}
    planned = {b: _preview(b, "reset_offset", ask, "nothing was reset") for b in masters}
    rows = [row for b in masters for row in _queue_rows(b, planned[b])]
    answer = {"group": group, "topic": topic, **target, "preview": preview, "applied": False, "queues": rows}
    if preview:
        return answer
    record = _sent(
        actor,
        "reset_offset",  # the offset audit reads these (docs/audits.md): every set, so no broker name
        cluster_name=masters[0].cluster_name,
        broker_name="",
        params={"consumerGroup": group, "topic": topic, **target, "brokerNames": [b.broker_name for b in masters]},
        before={"queues": [[r["brokerName"], r["queueId"], r["committedOffset"]] for r in rows][:300]},
    )
    rows, failed = [], []
    for b in masters:
        try:
            rows += _queue_rows(b, _ask(b, "reset_offset", {**ask, "preview": False}))
        except (broker_rpc.BrokerRefused, broker_rpc.BrokerUnreachable) as exc:
            failed.append({"brokerName": b.broker_name, "error": _refusal(exc)})
    result = "ok" if not failed else ("failed" if len(failed) == len(masters) else "partial")
    after = {"queues": [[r["brokerName"], r["queueId"], r["newOffset"]] for r in rows][:300], "failed": failed}
    _completed(record, result, after, "; ".join(f"{f['brokerName']}: {f['error']}" for f in failed))
    return {**answer, "applied": not failed, "queues": rows, **({"failed": failed} if failed else {})}
