"""Shared Redis clients and key naming. Every key starts with ``settings.REDIS_KEY_PREFIX``."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings

_sync_client: redis.Redis | None = None
_sync_lock = threading.Lock()
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = weakref.WeakKeyDictionary()


def key(*parts: str) -> str:
    return settings.REDIS_KEY_PREFIX + ":".join(parts)


def sync_client() -> redis.Redis:
    global _sync_client
    if _sync_client is None:
        with _sync_lock:
            if _sync_client is None:
                _sync_client = redis.Redis.from_url(
                    settings.REDIS_URL,
                    decode_responses=True,
                    socket_timeout=5,
                    socket_connect_timeout=5,
                    health_check_interval=30,
                )
    return _sync_client


def async_client() -> aioredis.Redis:
    """One client per event loop: redis.asyncio connections are bound to the loop that made them."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        # A bounded pool that makes callers wait for a connection instead of failing under bursts.
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            decode_responses=True,
            socket_timeout=10,
            socket_connect_timeout=5,
            max_connections=64,
            timeout=10,
            retry=settings.REDIS_ASYNC_RETRY,
        )
        client = aioredis.Redis(connection_pool=pool)
        _async_clients[loop] = client
    return client


# Lua: the Redis server's clock in ms as ``now`` (one clock for every process that judges liveness).
LUA_NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "
# Lua: the same ``now``, unless the caller injects a clock reading as ARGV[1] (ms; '' for the server's).
LUA_NOW_MS_OR_ARGV1 = "local t = redis.call('TIME') local now = tonumber(ARGV[1]) or (t[1] * 1000 + math.floor(t[2] / 1000)) "


def clock_arg(now_ms: int | None) -> str:
    """ARGV[1] for LUA_NOW_MS_OR_ARGV1: None is the Redis server's clock, a value that instant in ms."""
    return "" if now_ms is None else str(int(now_ms))


# Lua: KEYS[1] a hash member -> channel; delete ARGV[1] only if it is still bound to channel ARGV[2]
# (a websocket closing after its broker reconnected elsewhere must not unbind the new one).
LUA_RELEASE_IF_BOUND = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
"""


# Redis refuses an expiry whose absolute time overflows (ERR invalid expire time); configs allow
# intervals up to Java's Long.MAX_VALUE, so a slot never lasts longer than this (about 4,400 years).
MAX_SLOT_MILLIS = 2**47


# KEYS: the slot, the stamp. ARGV: the slot's lifetime (ms). Takes the slot unless held; when taken,
# stamps the instant (Redis's clock, ms) in the stamp key, which outlives the slot.
_TAKE_STAMPED_SLOT = (
    LUA_NOW_MS
    + """
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  redis.call('SET', KEYS[2], now)
  return 1
end
return 0
"""
)


def acquire_slot(slot_key: str, interval_millis: int, *, stamp_key: str | None = None) -> bool:
    """Take a periodic job's slot for ``interval_millis`` (less 50 ms of slack) unless another process
    holds it: at most one run per interval across every beat and worker. ``stamp_key``: where to keep
    the instant of the latest run (``slot_stamps``), for the metrics; one round trip either way."""
    px = min(MAX_SLOT_MILLIS, max(1, interval_millis - 50))
    if stamp_key is None:
        return bool(sync_client().set(slot_key, "1", nx=True, px=px))
    return bool(sync_client().eval(_TAKE_STAMPED_SLOT, 2, slot_key, stamp_key, px))


def slot_stamps(stamp_keys: list[str]) -> list[int | None]:
    """When each job last took its slot (Redis's clock, ms), None for one never stamped."""
    if not stamp_keys:
        return []
    return [int(v) if v is not None else None for v in sync_client().mget(stamp_keys)]


class Script:
    """A Lua script run by its SHA (EVALSHA): the hot paths (heartbeats, an election's read) do not
    send and hash the body at every call. Redis loads it from the body on first use, and again after
    a restart (NOSCRIPT)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    def __call__(self, client, numkeys: int, *args):
        try:
            return client.evalsha(self.sha, numkeys, *args)
        except redis.exceptions.NoScriptError:
            return client.eval(self.text, numkeys, *args)

    async def run_async(self, client, numkeys: int, *args):
        try:
            return await client.evalsha(self.sha, numkeys, *args)
        except redis.exceptions.NoScriptError:
            return await client.eval(self.text, numkeys, *args)
