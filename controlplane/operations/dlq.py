"""A consumer group's dead letters (docs/messages.md §3, §5): listed, exported as JSON lines, resent to
their original topics, for REST, ``rmqha`` and the dashboard alike.

A resend is a change brokers carry out, so it goes as broker_admin.py's changes go: everything checked
and previewed first (every message named is still in the group's DLQ: one that is gone refuses the
whole resend, 404 + 17), then the audit record written and committed (result ``sent``), then each set's
master asked, then the record completed with what each did. It is idempotent: the request's
``requestId`` is the brokers' ``resendId``, and a message already resent under it is not resent again
(``already: true``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import transaction

from controlplane import audit, broker_rpc
from mqrules import validation as v
from mqrules.codes import ResponseCode
from nameserver import selectors as ns_selectors
from nameserver.core.values import Group

from . import message_rules as rules
from .messages import NOT_FOUND, UNAVAILABLE, MessageError, Replica, ask_sets, cluster_sets, replicas

LIST_MAX = 500  # a broker's dlq_list page
RESEND_BATCH = 1000  # a broker's dlq_resend at once
ALL_MAX = 10_000  # messages "all" resends in one request
EXPORT_MAX = 100_000  # lines of an export


def _sets(cluster: str, group: str) -> dict[str, Group]:
    """The sets that may hold ``group``'s DLQ: those whose registry lists it, else every set of the cluster."""
    names = ns_selectors.topic_broker_sets(rules.dlq_topic(group))
    sets = cluster_sets(cluster, names) if names else {}
    sets = sets or cluster_sets(cluster)
    if not sets:
        raise MessageError(404, f"no broker set in cluster {cluster}", code=ResponseCode.BROKER_NOT_EXIST)
    return sets


def _check_group(group: str) -> None:
    if (bad := v.name(group)) is not None:
        raise MessageError(400, "invalid input", {"group": [bad]})


def dead_letters(cluster: str, group: str, offset: int = 0, limit: int = 100) -> dict:
    """``{"group", "messages", "sets": [{brokerName, minOffset, maxOffset}], "failed"?}``: from queue offset
    ``offset`` of each set's DLQ, at most ``limit`` per set, each with its original topic, id, reason and
    attempts."""
    _check_group(group)
    answers, failed = ask_sets(_sets(cluster, group), "dlq_list", {"group": group, "offset": offset, "limit": limit})
    messages = [m for name in sorted(answers) for m in answers[name].get("messages", [])]
    ranges = [
        {"brokerName": n, "minOffset": a.get("minOffset"), "maxOffset": a.get("maxOffset")} for n, a in sorted(answers.items())
    ]
    out = {"group": group, "messages": messages, "sets": ranges}
    return {**out, "failed": failed} if failed else out


def _every_dead(cluster: str, group: str, cap: int) -> Iterator[dict]:
    """Every dead letter of ``group``, set by set, in queue order (at most ``cap``)."""
    sent = 0
    for name, g in sorted(_sets(cluster, group).items()):
        offset = 0
        while sent < cap:
            answer = ask_sets({name: g}, "dlq_list", {"group": group, "offset": offset, "limit": LIST_MAX})[0][name]
            page = answer.get("messages", [])
            for m in page[: cap - sent]:
                yield m
                sent += 1
            if not page or page[-1]["queueOffset"] + 1 >= answer.get("maxOffset", 0):
                break
            offset = page[-1]["queueOffset"] + 1


def export_lines(cluster: str, group: str) -> list[str]:
    """The group's dead letters as JSON lines (one view a line), at most EXPORT_MAX."""
    _check_group(group)
    return [json.dumps(m, separators=(",", ":"), ensure_ascii=False) + "\n" for m in _every_dead(cluster, group, EXPORT_MAX)]


# --- resend ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    master: Replica
    offsets: list[int]  # commit-log offsets of its DLQ's messages
    ids: dict[int, str]  # offset -> the msgId the operator named (or the listed one)


def _master(group: Group) -> Replica:
    serving = [r for r in replicas(group) if r.broker_id == 0]
    if not serving:
        raise MessageError(503, f"broker set {group.broker_name} has no live master: nothing was resent", code=UNAVAILABLE)
    return serving[0]


def _named(cluster: str, msg_ids: list[str]) -> dict[str, _Target]:
    """The sets holding the named messages (their offset ids name the broker that stored them)."""
    sets = cluster_sets(cluster)
    by_addr = {m.broker_addr: g for g in sets.values() for m in g.members}
    plan: dict[str, tuple[list[int], dict[int, str]]] = {}
    errors: dict[str, list[str]] = {}
    for i, msg_id in enumerate(msg_ids):
        try:
            decoded = rules.decode_msg_id(msg_id, str(i))
        except v.Invalid as exc:
            errors.update(exc.fields)  # type: ignore[arg-type]
            continue
        g = by_addr.get(rules.store_addr(decoded))
        if g is None:
            errors[str(i)] = [f"no broker of cluster {cluster} is at {rules.store_addr(decoded)} (the id's store host)"]
            continue
        offsets, ids = plan.setdefault(g.broker_name, ([], {}))
        offsets.append(decoded.commit_log_offset)
        ids[decoded.commit_log_offset] = msg_id
    if errors:
        raise MessageError(400, "invalid input", {"msgIds": errors})
    return {name: _Target(_master(sets[name]), offsets, ids) for name, (offsets, ids) in plan.items()}


def _all(cluster: str, group: str) -> dict[str, _Target]:
    sets = _sets(cluster, group)
    plan: dict[str, tuple[list[int], dict[int, str]]] = {}
    for m in _every_dead(cluster, group, ALL_MAX):
        offsets, ids = plan.setdefault(m["brokerName"], ([], {}))
        offsets.append(m["commitLogOffset"])
        ids[m["commitLogOffset"]] = m["msgId"]
    return {name: _Target(_master(sets[name]), offsets, ids) for name, (offsets, ids) in plan.items() if name in sets}


def _resend_at(target: _Target, group: str, request_id: str, preview: bool) -> dict:
    """One set's resend (in batches); ``{"resent": [...], "missing": [...]}``."""
    out: dict[str, list] = {"resent": [], "missing": []}
    for i in range(0, len(target.offsets), RESEND_BATCH):
        batch = target.offsets[i : i + RESEND_BATCH]
        payload = {"group": group, "commitLogOffsets": batch, "resendId": request_id, "preview": preview}
        answer = target.master.ask("dlq_resend", payload)
        for r in answer.get("resent", []):
            out["resent"].append({**r, "brokerName": target.master.broker_name, "msgId": target.ids.get(r["commitLogOffset"])})
        out["missing"] += answer.get("missing", [])
    return out


def _preview(targets: dict[str, _Target], group: str, request_id: str) -> list[dict]:
    resent, missing = [], []
    for _, t in sorted(targets.items()):
        try:
            answer = _resend_at(t, group, request_id, True)
        except broker_rpc.BrokerRefused as exc:
            status = 404 if exc.code == NOT_FOUND else 400 if exc.code == ResponseCode.INVALID_PARAMETER else 409
            raise MessageError(
                status, f"broker {t.master.label()} refused: {exc.detail}; nothing was resent", exc.fields, exc.code
            ) from exc
        except broker_rpc.BrokerUnreachable as exc:
            raise MessageError(
                503, f"broker {t.master.label()} did not answer ({exc}); nothing was resent", code=UNAVAILABLE
            ) from exc
        resent += answer["resent"]
        missing += [t.ids.get(o, str(o)) for o in answer["missing"]]
    if missing:
        detail = (
            f"{len(missing)} message(s) are not in the dead-letter queue of {group} (gone, or never there): nothing was resent"
        )
        raise MessageError(404, detail, {"msgIds": missing}, NOT_FOUND)
    return resent


def resend(
    actor: str,
    cluster: str,
    group: str,
    msg_ids: list[str] | None,
    *,
    every: bool = False,
    request_id: str | None = None,
    dry_run: bool,
) -> dict:
    """Resend dead letters of ``group`` (``msg_ids``, or ``every`` one) to their original topics.
    ``{"requestId", "dryRun", "applied", "resent": [{msgId, brokerName, commitLogOffset, originTopic,
    newMsgId, newUniqKey, already}], "failed"?}``."""
    audit.outside_transactions("a dead-letter resend")
    _check_group(group)
    request_id = (request_id or uuid.uuid4().hex).lower()
    if every == bool(msg_ids):
        raise MessageError(400, "invalid input", {"msgIds": ["give msgIds or all: true, one of them"]})
    targets = _all(cluster, group) if every else _named(cluster, list(dict.fromkeys(msg_ids or [])))
    planned = _preview(targets, group, request_id)
    answer = {"group": group, "requestId": request_id, "dryRun": dry_run, "applied": False, "resent": planned}
    if dry_run or not targets:
        return answer
    with transaction.atomic():
        record = audit.record(
            actor,
            "dlq_resend",
            cluster_name=cluster,
            params={"group": group, "requestId": request_id, **({"all": True} if every else {"msgIds": (msg_ids or [])[:200]})},
            before={"resend": [[r["brokerName"], r["commitLogOffset"], r["originTopic"], r["already"]] for r in planned][:300]},
            result="sent",
        ).pk
    resent, failed = [], []
    for name, t in sorted(targets.items()):
        try:
            resent += _resend_at(t, group, request_id, False)["resent"]
        except (broker_rpc.BrokerRefused, broker_rpc.BrokerUnreachable) as exc:
            failed.append({"brokerName": name, "error": str(exc)})
    result = "ok" if not failed else ("failed" if len(failed) == len(targets) else "partial")
    after = {
        "resent": [[r["brokerName"], r["commitLogOffset"], r["newMsgId"], r["already"]] for r in resent][:300],
        "failed": failed,
    }
    audit.complete(record, result=result, after=after, detail="; ".join(f"{f['brokerName']}: {f['error']}" for f in failed))
    out = {**answer, "applied": not failed, "resent": resent}
    return {**out, "failed": failed} if failed else out
