"""Broker liveness in Redis (reference §3.4): the heartbeat path never touches Postgres.

A live broker is a member ``"<cluster>/<addr>"`` (the live table is keyed by cluster and address)
with its timeout in hash ``ns:timeout`` and its deadline (last heartbeat + timeout, in Redis server
milliseconds) in sorted set ``ns:deadline``. Using Redis's clock for every stamp and every check
means several control-plane processes never disagree about who expired. Each function that reads the
clock takes ``now_ms``: None (the default) is Redis's clock; a value is that instant, so tests and
replays judge expiry at a time of their choosing instead of sleeping.
``ns:conn`` maps a member to the Channels name of its websocket, for pushes and close handling.
Expiry does not count time the nameserver could not hear (the blindness guard, controlplane/blindness.py):
``ns:last`` and ``ns:expect`` hold each member's last heartbeat and when its next is due, for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from controlplane.hearing import LUA_HEARD, Record, View
from controlplane.redis import LUA_NOW_MS_OR_ARGV1, LUA_RELEASE_IF_BOUND, Script, async_client, clock_arg, key, sync_client
from controlplane.redis import acquire_slot as redis_slot

# ARGV[1] of every script is the clock ('' for Redis's, see LUA_NOW_MS_OR_ARGV1).
HEARING = Record("ns")

# KEYS: timeout hash, deadline zset, conn hash, last zset, expect zset. ARGV: clock, member, channel, ...
# Refreshes each registered member and, when a channel is given, binds the member to that websocket.
# Returns 1/0 per member (0: not registered; nothing is bound then).
_HEARTBEAT = Script(
    LUA_NOW_MS_OR_ARGV1
    + LUA_HEARD
    + """
local out = {}
for i = 2, #ARGV, 2 do
  local m, channel = ARGV[i], ARGV[i + 1]
  local timeout = redis.call('HGET', KEYS[1], m)
  if timeout then
    redis.call('ZADD', KEYS[2], now + tonumber(timeout), m)
    heard(KEYS[4], KEYS[5], m, tonumber(timeout))
    if channel ~= '' then redis.call('HSET', KEYS[3], m, channel) end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""
)

# KEYS: timeout hash, deadline zset, last zset, expect zset. ARGV: clock, member, timeout ms.
_MARK_REGISTERED = (
    LUA_NOW_MS_OR_ARGV1
    + LUA_HEARD
    + """
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
heard(KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]))
return now
"""
)

# KEYS: deadline zset. ARGV: clock. Returns members whose deadline has passed.
_EXPIRED = LUA_NOW_MS_OR_ARGV1 + "return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)"


def member(cluster_name: str, broker_addr: str) -> str:
    return f"{cluster_name}/{broker_addr}"


def split_member(value: str) -> tuple[str, str]:
    cluster, _, addr = value.partition("/")
    return cluster, addr


def _keys() -> tuple[str, str, str]:
    return key("ns", "timeout"), key("ns", "deadline"), key("ns", "conn")


def _beat_keys() -> tuple[str, ...]:
    return *_keys(), HEARING.last_key, HEARING.expect_key


def mark_registered(cluster_name: str, broker_addr: str, timeout_millis: int, now_ms: int | None = None) -> int:
    """Start (or refresh) liveness at registration; returns the clock reading it used, in ms."""
    t, d, _ = _keys()
    return int(
        sync_client().eval(
            _MARK_REGISTERED,
            4,
            t,
            d,
            HEARING.last_key,
            HEARING.expect_key,
            clock_arg(now_ms),
            member(cluster_name, broker_addr),
            timeout_millis,
        )
    )


def heartbeat(members: Sequence[str], now_ms: int | None = None) -> list[bool]:
    """Refresh liveness of registered members; False for a member the nameserver does not know."""
    if not members:
        return []
    args = [x for m in members for x in (m, "")]
    return [bool(x) for x in _HEARTBEAT(sync_client(), 5, *_beat_keys(), clock_arg(now_ms), *args)]


async def heartbeat_async(beats: Sequence[tuple[str, str]], now_ms: int | None = None) -> list[bool]:
    """Heartbeats of (member, websocket channel or "") pairs in one round trip; a registered
    member with a channel is also bound to it (pushes and close handling find it there)."""
    if not beats:
        return []
    args = [x for pair in beats for x in pair]
    return [bool(x) for x in await _HEARTBEAT.run_async(async_client(), 5, *_beat_keys(), clock_arg(now_ms), *args)]


def forget(members: Iterable[str]) -> None:
    members = list(members)
    if not members:
        return
    t, d, c = _keys()
    pipe = sync_client().pipeline(transaction=True)
    pipe.hdel(t, *members)
    pipe.zrem(d, *members)
    pipe.zrem(HEARING.last_key, *members)
    pipe.zrem(HEARING.expect_key, *members)
    pipe.hdel(c, *members)
    pipe.execute()


def _silent_past(members: Sequence[str], hearing: View) -> list[str]:
    """Those of ``members`` silent past their timeout by the hearing's judgement (no entry: silent)."""
    t, _, _ = _keys()
    pipe = sync_client().pipeline(transaction=False)
    pipe.hmget(t, list(members))
    pipe.zmscore(HEARING.last_key, list(members))
    timeouts, lasts = pipe.execute()
    return [
        m
        for m, timeout, last in zip(members, timeouts, lasts, strict=True)
        if timeout is None or last is None or hearing.silent_past(int(last), int(timeout))
    ]


def expired_members(now_ms: int | None = None) -> list[str]:
    """Members silent past their timeout, blind time not counted (the scans look first, every beat
    tick). A member past its deadline by Redis's clock is only a candidate."""
    hearing = HEARING.view(now_ms)
    _, d, _ = _keys()
    candidates = list(sync_client().eval(_EXPIRED, 1, d, clock_arg(hearing.now)))
    return _silent_past(candidates, hearing) if candidates else []


def alive(members: list[str]) -> set[str]:
    """Those of ``members`` that heartbeat and are not silent past their timeout."""
    if not members:
        return set()
    expired = set(expired_members())
    beats = last_heartbeats(members)
    return {m for m in members if beats.get(m) is not None and m not in expired}


def is_expired(value: str, now_ms: int | None = None) -> bool:
    return bool(_silent_past([value], HEARING.view(now_ms)))


def hearing(now_ms: int | None = None, *, look: bool = False) -> View:
    """The nameserver's hearing now; ``look``: record it (a scan's look, before its judgements)."""
    return HEARING.look(now_ms) if look else HEARING.view(now_ms)


def last_heartbeats(members: Sequence[str]) -> dict[str, tuple[int, int] | None]:
    """member -> (last heartbeat ms, deadline ms) as Redis's clock saw them, or None if not live."""
    if not members:
        return {}
    t, d, _ = _keys()
    pipe = sync_client().pipeline(transaction=False)
    pipe.hmget(t, list(members))
    pipe.zmscore(d, list(members))
    timeouts, deadlines = pipe.execute()
    out: dict[str, tuple[int, int] | None] = {}
    for m, timeout, deadline in zip(members, timeouts, deadlines, strict=True):
        out[m] = None if timeout is None or deadline is None else (int(deadline) - int(timeout), int(deadline))
    return out


def acquire_scan_slot(interval_millis: int) -> bool:
    """At most one inactive-broker scan per interval across every beat and worker; the instant of
    the latest is kept (``scan_stamp_key``)."""
    return redis_slot(key("ns", "scan-slot"), interval_millis, stamp_key=scan_stamp_key())


def scan_stamp_key() -> str:
    """Where the latest inactive-broker scan's start is kept (``controlplane.redis.slot_stamps``)."""
    return key("ns", "scan-last")


async def bind_connection(value: str, channel_name: str) -> None:
    await async_client().hset(_keys()[2], value, channel_name)


async def release_connection(value: str, channel_name: str) -> bool:
    """Unbind a closing websocket; False when the broker has meanwhile reconnected elsewhere."""
    return bool(await async_client().eval(LUA_RELEASE_IF_BOUND, 1, _keys()[2], value, channel_name))


def connections(members: Sequence[str]) -> dict[str, str]:
    if not members:
        return {}
    channels = sync_client().hmget(_keys()[2], list(members))
    return {m: c for m, c in zip(members, channels, strict=True) if c}


def live_members() -> set[str]:
    """Every member the live table holds (expired or not)."""
    return set(sync_client().hkeys(_keys()[0]))
