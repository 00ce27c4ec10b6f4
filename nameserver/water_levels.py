"""The latest replication water levels each broker reported with its heartbeat (ours, for the dashboard).

One Redis hash per broker, ``ns:wl:<cluster>/<addr>`` = {report: <JSON>, reportedAtMs: <ms>}, expiring
``TTL_MILLIS`` after its last report so a dead broker's levels age out on their own, and per cluster a
sorted set ``ns:wl-index:<cluster>`` of broker addresses scored by report time to find them. Stamps are
Redis's clock, as liveness's are (cluster-info's ``lastUpdateTimestamp``): one clock for every process.
Reports are opaque here: ``nameserver.serializers.parse_water_levels`` has checked them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.redis import LUA_NOW_MS, async_client, key, sync_client

from .liveness import member

TTL_MILLIS = 120_000


@dataclass(frozen=True)
class WaterLevelReport:
    cluster_name: str
    broker_addr: str
    water_levels: dict  # as parse_water_levels returns it


# KEYS: record, index, record, index, ... ARGV: ttl ms, addr, report JSON, addr, report JSON, ...
# Many reports in one round trip (the websocket coalesces its sockets' reports into one call).
_STORE = (
    LUA_NOW_MS
    + """
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  redis.call('HSET', KEYS[i], 'report', ARGV[i + 2], 'reportedAtMs', now)
  redis.call('PEXPIRE', KEYS[i], ttl)
  redis.call('ZADD', KEYS[i + 1], now, ARGV[i + 1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i + 1], '-inf', '(' .. (now - ttl))
  redis.call('PEXPIRE', KEYS[i + 1], ttl)
end
return now
"""
)

# KEYS: index. ARGV: ttl ms, record key prefix. Returns addr, report JSON, reportedAtMs, ... of the
# records reported within the TTL that still exist.
_READ = (
    LUA_NOW_MS
    + """
local out = {}
for _, addr in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')) do
  local r = redis.call('HMGET', ARGV[2] .. addr, 'report', 'reportedAtMs')
  if r[1] then
    out[#out + 1] = addr
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
  end
end
return out
"""
)


def record_key(cluster_name: str, broker_addr: str) -> str:
    return key("ns", "wl", member(cluster_name, broker_addr))


def _index_key(cluster_name: str) -> str:
    return key("ns", "wl-index", cluster_name)


def _store_args(reports: Sequence[WaterLevelReport]) -> list:
    keys: list[str] = []
    args: list = [TTL_MILLIS]
    for r in reports:
        keys += [record_key(r.cluster_name, r.broker_addr), _index_key(r.cluster_name)]
        args += [r.broker_addr, json.dumps(r.water_levels, separators=(",", ":"))]
    return [len(keys), *keys, *args]


def store(reports: Sequence[WaterLevelReport]) -> None:
    """Keep each report as its broker's latest, stamped with Redis's clock, in one round trip."""
    if reports:
        sync_client().eval(_STORE, *_store_args(reports))


async def store_async(reports: Sequence[WaterLevelReport]) -> None:
    if reports:
        await async_client().eval(_STORE, *_store_args(reports))


def _read_args(cluster_name: str) -> list:
    return [1, _index_key(cluster_name), TTL_MILLIS, record_key(cluster_name, "")]


def _shape(cluster_name: str, broker_name: str | None, reply: list) -> list[dict]:
    """The wire form: each report with its clusterName, brokerAddr and reportedAtMs, sorted by
    brokerName, brokerId (then address, should two addresses claim one id)."""
    out = []
    for i in range(0, len(reply), 3):
        addr, report, reported_at = reply[i : i + 3]
        levels = json.loads(report)
        if broker_name is None or levels["brokerName"] == broker_name:
            out.append({**levels, "clusterName": cluster_name, "brokerAddr": addr, "reportedAtMs": int(reported_at)})
    return sorted(out, key=lambda r: (r["brokerName"], r["brokerId"], r["brokerAddr"]))


def latest_reports(cluster_name: str, broker_name: str | None = None) -> list[dict]:
    """The live reports of a cluster, or of one broker set of it."""
    return _shape(cluster_name, broker_name, sync_client().eval(_READ, *_read_args(cluster_name)))


async def latest_reports_async(cluster_name: str, broker_name: str | None = None) -> list[dict]:
    return _shape(cluster_name, broker_name, await async_client().eval(_READ, *_read_args(cluster_name)))
