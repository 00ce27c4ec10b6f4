"""``NamesrvConfig``: RocketMQ's key names and defaults (reference §3.8), and the update rules.

Keys keep RocketMQ's camelCase so that an operator's ``namesrv.conf`` knowledge carries over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULTS: dict[str, bool | int | str] = {
    "scanNotActiveBrokerInterval": 5000,
    "supportActingMaster": False,
    "notifyMinBrokerIdChanged": False,
    "enableControllerInNamesrv": False,
    "deleteTopicWithBrokerRegistration": False,
    "unRegisterBrokerQueueCapacity": 3000,
    "needWaitForService": False,
    "waitSecondsForService": 45,
    "enableAllTopicList": True,
    "enableTopicList": True,
    "orderMessageEnable": False,
    "returnOrderTopicConfigToBroker": True,
    "clientRequestThreadPoolNums": 8,
    "defaultThreadPoolNums": 16,
    "clientRequestThreadPoolQueueCapacity": 50000,
    "defaultThreadPoolQueueCapacity": 10000,
    "configBlackList": "configBlackList;configStorePath;kvConfigPath",
}

# Keys that are always refused, whatever configBlackList says (it cannot remove itself).
ALWAYS_BLACK_LISTED = frozenset({"configBlackList", "configStorePath", "kvConfigPath"})

# Lower bounds that keep the control plane sane (a 0 ms scan interval would spin the beat).
MINIMUMS: dict[str, int] = {
    "scanNotActiveBrokerInterval": 100,
    "unRegisterBrokerQueueCapacity": 1,
    "waitSecondsForService": 0,
    "clientRequestThreadPoolNums": 1,
    "defaultThreadPoolNums": 1,
    "clientRequestThreadPoolQueueCapacity": 1,
    "defaultThreadPoolQueueCapacity": 1,
}


class ConfigError(ValueError):
    """An update that cannot be applied; ``black_listed`` keys map to NO_PERMISSION (16)."""

    def __init__(self, field_errors: dict[str, str], black_listed: frozenset[str] = frozenset()):
        super().__init__("; ".join(f"{k}: {v}" for k, v in field_errors.items()))
        self.field_errors = field_errors
        self.black_listed = black_listed


@dataclass(frozen=True)
class NamesrvConfig:
    values: Mapping[str, bool | int | str]

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, bool | int | str]) -> NamesrvConfig:
        merged = dict(DEFAULTS)
        merged.update({k: v for k, v in overrides.items() if k in DEFAULTS})
        return cls(merged)

    def __getitem__(self, key: str) -> bool | int | str:
        return self.values[key]

    @property
    def support_acting_master(self) -> bool:
        return bool(self.values["supportActingMaster"])

    @property
    def notify_min_broker_id_changed(self) -> bool:
        return bool(self.values["notifyMinBrokerIdChanged"])

    @property
    def scan_not_active_broker_interval(self) -> int:
        return int(self.values["scanNotActiveBrokerInterval"])

    @property
    def delete_topic_with_broker_registration(self) -> bool:
        return bool(self.values["deleteTopicWithBrokerRegistration"])

    def black_list(self) -> frozenset[str]:
        configured = str(self.values["configBlackList"])
        return ALWAYS_BLACK_LISTED | {k.strip() for k in configured.split(";") if k.strip()}


def _parse(key: str, raw: object) -> bool | int | str:
    default = DEFAULTS[key]
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ValueError("must be true or false")
    if isinstance(default, int):
        if isinstance(raw, bool):
            raise ValueError("must be an integer")
        try:
            value = int(str(raw).strip()) if not isinstance(raw, int) else raw
        except ValueError:
            raise ValueError("must be an integer") from None
        if value < MINIMUMS.get(key, 0):
            raise ValueError(f"must be >= {MINIMUMS.get(key, 0)}")
        return value
    if not isinstance(raw, str):
        raise ValueError("must be a string")
    return raw


def validate_update(current: NamesrvConfig, changes: Mapping[str, object]) -> dict[str, bool | int | str]:
    """Parse and check an update (``UPDATE_NAMESRV_CONFIG``); return the typed changes.

    Black-listed keys are refused as a whole request, like RocketMQ does, before any key is applied.
    """
    black = current.black_list()
    refused = frozenset(k for k in changes if k in black)
    if refused:
        raise ConfigError({k: "this key cannot be updated at run time" for k in sorted(refused)}, refused)
    errors: dict[str, str] = {}
    parsed: dict[str, bool | int | str] = {}
    for key, raw in changes.items():
        if key not in DEFAULTS:
            errors[key] = "unknown NamesrvConfig key"
            continue
        try:
            parsed[key] = _parse(key, raw)
        except ValueError as exc:
            errors[key] = str(exc)
    if errors:
        raise ConfigError(errors)
    if not parsed:
        raise ConfigError({"non_field_errors": "no configuration key given"})
    return parsed
