"""The live ``ControllerConfig`` (defaults + overrides in ``ControllerConfigEntry``)."""

from __future__ import annotations

from controlplane.config_store import ConfigStore

from .core.config import ControllerConfig
from .models import ControllerConfigEntry

_store: ConfigStore[ControllerConfig] = ConfigStore(ControllerConfigEntry, ControllerConfig.from_overrides)

current_config = _store.current
invalidate = _store.invalidate
update_config = _store.update
