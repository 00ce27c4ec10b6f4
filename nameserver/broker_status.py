"""The latest status report of each broker (the ``broker_status`` frame; rules in
``nameserver.core.broker_status``), kept in Redis, and the reads made of it: broker status and config
(mqadmin ``brokerStatus`` / ``getBrokerConfig``), consumer progress (``consumerProgress``) and the
per-queue min / max offsets of a topic (``topicStatus``).

Per broker four strings, ``ns:bs:<cluster>/<addr>:head`` (status, config, dynamic keys: small, read by
the broker pages), ``...:data`` (queues and offsets: read for progress) and ``...:mode`` (its
metaMode and the few config keys read for every set at once, ``SUMMARY_CONFIG_KEYS``: the overview and
the metrics, whose thousand sets would otherwise read every broker's config), ``...:clients`` (the
clients connected to it: ``connected_clients``, docs/messages.md §4), and one index
``ns:bs-index`` of members scored by report time. Stamps are Redis's clock, as liveness's are. A
report lives ``TTL_MILLIS`` after its last refresh: long enough that a dead master's last offsets
are still shown (as stale) while its set has no master, short enough that a broker gone for good
leaves the pages on its own.

Beside them, hash ``ns:metrics-targets`` keeps each broker's last reported ``status.metricsAddr``
(member -> {metricsAddr, brokerName, brokerId}) beyond the report's lifetime: Prometheus keeps
scraping a dead broker's exporter, so that ``up`` shows it down (``metrics_targets``).
"""

from __future__ import annotations

import json
from collections.abc import Collection

from controlplane.redis import LUA_NOW_MS, async_client, key, sync_client

from . import liveness
from .core import broker_status as core
from .core import clients as clients_core
from .core.acting import ReportedMode

TTL_MILLIS = 600_000
# The config keys the small ``:mode`` record keeps: the report interval (is_stale) and the master's
# quorum keys (the headroom, controlplane/operations/headroom.py).
SUMMARY_CONFIG_KEYS = frozenset({"brokerStatusReportInterval", "inSyncReplicas", "minInSyncReplicas", "allAckInSyncStateSet"})

# KEYS: head, data, index, mode, metrics targets, clients. ARGV: ttl ms, member, head JSON, data JSON, mode
# JSON, metrics target JSON ('' when the report says nothing of it, '-' when it has none: metricsAddr
# null), clients JSON.
_STORE = (
    LUA_NOW_MS
    + """
local ttl = tonumber(ARGV[1])
redis.call('SET', KEYS[1], ARGV[3], 'PX', ttl)
redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl)
redis.call('SET', KEYS[4], ARGV[5], 'PX', ttl)
redis.call('SET', KEYS[6], ARGV[7], 'PX', ttl)
redis.call('ZADD', KEYS[3], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now - ttl))
if ARGV[6] == '-' then
  redis.call('HDEL', KEYS[5], ARGV[2])
elseif ARGV[6] ~= '' then
  redis.call('HSET', KEYS[5], ARGV[2], ARGV[6])
end
return now
"""
)

# KEYS: index. ARGV: ttl ms, key prefix, suffix (":head" or ":data"). Returns now, then member,
# JSON, reportedAtMs for every report still there.
_READ = (
    LUA_NOW_MS
    + """
local out = {now}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf', 'WITHSCORES')) do
  out[#out + 1] = m
end
local res = {now}
for i = 2, #out, 2 do
  local body = redis.call('GET', ARGV[2] .. out[i] .. ARGV[3])
  if body then
    res[#res + 1] = out[i]
    res[#res + 1] = body
    res[#res + 1] = out[i + 1]
  end
end
return res
"""
)


def _index_key() -> str:
    return key("ns", "bs-index")


def _record_prefix() -> str:
    return key("ns", "bs", "")


def _targets_key() -> str:
    return key("ns", "metrics-targets")


def _target(report: dict) -> str:
    """The store script's ARGV[6] for a report (see _STORE)."""
    status = report["status"]
    if "metricsAddr" not in status:
        return ""
    if status["metricsAddr"] is None:
        return "-"
    target = {"metricsAddr": status["metricsAddr"], "brokerName": report["brokerName"], "brokerId": report["brokerId"]}
    return json.dumps(target, separators=(",", ":"))


def _store_args(report: dict) -> list:
    member = liveness.member(report["clusterName"], report["brokerAddr"])
    head = {k: report[k] for k in ("clusterName", "brokerName", "brokerId", "brokerAddr", "status", "config", "dynamicKeys")}
    data = {"queues": report["queues"], "offsets": report["offsets"]}
    # What is_stale needs, the mode and the quorum keys.
    summary_config = {k: v for k, v in report["config"].items() if k in SUMMARY_CONFIG_KEYS}
    mode = {
        **{k: report[k] for k in ("clusterName", "brokerName", "brokerId", "brokerAddr")},
        "status": {"metaMode": report["status"].get("metaMode")},
        "config": summary_config,
    }
    prefix = _record_prefix() + member
    return [
        6,
        prefix + ":head",
        prefix + ":data",
        _index_key(),
        prefix + ":mode",
        _targets_key(),
        prefix + ":clients",
        TTL_MILLIS,
        member,
        json.dumps(head, separators=(",", ":")),
        json.dumps(data, separators=(",", ":")),
        json.dumps(mode, separators=(",", ":")),
        _target(report),
        json.dumps(report.get("clients", []), separators=(",", ":")),
    ]


def store(report: dict) -> None:
    """Keep a checked report (``core.parse_report``) as its broker's latest."""
    sync_client().eval(_STORE, *_store_args(report))


async def store_async(report: dict) -> None:
    await async_client().eval(_STORE, *_store_args(report))


def _read(suffix: str) -> tuple[int, list[tuple[str, dict, int]]]:
    reply = sync_client().eval(_READ, 1, _index_key(), TTL_MILLIS, _record_prefix(), suffix)
    now = int(reply[0])
    return now, [(reply[i], json.loads(reply[i + 1]), int(float(reply[i + 2]))) for i in range(1, len(reply), 3)]


def metrics_targets() -> dict[tuple[str, str], dict]:
    """(clusterName, brokerAddr) -> {metricsAddr, brokerName, brokerId}: the last metrics address each
    broker reported, dead brokers' included, until ``forget_metrics_targets``."""
    out = {}
    for member, body in sync_client().hgetall(_targets_key()).items():
        cluster, addr = liveness.split_member(member)
        out[(cluster, addr)] = json.loads(body)
    return out


def forget_metrics_targets(brokers: Collection[tuple[str, str]]) -> None:
    """Drop the metrics targets of (clusterName, brokerAddr) brokers (gone from the control plane)."""
    if brokers:
        sync_client().hdel(_targets_key(), *[liveness.member(c, a) for c, a in brokers])


def _in(h: dict, cluster_name: str | None) -> bool:
    return cluster_name is None or h["clusterName"] == cluster_name


def reports(broker_name: str | None = None, broker_id: int | None = None, cluster_name: str | None = None) -> list[dict]:
    """Every broker's latest status and config (of one set, of one broker of it; of one cluster),
    sorted by set and id: ``alive`` (its nameserver heartbeats), ``stale`` (no report for three of its
    intervals)."""
    now, heads = _read(":head")
    chosen = [
        (m, h, at)
        for m, h, at in heads
        if (broker_name is None or h["brokerName"] == broker_name)
        and (broker_id is None or h["brokerId"] == broker_id)
        and _in(h, cluster_name)
    ]
    alive = liveness.alive([m for m, _, _ in chosen])
    out = [
        {
            **h,
            "alive": m in alive,
            "stale": core.is_stale(h, at, now),
            "reportedAtMs": at,
            "ageMs": max(0, now - at),
        }
        for m, h, at in chosen
    ]
    return sorted(out, key=lambda r: (r["brokerName"], r["brokerId"], r["brokerAddr"]))


def summaries(brokers: Collection[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """(clusterName, brokerAddr) -> that broker's small record (identity, ``status.metaMode``, the
    ``SUMMARY_CONFIG_KEYS`` of its config) with ``stale`` and ``reportedAtMs`` as ``reports`` gives
    them, for those of ``brokers`` that reported: one Redis round trip for any number of brokers,
    reading theirs only (e.g. the masters of a thousand sets)."""
    if not brokers:
        return {}
    wanted = list(brokers)
    members = [liveness.member(c, a) for c, a in wanted]
    prefix = _record_prefix()
    pipe = sync_client().pipeline(transaction=False)
    pipe.time()
    pipe.mget([prefix + m + ":mode" for m in members])
    pipe.zmscore(_index_key(), members)
    (seconds, micros), bodies, stamps = pipe.execute()
    now = int(seconds) * 1000 + int(micros) // 1000
    out = {}
    for broker, body, at in zip(wanted, bodies, stamps, strict=True):
        if body is not None and at is not None:
            r = json.loads(body)
            out[broker] = {**r, "stale": core.is_stale(r, int(at), now), "reportedAtMs": int(at)}
    return out


def reported_modes(broker_names: Collection[str] | None = None) -> dict[tuple[str, str], list[ReportedMode]]:
    """(clusterName, brokerName) -> the metaMode each of its brokers last reported (of the named sets
    only, if given), ``stale`` marked: one Redis round trip, whatever the number of sets."""
    now, records = _read(":mode")
    out: dict[tuple[str, str], list[ReportedMode]] = {}
    for _, r, at in records:
        if broker_names is None or r["brokerName"] in broker_names:
            mode = ReportedMode(r["brokerId"], r["brokerAddr"], r["status"].get("metaMode"), core.is_stale(r, at, now))
            out.setdefault((r["clusterName"], r["brokerName"]), []).append(mode)
    return out


def _serving(cluster_name: str | None) -> dict[str, dict]:
    """Per broker set, the serving broker's whole report (queues and offsets), ``stale`` marked."""
    now, heads = _read(":head")
    chosen = core.serving_reports(({**h, "member": m, "reportedAtMs": at} for m, h, at in heads if _in(h, cluster_name)), now)
    if not chosen:
        return {}
    prefix = _record_prefix()
    bodies = sync_client().mget([prefix + r["member"] + ":data" for r in chosen.values()])
    out = {}
    for (name, head), body in zip(chosen.items(), bodies, strict=True):
        if body is not None:
            out[name] = {**head, **json.loads(body), "stale": core.is_stale(head, head["reportedAtMs"], now)}
    return out


def consumer_groups(cluster_name: str | None = None) -> list[dict]:
    """Every consumer group the serving brokers hold, with its topics, queues and total lag."""
    return core.groups_summary(core.progress(_serving(cluster_name)))


def consumer_progress(group: str, cluster_name: str | None = None) -> dict | None:
    """One group's queues (committed offset, max offset, lag), or None when no broker holds it."""
    rows = core.progress(_serving(cluster_name), group)
    if not rows:
        return None
    return {"group": group, "lag": sum(p.lag for p in rows), "queues": [p.as_dict() for p in rows]}


def topic_horizons(broker_name: str) -> dict[str, int]:
    """Per topic of a broker set, when its oldest message kept was stored (its serving broker's report)."""
    report = _serving(None).get(broker_name)
    return core.topic_horizons(report.get("queues", [])) if report is not None else {}


def topic_offsets(topic: str, cluster_name: str | None = None) -> list[dict]:
    """The min and max offsets of each queue of ``topic``, per broker set."""
    return core.topic_queues(_serving(cluster_name), topic)


def topic_readers(topic: str, broker_names: set[str] | None = None, cluster_name: str | None = None) -> list[dict]:
    """The consumer groups with committed offsets on ``topic`` (on the named broker sets), each with
    its lag there (``topicLag``) and its total lag: one read of the reports, whatever their number."""
    rows = core.progress(_serving(cluster_name))
    total: dict[str, int] = {}
    on_topic: dict[str, int] = {}
    for p in rows:
        total[p.group] = total.get(p.group, 0) + p.lag
        if p.topic == topic and (broker_names is None or p.broker_name in broker_names):
            on_topic[p.group] = on_topic.get(p.group, 0) + p.lag
    return [{"group": g, "topicLag": lag, "lag": total[g]} for g, lag in on_topic.items()]


def connected_clients(cluster_name: str | None = None, group: str | None = None, topic: str | None = None) -> dict:
    """The clients connected now (docs/messages.md §4-5: ``{"producers", "consumers"}``, one row per
    (group, client)), from the ``clients`` of every live broker's fresh report (of one cluster); a dead or
    silent broker's clients are not shown."""
    now, heads = _read(":head")
    chosen = [(m, h) for m, h, at in heads if _in(h, cluster_name) and not core.is_stale(h, at, now)]
    alive = liveness.alive([m for m, _ in chosen])
    chosen = [(m, h) for m, h in chosen if m in alive]
    if not chosen:
        return clients_core.connections([], group, topic)
    bodies = sync_client().mget([_record_prefix() + m + ":clients" for m, _ in chosen])
    reports = [
        clients_core.BrokerClients(h["brokerName"], json.loads(body)) for (_, h), body in zip(chosen, bodies, strict=True) if body
    ]
    return clients_core.connections(reports, group, topic)
