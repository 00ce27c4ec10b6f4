"""Where the live ``NamesrvConfig`` comes from: RocketMQ's defaults plus the operators' overrides
stored in Postgres. Each process caches it for CONFIG_CACHE_SECONDS, so an update reaches every
control-plane process within that time (at once in the process that made it)."""

from __future__ import annotations

import time
from threading import Lock

from django.db import transaction

from . import route_cache
from .core.config import NamesrvConfig, validate_update
from .models import NamesrvConfigEntry

CONFIG_CACHE_SECONDS = 1.0

_cached: tuple[float, NamesrvConfig] | None = None
_lock = Lock()


def current_config() -> NamesrvConfig:
    global _cached
    now = time.monotonic()
    cached = _cached
    if cached is not None and cached[0] > now:
        return cached[1]
    config = NamesrvConfig.from_overrides({e.key: e.value for e in NamesrvConfigEntry.objects.all()})
    with _lock:
        _cached = (now + CONFIG_CACHE_SECONDS, config)
    return config


def invalidate() -> None:
    global _cached
    with _lock:
        _cached = None


def update_config(changes: dict[str, object]) -> NamesrvConfig:
    """``UPDATE_NAMESRV_CONFIG``; raises ``ConfigError`` (black-listed or invalid keys)."""
    invalidate()
    parsed = validate_update(current_config(), changes)
    with transaction.atomic():
        for k, v in parsed.items():
            NamesrvConfigEntry.objects.update_or_create(key=k, defaults={"value": v})
        transaction.on_commit(route_cache.registry_changed)
    invalidate()
    return current_config()
