"""Where a live keyed config comes from: RocketMQ's defaults plus operators' overrides in a table.

Each process caches it for CACHE_SECONDS, so an update reaches every control-plane process within
that time (at once in the process that made it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from threading import Lock
from typing import Generic, TypeVar

from django.db import transaction

C = TypeVar("C")
CACHE_SECONDS = 1.0


class ConfigStore(Generic[C]):
    def __init__(self, entry_model, build: Callable[[dict], C], on_change: Callable[[], None] | None = None):
        self._model = entry_model
        self._build = build
        self._on_change = on_change
        self._cached: tuple[float, C] | None = None
        self._lock = Lock()

    def current(self) -> C:
        now = time.monotonic()
        cached = self._cached
        if cached is not None and cached[0] > now:
            return cached[1]
        config = self._build({e.key: e.value for e in self._model.objects.all()})
        with self._lock:
            self._cached = (now + CACHE_SECONDS, config)
        return config

    def last(self) -> C | None:
        """The config this process built last, however old (None before the first): for a reader that
        must not block and whose answers a change invalidates otherwise (a route at a registry version:
        a config change bumps it)."""
        cached = self._cached
        return cached[1] if cached is not None else None

    def invalidate(self) -> None:
        with self._lock:
            self._cached = None

    def update(self, changes: dict[str, object]) -> C:
        """Validate (``ConfigError`` for black-listed or invalid keys) and store an update."""
        self.invalidate()
        parsed = self.current().validate_update(changes)  # type: ignore[attr-defined]
        with transaction.atomic():
            for k, v in parsed.items():
                self._model.objects.update_or_create(key=k, defaults={"value": v})
            transaction.on_commit(self.invalidate)
            if self._on_change:
                transaction.on_commit(self._on_change)
        # Not cached: inside a caller's transaction (the audited admin call) this is not committed yet.
        return self._build({e.key: e.value for e in self._model.objects.all()})
