"""A broker's status report (the ``broker_status`` frame, docs/websocket.md) and what is read out of
it: the rules, pure. The report says how the broker runs, its configuration, its queues' min / max
offsets and its consumer offset table; consumer progress (mqadmin ``consumerProgress``) and topic
status (``topicStatus``) are computed here from the reports of the brokers that serve each set.

Checked by hand rather than by DRF serializers: every broker sends one every two seconds, with a row
per queue and per (group, queue)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from mqrules import validation as v
from mqrules.keyed_config import BROKER_SECRET_KEYS

from .clients import parse_clients

MAX_QUEUE_ROWS = 100_000
MAX_OFFSET_ROWS = 200_000
MAX_CONFIG_KEYS = 500
CONFIG_VALUE_MAX = 4096
STALE_AFTER_INTERVALS = 3  # a report older than this many of its broker's intervals is stale
DEFAULT_INTERVAL_MS = 2000


class MetaMode(StrEnum):
    """How a broker keeps its consumer metadata, as it reports it (``status.metaMode``;
    brokers/metalog.py): the serving master writes it, a slave follows it, and a slave acting for its
    dead master (RIP-32) serves from what it followed."""

    WRITER = "WRITER"
    FOLLOWER = "FOLLOWER"
    ACTING = "ACTING"


_HEAD: dict[str, v.Check] = {
    "clusterName": v.name,
    "brokerName": v.name,
    "brokerId": v.integer(),
    "brokerAddr": v.addr,
}
_STATUS_TEXT = {"role", "metaMode", "writeRefusal", "storeCodec"}
_STATUS_INT = {
    "masterEpoch",
    "commitLogMinOffset",
    "commitLogMaxOffset",
    "confirmOffset",
    "startedAtMs",
    "uptimeMs",
    "pid",
    "topics",
    "consumerGroups",
}
_STATUS_BOOL = {"writable", "isolated"}
# Where Prometheus scrapes the broker (metricsPromExporterHost:Port; null when metricsExporterType is
# DISABLE): the control plane lists it as a target (controlplane/operations/metrics.py).
_STATUS_ADDR = {"metricsAddr"}
_STATUS_TEXT_MAX = 300


# status.store (brokers/retention.py): the disk against the three ratios, the retention horizon, deletions.
_STORE_INT = {
    "diskTotalBytes",
    "diskUsedBytes",
    "diskMaxUsedSpaceRatio",
    "diskSpaceCleanForciblyRatio",
    "diskSpaceWarningLevelRatio",
    "retentionMs",
    "oldestMessageMs",
    "commitLogBytes",
    "bytesDeletedLastHour",
    "filesDeletedTotal",
    "bytesDeletedTotal",
}
_STORE_FLOAT = {"diskUsedRatio", "writeBytesPerS", "secondsUntilFull"}
_STORE_BOOL = {"diskFull"}
_STORE_TEXT = {"diskPath"}


def _store(raw: object) -> dict:
    """``status.store``'s known fields, type-checked (null allowed); unknown ones are dropped."""
    if not isinstance(raw, dict):
        raise v.Invalid(["must be an object"])
    out: dict = {}
    for k, value in raw.items():
        if value is None:
            bad = None
        elif k in _STORE_INT:
            bad = None if type(value) is int and 0 <= value <= v.LONG_MAX else "must be an integer >= 0"
        elif k in _STORE_FLOAT:
            bad = None if type(value) in (int, float) and 0 <= value < 1e18 else "must be a number >= 0"
        elif k in _STORE_BOOL:
            bad = v.boolean(value)
        elif k in _STORE_TEXT:
            bad = v.text(_STATUS_TEXT_MAX)(value)
        else:
            continue
        if bad is not None:
            raise v.Invalid({f"store.{k}": [bad]})
        out[k] = value
    return out


def _status(raw: object) -> dict:
    """The known status fields, type-checked (null allowed); unknown ones are dropped."""
    if not isinstance(raw, dict):
        raise v.Invalid(["must be an object"])
    out: dict = {}
    errors: dict = {}
    for k, value in raw.items():
        if value is None:
            out[k] = None
            continue
        if k == "store":
            try:
                out[k] = _store(value)
            except v.Invalid as exc:
                errors[k] = exc.fields
            continue
        if k in _STATUS_TEXT:
            bad = v.text(_STATUS_TEXT_MAX)(value)
        elif k in _STATUS_INT:
            bad = None if type(value) is int and -1 <= value <= v.LONG_MAX else "must be an integer"
        elif k in _STATUS_BOOL:
            bad = v.boolean(value)
        elif k in _STATUS_ADDR:
            bad = v.addr(value)
        else:
            continue
        if bad is not None:
            errors[k] = [bad]
        else:
            out[k] = value
    if errors:
        raise v.Invalid(errors)
    return {k: out[k] for k in out if k in _STATUS_TEXT | _STATUS_INT | _STATUS_BOOL | _STATUS_ADDR | {"store"}}


def _config(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict) or len(raw) > MAX_CONFIG_KEYS:
        raise v.Invalid([f"must be an object of at most {MAX_CONFIG_KEYS} keys"])
    out = {}
    for k, value in raw.items():
        if not isinstance(k, str) or not k.isidentifier() or len(k) > 100:
            raise v.Invalid({"key": ["config keys are broker.conf key names"]})
        if (bad := v.text(CONFIG_VALUE_MAX)(value)) is not None:
            raise v.Invalid({k: [bad]})
        if k not in BROKER_SECRET_KEYS:
            out[k] = value
    return out


def _rows(raw: object, names: int, limit: int, what: str, optional: int = 0) -> list[list]:
    """``[name, ..., queueId, offset, ...]`` rows of four: ``names`` leading names, then non-negative
    integers; up to ``optional`` more at the end, each an integer or null (older brokers leave them
    out). Every broker sends tens of thousands every few seconds, the same names over and over: a name
    is checked once per report."""
    if not isinstance(raw, list) or len(raw) > limit:
        raise v.Invalid([f"must be a list of at most {limit} {what} rows"])
    good: set[str] = set()
    top = v.LONG_MAX
    for n, row in enumerate(raw):
        ok = type(row) is list and 4 <= len(row) <= 4 + optional
        if ok:
            for x in row[:names]:
                if type(x) is not str:
                    ok = False
                    break
                if x not in good:
                    if not v.is_name(x):
                        ok = False
                        break
                    good.add(x)
        if ok:
            for x in row[names:4]:
                if type(x) is not int or x < 0 or x > top:
                    ok = False
                    break
            for x in row[4:]:
                if x is not None and (type(x) is not int or x < 0 or x > top):
                    ok = False
        if not ok:
            shape = (
                "[topic, queueId, minOffset, maxOffset, oldestMessageMs]"
                if names == 1
                else "[group, topic, queueId, committedOffset]"
            )
            raise v.Invalid({str(n): [f"a {what} row is {shape}: names, then integers >= 0"]})
    return raw


def parse_report(payload: object) -> dict:
    """A ``broker_status`` payload, checked; raises ``v.Invalid`` with every field's error."""
    if not isinstance(payload, dict):
        raise v.Invalid(["must be an object"])
    head, errors = v.json_object(payload, _HEAD)
    report = dict(head)
    for field, parse in (
        ("status", _status),
        ("config", _config),
        ("queues", lambda raw: _rows(raw, 1, MAX_QUEUE_ROWS, "queue", optional=1)),
        ("offsets", lambda raw: _rows(raw, 2, MAX_OFFSET_ROWS, "offset")),
    ):
        try:
            report[field] = parse(payload.get(field, [] if field in ("queues", "offsets") else {}))
        except v.Invalid as exc:
            errors[field] = exc.fields
    try:
        report["clients"] = parse_clients(payload.get("clients", []))  # docs/messages.md §4
    except v.Invalid as exc:
        errors["clients"] = exc.fields
    keys = payload.get("dynamicKeys", [])
    if isinstance(keys, list) and len(keys) <= MAX_CONFIG_KEYS and all(isinstance(k, str) and k.isidentifier() for k in keys):
        report["dynamicKeys"] = sorted(set(keys) - BROKER_SECRET_KEYS)
    else:
        errors["dynamicKeys"] = ["must be a list of broker.conf key names"]
    if errors:
        raise v.Invalid(errors)
    return report


def interval_ms(report: dict) -> int:
    raw = report.get("config", {}).get("brokerStatusReportInterval", "")
    return int(raw) if raw.isdigit() and 0 < int(raw) < 3_600_000 else DEFAULT_INTERVAL_MS


def is_stale(report: dict, reported_at_ms: int, now_ms: int) -> bool:
    return now_ms - reported_at_ms > STALE_AFTER_INTERVALS * interval_ms(report) + 1000


def serving_rank(report: dict, now_ms: int) -> tuple[bool, int, int]:
    """Which of a set's reports speaks for its consumer state: a fresh one before a stale one (a dead
    master's last report goes stale while its slave acts for it), then the master writing its
    metadata, then an acting master, then any; the newest among equals."""
    mode = report.get("status", {}).get("metaMode")
    at = report.get("reportedAtMs", 0)
    return not is_stale(report, at, now_ms), (2 if mode == MetaMode.WRITER else 1 if mode == MetaMode.ACTING else 0), at


def serving_reports(reports: Iterable[dict], now_ms: int) -> dict[str, dict]:
    """Per broker set, the report that speaks for it (``serving_rank``)."""
    best: dict[str, dict] = {}
    for r in reports:
        current = best.get(r["brokerName"])
        if current is None or serving_rank(r, now_ms) > serving_rank(current, now_ms):
            best[r["brokerName"]] = r
    return best


@dataclass(frozen=True)
class QueueProgress:
    group: str
    topic: str
    broker_name: str
    served_by: int  # the id of the broker whose report this is
    queue_id: int
    committed_offset: int
    max_offset: int | None  # None: the queue is not in the report (a topic deleted since)
    stale: bool
    min_offset: int | None = None  # the queue's first offset kept (retention moves it)

    @property
    def behind_horizon(self) -> bool:
        """The group's backlog reaches below what retention keeps: its next pop skips forward."""
        return self.min_offset is not None and self.committed_offset < self.min_offset

    @property
    def lag(self) -> int:
        """mqadmin's diff: messages stored and not yet consumed (never negative)."""
        return max(0, (self.max_offset or 0) - self.committed_offset) if self.max_offset is not None else 0

    def as_dict(self) -> dict:
        return {
            "topic": self.topic,
            "brokerName": self.broker_name,
            "servedBy": self.served_by,
            "queueId": self.queue_id,
            "committedOffset": self.committed_offset,
            "maxOffset": self.max_offset,
            "lag": self.lag,
            "stale": self.stale,
            "minOffset": self.min_offset,
            "behindHorizon": self.behind_horizon,
        }


def progress(serving: dict[str, dict], group: str | None = None) -> list[QueueProgress]:
    """Every (group, queue) of the serving reports (of ``group`` only, if given), in group, topic,
    broker set, queue order. Each report carries ``stale`` (set by the reader)."""
    rows = []
    for broker_name, r in serving.items():
        max_of = {(q[0], q[1]): q[3] for q in r.get("queues", ())}
        min_of = {(q[0], q[1]): q[2] for q in r.get("queues", ())}
        stale = r.get("stale", False)
        for g, topic, queue_id, committed in r.get("offsets", ()):
            if group is None or g == group:
                key = (topic, queue_id)
                row = QueueProgress(
                    g, topic, broker_name, r["brokerId"], queue_id, committed, max_of.get(key), stale, min_of.get(key)
                )
                rows.append(row)
    rows.sort(key=lambda p: (p.group, p.topic, p.broker_name, p.queue_id))
    return rows


def groups_summary(rows: list[QueueProgress]) -> list[dict]:
    """One line per consumer group: its topics, queues, committed and max offsets summed, total lag."""
    out: list[dict] = []
    current: dict | None = None
    for p in rows:  # sorted by group
        if current is None or current["group"] != p.group:
            current = {
                "group": p.group,
                "topics": [],
                "queues": 0,
                "committedOffset": 0,
                "maxOffset": 0,
                "lag": 0,
                "stale": False,
                "behindHorizon": False,
            }
            out.append(current)
        if p.topic not in current["topics"]:
            current["topics"].append(p.topic)
        current["queues"] += 1
        current["committedOffset"] += p.committed_offset
        current["maxOffset"] += p.max_offset or 0
        current["lag"] += p.lag
        current["stale"] = current["stale"] or p.stale
        current["behindHorizon"] = current["behindHorizon"] or p.behind_horizon
    return out


def topic_horizons(queues: list[list]) -> dict[str, int]:
    """Per topic, when its oldest message kept was stored (the queue rows' fifth element; topics
    whose queues carry none are left out): the retention horizon the broker page shows."""
    out: dict[str, int] = {}
    for row in queues:
        if len(row) > 4 and row[4] is not None:
            out[row[0]] = min(out.get(row[0], row[4]), row[4])
    return out


def topic_queues(serving: dict[str, dict], topic: str) -> list[dict]:
    """mqadmin ``topicStatus``: each queue of ``topic`` with its min and max offsets, per broker set."""
    rows = [
        {"brokerName": name, "queueId": q[1], "minOffset": q[2], "maxOffset": q[3], "stale": r.get("stale", False)}
        for name, r in serving.items()
        for q in r.get("queues", ())
        if q[0] == topic
    ]
    rows.sort(key=lambda q: (q["brokerName"], q["queueId"]))
    return rows
