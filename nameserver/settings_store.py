"""The live ``NamesrvConfig`` (defaults + overrides in ``NamesrvConfigEntry``)."""

from __future__ import annotations

from controlplane.config_store import ConfigStore

from . import route_cache
from .core.config import NamesrvConfig
from .models import NamesrvConfigEntry

# A config change can change routes (supportActingMaster): it bumps the registry version.
_store: ConfigStore[NamesrvConfig] = ConfigStore(NamesrvConfigEntry, NamesrvConfig.from_overrides, route_cache.registry_changed)

current_config = _store.current
last_config = _store.last
invalidate = _store.invalidate
update_config = _store.update
