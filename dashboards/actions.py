"""Operator actions on replica groups: elect (automatic or a designated replica), isolate, write
permission, clean broker metadata. Each one goes through the same services as the REST API and is
written to the operator audit log with the state before and after, in the transaction that makes the
change (``@audited``; an election: the controller's own, ``api.elect_recorded``): the change and its
record commit together or not at all."""

from __future__ import annotations

import functools

from django.db import transaction
from rest_framework.exceptions import ValidationError

from controlplane import audit
from controlplane.auth import Caller
from controlplane.controller import api as controller_api
from controlplane.controller import selectors as ctl
from controlplane.controller import services
from controlplane.controller.core import rules
from controlplane.controller.core.preview import ElectionPreview
from controlplane.errors import ApiError
from controlplane.operations import isolation
from mqrules.codes import ResponseCode
from nameserver import services as ns_services
from nameserver import static_topics, wire
from nameserver.serializers import MigrationSerializer, QueueCountSerializer, StaticPreviewSerializer

from . import selectors


class ActionError(ValueError):
    def __init__(self, detail: str, fields: dict | None = None, status: int = 400):
        super().__init__(detail)
        self.detail, self.fields, self.status = detail, fields or {}, status


def preview_elect(broker_name: str, broker_id: int | None) -> ElectionPreview:
    """What an election would do now (the controller's preview: winner, data at risk, unclean)."""
    preview = ctl.election_preview(broker_name, broker_id)
    if preview is None:
        raise ActionError(f"{broker_name} is not managed by the controller", status=404)
    return preview


def audited(action):
    """Run an action in one transaction with the audit record it writes: if the record cannot be
    written, the change is rolled back (the caller sees an error and nothing changed)."""

    @functools.wraps(action)
    def run(*args, **kwargs):
        with transaction.atomic():
            return action(*args, **kwargs)

    return run


# What an election changes of a group's state as the pages show it (isolation and the acting master it
# leaves alone): the controller's answer carries these.
_ELECTED = ("masterBrokerId", "masterAddress", "masterEpoch", "syncStateSet", "syncStateSetEpoch")


def elect(actor: str, broker_name: str, broker_id: int | None) -> dict:
    """The controller's election as its REST and websocket calls run it (``api.elect_recorded``),
    audited with the state before and after. The state is read before the election's transaction and
    after its commit, never under the group's row lock; the record commits with the change, its
    ``after`` the state the election answered."""
    before = selectors.group_state(broker_name)
    if not before:
        raise ActionError(f"{broker_name} is not managed by the controller", status=404)
    request = {"brokerName": broker_name, "brokerId": broker_id, "designateElect": broker_id is not None}

    def record(answer: dict | None, refusal: Exception | None) -> None:
        result, detail, state = _election_outcome(answer, refusal)
        audit.record(
            actor,
            "elect_master",
            cluster_name=state.get("clusterName", ""),
            broker_name=broker_name,
            broker_id=broker_id,
            params={"brokerId": broker_id},
            before=before,
            after={**before, **{k: state[k] for k in _ELECTED if k in state}},
            result=result,
            detail=detail,
        )

    answer, refusal = None, None
    try:
        answer = controller_api.elect_recorded(request, Caller(actor), record)
    except ApiError as exc:  # a refusal, recorded with the change it made (if any)
        refusal = exc
    except ValidationError as exc:
        raise ActionError("invalid input", exc.detail) from exc
    result, detail, _ = _election_outcome(answer, refusal)
    after = selectors.group_state(broker_name) or {}
    return {"ok": result == "ok", "result": result, "detail": detail, "before": before, "after": after}


def _election_outcome(answer: dict | None, refusal: Exception | None) -> tuple[str, str, dict]:
    """An election's result as the audit log keeps it ("ok" or the code's name), its detail, and the
    state it answered (a refusal's: the state as it left it)."""
    if isinstance(refusal, ApiError):
        return refusal.rocketmq_code.name, str(refusal.detail), refusal.extra
    if refusal is not None or answer is None:
        return type(refusal).__name__, str(refusal), {}
    code = ResponseCode(answer["code"])
    return ("ok" if code == ResponseCode.SUCCESS else code.name), answer.get("detail", ""), answer


@audited
def isolate(actor: str, broker_name: str, broker_id: int, isolated: bool) -> dict:
    """The operation of controlplane/operations/isolation.py (as the REST endpoint), audited here with
    the state before and after; open pages hear of it through the controller's announcement."""
    try:
        outcome = isolation.isolate(broker_name, broker_id, isolated, by=actor)
    except isolation.UnknownGroup as exc:
        raise ActionError(f"unknown replica group {broker_name}", status=404) from exc
    except isolation.UnknownMember as exc:
        raise ActionError("no such broker in this group", {"brokerId": [f"not a member of {broker_name}"]}) from exc
    before, after = {"isolated": outcome.was_isolated}, {"isolated": outcome.isolated}
    result = "ok" if outcome.changed else "unchanged"
    audit.record(
        actor,
        "isolate" if isolated else "unisolate",
        cluster_name=outcome.target.cluster_name,
        broker_name=broker_name,
        broker_id=broker_id,
        params={"address": outcome.target.broker_addr},
        before=before,
        after=after,
        result=result,
    )
    return {"ok": True, "result": result, "before": before, "after": after}


@audited
def set_write_perm(actor: str, broker_name: str, writable: bool) -> dict:
    try:
        topics = ns_services.change_write_perm(broker_name, writeable=writable)
    except ns_services.UnknownBrokers as exc:
        raise ActionError(f"unknown replica group {broker_name}", status=404) from exc
    audit.record(
        actor,
        "add_write_perm" if writable else "wipe_write_perm",
        broker_name=broker_name,
        params={"writable": writable},
        after={"topicsChanged": topics},
        result="ok",
    )
    return {"ok": True, "result": "ok", "topicsChanged": topics, "before": {}, "after": {"writable": writable}}


@audited
def migrate_static_topic(actor: str, topic: str, data: dict) -> dict:
    """Preview or apply a move of a static topic's logical queues (the body of the REST migration,
    checked by the same serializer, carried out by the same service); an applied one is audited."""
    checked = MigrationSerializer(data=data)
    if not checked.is_valid():
        raise ActionError("invalid input", checked.errors)
    try:
        done = static_topics.migrate_checked(topic, checked.validated_data, actor=actor)
    except static_topics.StaticTopicRefused as exc:
        raise ActionError(f"{exc.code.value} {exc.code.name}: {exc.detail}", status=exc.http_status) from exc
    answer = wire.migration(done, static_topics.FILE_RESERVED_HOURS)
    if done.applied:
        audit.record(
            actor,
            "remap_static_topic",
            params={"topic": topic, **{k: v for k, v in data.items() if k != "preview"}},
            before={"epoch": done.before.epoch},
            after={"epoch": done.after.epoch, "moves": answer["moves"]},
            result="ok",
        )
    return {"ok": True, "result": "ok" if done.applied else "preview", **answer}


def change_static_topic(actor: str, topic: str, data: dict) -> dict:
    """Preview or apply more logical queues (``{"kind": "resize", "queueNums", ...}``) or the deletion of
    a static topic (``{"kind": "delete", ...}``), by the REST serializers and the same services; an
    applied change is audited."""
    kind, body = data.get("kind"), {k: v for k, v in data.items() if k != "kind"}
    if kind not in ("resize", "delete"):
        raise ActionError("invalid input", {"kind": ["resize or delete"]})
    checked = (QueueCountSerializer if kind == "resize" else StaticPreviewSerializer)(data=body)
    if not checked.is_valid():
        raise ActionError("invalid input", checked.errors)
    d, apply = checked.validated_data, not checked.validated_data["preview"]

    def run() -> static_topics.Change:
        if kind == "resize":
            return static_topics.resize(
                topic, d["queueNums"], d.get("brokerNames"), expected_epoch=d.get("epoch"), actor=actor, apply=apply
            )
        return static_topics.delete(topic, expected_epoch=d.get("epoch"), actor=actor, apply=apply)

    return _static_change(actor, f"{kind}_static_topic", {"topic": topic, **body}, run)


def make_static(actor: str, data: dict) -> dict:
    """Preview or turn an existing topic static (``{"topic", "preview"}``); an applied one is audited."""
    topic = data.get("topic")
    if not isinstance(topic, str) or not topic:
        raise ActionError("invalid input", {"topic": ["the name of an existing topic"]})
    checked = StaticPreviewSerializer(data={k: v for k, v in data.items() if k != "topic"})
    if not checked.is_valid():
        raise ActionError("invalid input", checked.errors)
    apply = not checked.validated_data["preview"]
    return _static_change(
        actor, "make_static_topic", {"topic": topic}, lambda: static_topics.adopt(topic, actor=actor, apply=apply)
    )


def _static_change(actor: str, action: str, params: dict, run) -> dict:
    """Carry out a static-topic change (``run()``, a ``static_topics.Change``); an applied one is audited
    in the same transaction; refusals as the REST API words them."""
    with transaction.atomic():
        try:
            done = run()
        except static_topics.StaticTopicRefused as exc:
            raise ActionError(f"{exc.code.value} {exc.code.name}: {exc.detail}", status=exc.http_status) from exc
        if done.applied:
            epochs = {"before": done.before and done.before.epoch, "after": done.after and done.after.epoch}
            audit.record(actor, action, params={k: v for k, v in params.items() if k != "preview"}, after=epochs, result="ok")
    shown = {k: None if m is None else wire.static_topic(m) for k, m in (("before", done.before), ("after", done.after))}
    return {"ok": True, "result": "ok" if done.applied else "preview", "applied": done.applied, **shown}


def _metadata(state) -> dict:
    return {
        "masterBrokerId": state.master_broker_id,
        "syncStateSet": sorted(state.sync_state_set),
        "replicas": {str(r.broker_id): r.broker_address for r in state.replicas},
    }


def preview_clean(broker_name: str, broker_ids: frozenset[int] | None) -> dict:
    """What cleaning ``broker_ids`` (None: the whole set) from the controller's metadata would remove,
    or why the controller refuses (a named id still alive; the whole set while it has a master): the
    controller's own rule on the set as it is now (read without the lock: the service decides again
    under it)."""
    state = ctl.replica_info(broker_name)
    if state is None:
        raise ActionError(f"{broker_name} is not managed by the controller", status=404)
    live = ctl.live_view(state)
    alive = [i for i, info in live.items() if info.alive]
    decision = rules.clean_broker_data(state, broker_ids, clean_living=False, alive=alive)
    removed = [
        {"brokerId": r.broker_id, "address": r.broker_address, "alive": r.broker_id in alive}
        for r in state.replicas
        if decision.new_state is not None and decision.new_state.replica(r.broker_id) is None
    ]
    after = decision.new_state
    return {
        "ok": decision.code == ResponseCode.SUCCESS,
        "result": "preview" if decision.code == ResponseCode.SUCCESS else ResponseCode(decision.code).name,
        "detail": decision.detail or "",
        "removed": removed,
        "dropsSet": bool(decision.extra.get("drop_set")) if decision.new_state is not None else False,
        "masterCleared": after is not None and state.master_broker_id is not None and after.master_broker_id is None,
        "before": _metadata(state),
        "after": None if after is None else _metadata(after),
    }


@audited
def clean(actor: str, broker_name: str, broker_ids: frozenset[int] | None) -> dict:
    """``CLEAN_BROKER_DATA`` (the service REST calls), audited with the metadata before and after; a
    refusal (an id still alive) changes nothing and is recorded with its code."""
    plan = preview_clean(broker_name, broker_ids)
    outcome = services.clean_broker_data(broker_name, set(broker_ids) if broker_ids else None, requested_by=actor)
    ok = outcome.code == ResponseCode.SUCCESS
    result = "ok" if ok else ResponseCode(outcome.code).name
    before = plan["before"]
    after = _metadata(outcome.state) if ok and outcome.state is not None else before
    removed = sorted(int(i) for i in set(before["replicas"]) - set(after["replicas"]))
    audit.record(
        actor,
        "clean_broker_data",
        cluster_name=outcome.state.cluster_name if outcome.state else "",
        broker_name=broker_name,
        params={"brokerIds": sorted(broker_ids) if broker_ids else None},
        before=before,
        after=after,
        result="ok" if ok else "refused",  # the code's name is longer than the column: it leads the detail
        detail=outcome.detail if ok else f"{int(outcome.code)} {result}: {outcome.detail}",
    )
    return {
        "ok": ok,
        "result": result,
        "detail": outcome.detail or "",
        "removedIds": removed,
        "droppedSet": ok and not after["replicas"],
        "before": before,
        "after": after,
    }
