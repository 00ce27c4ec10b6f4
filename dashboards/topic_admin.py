"""The Topics page's administration: create or update a topic on a cluster or on chosen broker sets,
and delete it. Both go through the nameserver's services (as REST does), with REST's checks (its
serializers); each previews first (nothing changes): an update shows each broker set's queues and
perm, old -> new, and what the change puts at risk; a delete shows the queues that go with their
messages and the consumer groups reading them. An applied change is audited in its transaction
(``actions.audited``)."""

from __future__ import annotations

from controlplane import audit
from mqrules import validation as v
from mqrules.topic_attributes import MESSAGE_TYPE
from nameserver import services as ns_services
from nameserver.core.perm import Perm
from nameserver.serializers import TopicUpdateSerializer

from . import selectors
from .actions import ActionError, audited

MAX_DELETE_BROKER_SETS = 1000


def _checked_update(data: dict) -> dict:
    checked = TopicUpdateSerializer(data={k: val for k, val in data.items() if k != "preview"})
    if not checked.is_valid():
        raise ActionError("invalid input", checked.errors)
    return dict(checked.validated_data)


def _targets(d: dict) -> list[tuple[str, str]]:
    """(brokerName, clusterName) of the broker sets an update goes to (the service's own choice)."""
    names = d.get("brokerNames")
    try:
        rows = ns_services.target_groups(d.get("clusterName"), names)
    except ns_services.UnknownBrokers as exc:
        if names:
            raise ActionError("invalid input", {"brokerNames": [f"unknown broker sets: {', '.join(exc.names)}"]}) from exc
        raise ActionError("invalid input", {"clusterName": [f"no broker set in cluster {d.get('clusterName')}"]}) from exc
    return [(r.broker_name, r.cluster_name) for r in rows]


def _update_warnings(before: dict | None, after: dict, offsets: dict[tuple[str, int], dict]) -> list[str]:
    """What an update of one broker set puts at risk (RocketMQ: consumers read the first readQueueNums
    queues, producers write the first writeQueueNums)."""
    if before is None:
        return []
    warnings = []
    if after["readQueueNums"] < before["readQueueNums"]:
        dropped = range(after["readQueueNums"], before["readQueueNums"])
        reported = [o for q in dropped if (o := offsets.get((before["brokerName"], q))) is not None]
        held = f"{sum(o['messages'] for o in reported)} messages" if reported else "messages: unknown, no report"
        warnings.append(
            f"queues {dropped.start}–{dropped.stop - 1} are no longer read: what they hold ({held}) "
            "stays unconsumed until readQueueNums grows again"
        )
    if after["writeQueueNums"] < before["writeQueueNums"]:
        warnings.append(f"producers stop writing to queues {after['writeQueueNums']}–{before['writeQueueNums'] - 1}")
    if before["perm"] & Perm.READ and not after["perm"] & Perm.READ:
        warnings.append("the topic becomes unreadable here: consumers stop")
    if before["perm"] & Perm.WRITE and not after["perm"] & Perm.WRITE:
        warnings.append("the topic becomes read-only here: sends are refused")
    if after["messageType"] != before["messageType"]:
        warnings.append(
            f"message type {before['messageType']} → {after['messageType']}: producers sending "
            f"{before['messageType']} messages are refused"
        )
    return warnings


def _update_plan(d: dict) -> list[dict]:
    targets = _targets(d)
    current = {q["brokerName"]: q for q in selectors.queue_datas(d["topicName"], [n for n, _ in targets])}
    offsets = {(q["brokerName"], q["queueId"]): q for q in selectors.topic_offsets(d["topicName"])} if current else {}
    attributes = d.get("attributes") or {}
    plan = []
    for name, cluster in targets:
        before = current.get(name)
        after = {
            "brokerName": name,
            "clusterName": cluster,
            "readQueueNums": d["readQueueNums"],
            "writeQueueNums": d["writeQueueNums"],
            "perm": d["perm"],
            "messageType": attributes.get(MESSAGE_TYPE) or (before["messageType"] if before else "NORMAL"),
        }
        plan.append({"brokerName": name, "before": before, "after": after, "warnings": _update_warnings(before, after, offsets)})
    return plan


@audited
def update_topic(actor: str, data: dict) -> dict:
    """Create or update a topic; ``data["preview"]``: only say what would change."""
    preview = data.get("preview", False)
    if (problem := v.boolean(preview)) is not None:
        raise ActionError("invalid input", {"preview": [problem]})
    d = _checked_update(data)
    plan = _update_plan(d)
    answer = {"topicName": d["topicName"], "changes": plan, "created": all(p["before"] is None for p in plan)}
    if preview:
        return {"ok": True, "result": "preview", **answer}
    try:
        names = ns_services.update_topic(d)
    except ns_services.UnknownBrokers as exc:  # a set gone since the plan was read
        raise ActionError("invalid input", {"brokerNames": [f"unknown broker sets: {exc}"]}) from exc
    audit.record(
        actor,
        "update_topic",
        cluster_name=d.get("clusterName") or "",
        broker_name=",".join(names),
        params={k: val for k, val in data.items() if k != "preview"},
        before={p["brokerName"]: p["before"] for p in plan},
        after={p["brokerName"]: p["after"] for p in plan},
        result="ok",
    )
    return {"ok": True, "result": "ok", **answer, "brokerNames": names}


def _checked_delete(topic: str, data: dict) -> tuple[list[str] | None, bool]:
    errors = {}
    if not v.is_name(topic):
        raise ActionError(f"no topic named {topic!r}", status=404)
    names = data.get("brokerNames")  # absent: everywhere; given, it names at least one set
    if names is not None and (
        not isinstance(names, list) or not 0 < len(names) <= MAX_DELETE_BROKER_SETS or not all(v.is_name(n) for n in names)
    ):
        errors["brokerNames"] = [f"a list of 1 to {MAX_DELETE_BROKER_SETS} broker set names"]
    preview = data.get("preview", False)
    if (problem := v.boolean(preview)) is not None:
        errors["preview"] = [problem]
    if errors:
        raise ActionError("invalid input", errors)
    return names, preview


def delete_plan(topic: str, broker_names: list[str] | None) -> dict:
    """What deleting ``topic`` (everywhere, or on the named broker sets) puts at risk: its queues and
    the messages in them (per queue, as the brokers report them; ``unreported``: the sets no broker
    reports for, whose messages are unknown), and the consumer groups reading them with their lag."""
    sets = selectors.queue_datas(topic, broker_names)
    if not sets:
        raise ActionError(f"topic {topic} has no queue data there", status=404)
    in_scope = {s["brokerName"] for s in sets}
    queues = [q for q in selectors.topic_offsets(topic) if q["brokerName"] in in_scope]
    return {
        "topic": topic,
        "scope": sorted(broker_names) if broker_names else "everywhere",
        "brokerSets": sets,
        "queueCount": sum(max(s["readQueueNums"], s["writeQueueNums"]) for s in sets),  # a broker holds them all
        "queues": queues,
        "messages": sum(q["messages"] for q in queues),
        "unreported": sorted(in_scope - {q["brokerName"] for q in queues}),  # their messages: unknown
        "consumerGroups": selectors.groups_reading(topic, in_scope),
    }


@audited
def delete_topic(actor: str, topic: str, data: dict) -> dict:
    broker_names, preview = _checked_delete(topic, data)
    plan = delete_plan(topic, broker_names)
    if preview:
        return {"ok": True, "result": "preview", **plan}
    deleted = ns_services.delete_topic(topic, broker_names=broker_names)
    if not deleted:
        raise ActionError(f"topic {topic} has no queue data there", status=404)
    audit.record(
        actor,
        "delete_topic",
        broker_name=",".join(s["brokerName"] for s in plan["brokerSets"]),
        params={"topic": topic, "brokerNames": broker_names},
        before={"brokerSets": plan["brokerSets"], "messages": plan["messages"]},
        after={"deletedQueueDatas": deleted},
        result="ok",
    )
    return {"ok": True, "result": "ok", **plan, "deletedQueueDatas": deleted}
