"""The clients connected to the brokers (docs/messages.md §4 and §5): the ``clients`` part of a
``broker_status`` report, checked, and the rows an operator reads, one per (group, client), merged over
the brokers that know the client (mqadmin ``producerConnection`` / ``consumerConnection``). Pure.

A report's entry: ``{"clientId", "language", "version", "address", "protocol", "lastSeenMs",
"producerGroups", "consumerGroups", "topics", "subscriptions": {group: [{topic, expression, type}]},
"queues": {group: [[topic, queueId]]}}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mqrules import validation as v

MAX_CLIENTS = 20_000  # per broker
MAX_NAMES = 2_000  # groups, topics, subscriptions or held queues of one client
ID_MAX = 255
SHORT_MAX = 128
EXPRESSION_MAX = v.TEXT_MAX_LENGTH
PROTOCOLS = ("grpc", "remoting")

_text_id = v.text(ID_MAX)


def _id(value: object) -> str | None:
    return "must not be empty" if value == "" else _text_id(value)


_short = v.text(SHORT_MAX)
_address = v.text(v.ADDR_MAX_LENGTH)


def _names(raw: object) -> str | None:
    if not isinstance(raw, list) or len(raw) > MAX_NAMES:
        return f"must be a list of at most {MAX_NAMES} names"
    return next((f"[{i}]: {bad}" for i, x in enumerate(raw) if (bad := _id(x)) is not None), None)


def _subscriptions(raw: object) -> str | None:
    if not isinstance(raw, dict) or len(raw) > MAX_NAMES:
        return f"must be an object of at most {MAX_NAMES} groups"
    for group, subs in raw.items():
        if _id(group) is not None or not isinstance(subs, list) or len(subs) > MAX_NAMES:
            return f"{str(group)[:ID_MAX]}: a group's subscriptions are a list"
        for s in subs:
            ok = isinstance(s, dict) and _id(s.get("topic")) is None and _short(s.get("type")) is None
            if not ok or v.text(EXPRESSION_MAX)(s.get("expression")) is not None:
                return f"{group}: a subscription is {{topic, expression, type}}"
    return None


def _queues(raw: object) -> str | None:
    if not isinstance(raw, dict) or len(raw) > MAX_NAMES:
        return f"must be an object of at most {MAX_NAMES} groups"
    for group, rows in raw.items():
        if _id(group) is not None or not isinstance(rows, list) or len(rows) > MAX_NAMES:
            return f"{str(group)[:ID_MAX]}: a group's queues are a list"
        for row in rows:
            if not (
                isinstance(row, list) and len(row) == 2 and _id(row[0]) is None and type(row[1]) is int and 0 <= row[1] < 2**31
            ):
                return f"{group}: a held queue is [topic, queueId]"
    return None


_FIELDS: dict[str, v.Check] = {
    "clientId": _id,
    "language": _short,
    "version": _short,
    "address": _address,
    "protocol": v.one_of(PROTOCOLS),
    "lastSeenMs": v.integer(),
    "producerGroups": _names,
    "consumerGroups": _names,
    "topics": _names,
    "subscriptions": _subscriptions,
    "queues": _queues,
}


def parse_clients(raw: object) -> list[dict]:
    """A report's ``clients``, checked (raises ``v.Invalid`` naming the entry and its field)."""
    if not isinstance(raw, list) or len(raw) > MAX_CLIENTS:
        raise v.Invalid([f"must be a list of at most {MAX_CLIENTS} clients"])
    out = []
    for n, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise v.Invalid({str(n): ["a client is an object"]})
        errors = {k: [bad] for k, check in _FIELDS.items() if (bad := check(entry.get(k))) is not None}
        if errors:
            raise v.Invalid({str(n): errors})
        out.append({k: entry[k] for k in _FIELDS})
    return out


@dataclass(frozen=True)
class BrokerClients:
    """What one broker of a set reported (``clients``: parse_clients's entries)."""

    broker_name: str
    clients: list[dict]


def _row(group: str, c: dict) -> dict:
    return {
        "group": group,
        "clientId": c["clientId"],
        "language": c["language"],
        "version": c["version"],
        "address": c["address"],
        "protocol": c["protocol"],
        "lastSeenMs": c["lastSeenMs"],
        "brokerNames": [],
    }


def _touches(c: dict, group: str, topic: str | None) -> bool:
    if topic is None:
        return True
    subs = c["subscriptions"].get(group, [])
    return topic in c["topics"] or any(s["topic"] == topic for s in subs) or (group == topic and group in c["producerGroups"])


def connections(reports: Iterable[BrokerClients], group: str | None = None, topic: str | None = None) -> dict:
    """``{"producers": [...], "consumers": [...]}``: one row per (group, clientId), over every broker
    that knows it (``brokerNames``), last seen the latest any saw; a consumer's subscriptions and the
    queues it holds ([brokerName, topic, queueId]). ``group`` / ``topic``: only those groups, only
    clients that publish or subscribe to that topic."""
    rows: dict[tuple[str, str, str], dict] = {}
    for report in reports:
        for c in report.clients:
            for kind, groups in (("producers", c["producerGroups"]), ("consumers", c["consumerGroups"])):
                for g in groups:
                    if (group is not None and g != group) or not _touches(c, g, topic):
                        continue
                    row = rows.setdefault((kind, g, c["clientId"]), _row(g, c))
                    if c["lastSeenMs"] > row["lastSeenMs"]:
                        row.update(_row(g, c), brokerNames=row["brokerNames"])
                    if report.broker_name not in row["brokerNames"]:
                        row["brokerNames"].append(report.broker_name)
                    if kind == "consumers":
                        _consumer_parts(row, report.broker_name, c, g)
    out: dict[str, list[dict]] = {"producers": [], "consumers": []}
    for (kind, _, _), row in sorted(rows.items()):
        row["brokerNames"].sort()
        out[kind].append(row)
    return out


def _consumer_parts(row: dict, broker_name: str, c: dict, group: str) -> None:
    subs = row.setdefault("subscriptions", [])
    for s in c["subscriptions"].get(group, []):
        entry = {"topic": s["topic"], "expression": s["expression"], "type": s["type"]}
        if entry not in subs:
            subs.append(entry)
    queues = row.setdefault("queues", [])
    for topic, queue_id in c["queues"].get(group, []):
        held = [broker_name, topic, queue_id]
        if held not in queues:
            queues.append(held)
    queues.sort()
