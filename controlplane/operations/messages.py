"""Finding messages (docs/messages.md §5): mqadmin's queryMsgByKey, queryMsgByUniqueKey, printMsg,
queryMsgById, queryMsgByOffset and queryMsgTraceById, for REST, ``rmqha`` and the dashboard alike.

A topic's broker sets come from the nameserver's registry (its queues), each set's replicas and whether
they are alive from its liveness; each set is asked once (``controlplane.broker_rpc``): its master, or
the next alive replica when the master does not answer (a slave holds the same log: after a failover it
answers for the set). The answers are merged by message_rules. A set none of whose replicas answers
makes a 503 when it was the only one asked; with other sets answering, the answer names it in
``failed``."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass

from django.conf import settings

from controlplane import broker_rpc
from mqrules import validation as v
from mqrules.codes import ResponseCode
from nameserver import broker_status, route_cache
from nameserver import liveness as ns_liveness
from nameserver import selectors as ns_selectors
from nameserver.core.values import Group

from . import message_rules as rules
from .refused import Refused

NOT_FOUND = ResponseCode.TOPIC_NOT_EXIST  # 17: RocketMQ's answer to a message that is not there
UNAVAILABLE = ResponseCode.SERVICE_NOT_AVAILABLE
FALLBACK_SETS = 64  # sets asked for a message whose store host the registry no longer lists


class MessageError(Refused):
    """A lookup refused or failed (400 with fields, 404 with 17, 503 with 14)."""

    def __init__(self, status: int, detail: str, fields: dict | None = None, code: int = ResponseCode.INVALID_PARAMETER):
        super().__init__(status, code, detail, fields)


def invalid(exc: v.Invalid) -> MessageError:
    fields = exc.fields if isinstance(exc.fields, dict) else {v.NON_FIELD: exc.fields}
    return MessageError(400, "invalid input", fields)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Replica:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    channel: str | None

    def ask(self, kind: str, payload: dict) -> dict:
        return broker_rpc.call(self.channel, kind, payload, settings.BROKER_RPC_TIMEOUT_SECONDS)

    def label(self) -> str:
        return f"{self.broker_name}[{self.broker_id}] {self.broker_addr}"


def replicas(group: Group, prefer_addr: str | None = None) -> list[Replica]:
    """The set's alive replicas with a websocket to the control plane, in the order they are asked: the
    one at ``prefer_addr`` (the broker that stored a message), then the master, then the others by id."""
    members = {ns_liveness.member(group.cluster_name, m.broker_addr): m for m in group.members}
    alive = ns_liveness.alive(list(members))
    channels = ns_liveness.connections(sorted(alive))
    out = [
        Replica(group.cluster_name, group.broker_name, m.broker_id, m.broker_addr, channels.get(key))
        for key, m in members.items()
        if key in alive and channels.get(key)
    ]
    return sorted(out, key=lambda r: (r.broker_addr != prefer_addr, r.broker_id != 0, r.broker_id))


def cluster_sets(cluster: str, names: list[str] | None = None) -> dict[str, Group]:
    """The cluster's broker sets (or the named ones), from this process's copy of the registry while
    the registry is unchanged (nameserver/route_cache.py: one Redis read), as routes are answered."""
    wanted = tuple(sorted(names)) if names is not None else None
    return route_cache.cached(("message-sets", cluster, wanted), lambda: ns_selectors.groups_by_name(names, cluster_name=cluster))


def topic_sets(cluster: str, topic: str) -> dict[str, Group]:
    """The broker sets of ``cluster`` holding queues of ``topic``; 404 (17) when none does."""
    names = route_cache.cached(("message-topic-sets", topic), lambda: ns_selectors.topic_broker_sets(topic))
    sets = cluster_sets(cluster, names) if names else {}
    if not sets:
        raise MessageError(404, f"topic {topic} has no queues in cluster {cluster}", code=NOT_FOUND)
    return sets


def _refusal(replica: Replica, exc: broker_rpc.BrokerRefused) -> MessageError:
    who = replica.label()
    if exc.code == NOT_FOUND:
        return MessageError(404, f"{exc.detail} ({who})", code=NOT_FOUND)
    if exc.code == ResponseCode.INVALID_PARAMETER:
        return MessageError(400, f"broker {who} refused: {exc.detail}", exc.fields or {v.NON_FIELD: [exc.detail]})
    return MessageError(409, f"broker {who} refused: {exc.code} {exc.name}: {exc.detail}", code=exc.code)


def ask_set(group: Group, kind: str, payload: dict, prefer_addr: str | None = None) -> tuple[dict, Replica]:
    """Ask one broker set: each alive replica in turn until one answers. A refusal is final (the replicas
    hold the same log); none answering is a 503 (14)."""
    tried = []
    for replica in replicas(group, prefer_addr):
        try:
            return replica.ask(kind, payload), replica
        except broker_rpc.BrokerRefused as exc:
            raise _refusal(replica, exc) from exc
        except broker_rpc.BrokerUnreachable as exc:
            tried.append(f"{replica.label()}: {exc}")
    why = "; ".join(tried) if tried else "no replica is alive and connected to the control plane"
    raise MessageError(503, f"broker set {group.broker_name} did not answer ({why})", code=UNAVAILABLE)


def ask_sets(sets: dict[str, Group], kind: str, payload: dict) -> tuple[dict[str, dict], list[dict]]:
    """Ask every set; (answers by set, the sets that did not answer). Every set silent: the 503."""
    answers, failed = {}, []
    last: MessageError | None = None
    for name, group in sorted(sets.items()):
        try:
            answers[name] = ask_set(group, kind, payload)[0]
        except MessageError as exc:
            if exc.status != 503:
                raise
            last = exc
            failed.append({"brokerName": name, "error": exc.detail})
    if not answers and last is not None:
        raise last
    return answers, failed


# --- queries ----------------------------------------------------------------------------------------


def query(cluster: str, q: rules.Query) -> dict:
    """queryMsgByKey / queryMsgByUniqueKey / printMsg over the topic's sets: ``{"messages", "truncated"}``
    (and ``failed``: sets that did not answer, when others did)."""
    answers, failed = ask_sets(topic_sets(cluster, q.topic), q.kind, q.payload())
    messages, cut = rules.merge(
        (a.get("messages", []) for a in answers.values()), q.max_num, newest_first=q.by is not rules.By.TIME
    )
    out = {"messages": messages, "truncated": cut or any(a.get("truncated") for a in answers.values())}
    return {**out, "failed": failed} if failed else out


def plan(topic, key, unique_key, begin, end, max_num) -> rules.Query:
    try:
        return rules.plan_query(topic, key, unique_key, begin, end, max_num, now_ms())
    except v.Invalid as exc:
        raise invalid(exc) from None


@dataclass(frozen=True)
class Found:
    view: dict  # the broker's detailed view (body: base64 of its first bytes)
    group: Group  # the set holding it
    replica: Replica  # who answered


def _view(group: Group, offset: int, body_bytes: int, prefer_addr: str | None) -> Found:
    answer, replica = ask_set(group, "view_message", {"commitLogOffset": offset, "bodyBytes": body_bytes}, prefer_addr)
    return Found(answer, group, replica)


def find_by_id(cluster: str, msg_id: str, body_bytes: int = rules.PREVIEW_BYTES) -> Found:
    """queryMsgById: the offset id names the broker that stored it (any replica of its set answers)."""
    try:
        decoded = rules.decode_msg_id(msg_id)
    except v.Invalid as exc:
        raise invalid(exc) from None
    addr = rules.store_addr(decoded)
    sets = cluster_sets(cluster)
    holding = [g for g in sets.values() if any(m.broker_addr == addr for m in g.members)]
    if holding:
        return _view(holding[0], decoded.commit_log_offset, body_bytes, addr)
    # A store host the registry no longer lists (its broker left, e.g. a dead master after a failover): a
    # set whose copy of the record carries that host.
    for group in list(sets.values())[:FALLBACK_SETS]:
        try:
            found = _view(group, decoded.commit_log_offset, body_bytes, None)
        except MessageError as exc:
            if exc.status in (404, 503):
                continue
            raise
        if found.view.get("storeHost") == addr:
            return found
    raise MessageError(404, f"no message {msg_id}: no broker set of cluster {cluster} stored it at {addr}", code=NOT_FOUND)


def find(cluster: str, msg_id: str, body_bytes: int = rules.PREVIEW_BYTES, topic: str | None = None) -> Found:
    """queryMsgById as RocketMQ's admin does it (MQAdminImpl.viewMessage(topic, msgId)): an offset id is
    decoded; with ``topic``, an id that is no offset id, or names no stored message, is taken for the
    client's message id (its unique key) and the newest message of ``topic`` with it is the answer."""
    try:
        return find_by_id(cluster, msg_id, body_bytes)
    except MessageError as exc:
        if topic is None or exc.status not in (400, 404):
            raise
    hits = query(cluster, plan(topic, None, msg_id, None, None, 1))["messages"]
    if not hits:
        raise MessageError(404, f"no message {msg_id} of topic {topic}: neither an offset id nor a unique key", code=NOT_FOUND)
    return find_by_offset(cluster, hits[0]["brokerName"], hits[0]["commitLogOffset"], body_bytes)


def find_by_offset(cluster: str, broker_name: str, offset: int, body_bytes: int = rules.PREVIEW_BYTES) -> Found:
    """queryMsgByOffset: the record at ``offset`` of the set's commit log."""
    group = cluster_sets(cluster, [broker_name]).get(broker_name)
    if group is None:
        raise MessageError(404, f"no broker set {broker_name} in cluster {cluster}", code=ResponseCode.BROKER_NOT_EXIST)
    return _view(group, offset, body_bytes, None)


def detailed(found: Found) -> dict:
    """The view as REST answers it: the body previewed (text, JSON or hex) in place of its base64."""
    view = dict(found.view)
    raw = base64.b64decode(view.pop("body", "") or "")
    truncated = bool(view.pop("bodyTruncated", False))
    view["body"] = rules.body_preview(raw, view.get("bodySize", len(raw)), truncated)
    return view


def body(found: Found) -> bytes:
    return base64.b64decode(found.view.get("body", "") or "")


# --- trace ------------------------------------------------------------------------------------------


def trace_groups(cluster: str, topic: str) -> list[str]:
    """The groups subscribed to ``topic``: offsets committed on it, a retry topic of it, clients subscribing now."""
    readers = [r["group"] for r in broker_status.topic_readers(topic, cluster_name=cluster)]
    names = ns_selectors.topics(cluster).keys()
    consumers = broker_status.connected_clients(cluster, topic=topic)["consumers"]
    return rules.trace_groups(topic, readers, names, [c["group"] for c in consumers])


def trace(cluster: str, msg_id: str, groups: list[str] | None = None, topic: str | None = None) -> dict:
    """queryMsgTraceById: ``{"message": view, "groups": {group: trace}}`` for every group subscribed to
    the message's topic (or the named ones), from the set that stored it (``find``: ``topic`` lets
    ``msg_id`` be the client's message id)."""
    found = find(cluster, msg_id, 0, topic)
    view = {k: val for k, val in found.view.items() if k not in ("body", "bodyTruncated")}
    wanted = groups if groups else trace_groups(cluster, view["topic"])
    if not wanted:
        return {"message": view, "groups": {}}
    payload = {
        "topic": view["topic"],
        "queueId": view["queueId"],
        "queueOffset": view["queueOffset"],
        "uniqKey": view.get("uniqKey"),
        "storeTimestamp": view["storeTimestamp"],
        "groups": wanted,
    }
    answer, _ = ask_set(found.group, "message_trace", payload, found.replica.broker_addr)
    return {"message": view, "groups": answer.get("groups", {})}
