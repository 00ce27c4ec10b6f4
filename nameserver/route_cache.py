"""Topic routes cached per process, invalidated by a registry version kept in Redis.

Every committed change to the registry (a registration that changed something, an unregistration,
topic administration, a permission or config change) increments ``ns:registry-version``. A route
query reads that version (one Redis GET) and answers from this process's cache when the cached
route was computed at the same version; otherwise it recomputes from Postgres. Heartbeats and
periodic re-registrations that change nothing leave the version, and so the cache, alone.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from threading import Lock
from typing import TypeVar

from controlplane.redis import async_client, key, sync_client

T = TypeVar("T")
MAX_ENTRIES = 10_000

_cache: OrderedDict[tuple, tuple[int, object]] = OrderedDict()
_lock = Lock()


def _version_key() -> str:
    return key("ns", "registry-version")


def _seed(pipe) -> None:
    # A missing version (a new or flushed Redis) starts at the current time in ns, never at 0,
    # so it can never fall back onto a version some process still has cached.
    pipe.set(_version_key(), time.time_ns(), nx=True)


def registry_changed() -> None:
    """Call after commit of any change that can alter a route."""
    pipe = sync_client().pipeline(transaction=False)
    _seed(pipe)
    pipe.incr(_version_key())
    pipe.execute()


def current_version() -> int:
    value = sync_client().get(_version_key())
    if value is None:
        pipe = sync_client().pipeline(transaction=False)
        _seed(pipe)
        pipe.get(_version_key())
        value = pipe.execute()[-1]
    return int(value)


def cached(cache_key: tuple, compute: Callable[[], T]) -> T:
    version = current_version()
    with _lock:
        hit = _cache.get(cache_key)
        if hit is not None and hit[0] == version:
            _cache.move_to_end(cache_key)
            return hit[1]  # type: ignore[return-value]
    value = compute()
    with _lock:
        _cache[cache_key] = (version, value)
        _cache.move_to_end(cache_key)
        while len(_cache) > MAX_ENTRIES:
            _cache.popitem(last=False)
    return value


def peek(cache_key: tuple, version: int) -> object | None:
    """The value ``cached`` holds for ``cache_key`` at ``version``, or None: never computes, never
    blocks on anything but this process's lock (the REST route's fast path, nameserver/fast_routes.py)."""
    with _lock:
        hit = _cache.get(cache_key)
    return hit[1] if hit is not None and hit[0] == version else None


async def current_version_async() -> int | None:
    """``current_version`` on the event loop; None while Redis holds no version yet."""
    value = await async_client().get(_version_key())
    return int(value) if value is not None else None


def clear() -> None:
    with _lock:
        _cache.clear()
