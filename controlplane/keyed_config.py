"""RocketMQ-style key/value configs (``NamesrvConfig``, ``ControllerConfig``): typed defaults,
run-time updates, and a black list of keys that can never be updated. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Value = bool | int | str


class ConfigError(ValueError):
    """An update that cannot be applied; ``black_listed`` keys map to NO_PERMISSION (16)."""

    def __init__(self, field_errors: dict[str, str], black_listed: frozenset[str] = frozenset()):
        super().__init__("; ".join(f"{k}: {v}" for k, v in field_errors.items()))
        self.field_errors = field_errors
        self.black_listed = black_listed


@dataclass(frozen=True)
class ConfigSchema:
    defaults: Mapping[str, Value]
    always_black_listed: frozenset[str]
    minimums: Mapping[str, int] = field(default_factory=dict)

    def parse(self, key: str, raw: object) -> Value:
        default = self.defaults[key]
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
                value = raw if isinstance(raw, int) else int(str(raw).strip())
            except ValueError:
                raise ValueError("must be an integer") from None
            if value < self.minimums.get(key, 0):
                raise ValueError(f"must be >= {self.minimums.get(key, 0)}")
            return value
        if not isinstance(raw, str):
            raise ValueError("must be a string")
        return raw


@dataclass(frozen=True)
class KeyedConfig:
    schema: ConfigSchema
    values: Mapping[str, Value]

    @classmethod
    def from_overrides(cls, schema: ConfigSchema, overrides: Mapping[str, Value]):
        merged = dict(schema.defaults)
        merged.update({k: v for k, v in overrides.items() if k in schema.defaults})
        return cls(schema, merged)

    def __getitem__(self, key: str) -> Value:
        return self.values[key]

    def black_list(self) -> frozenset[str]:
        configured = str(self.values.get("configBlackList", ""))
        return self.schema.always_black_listed | {k.strip() for k in configured.split(";") if k.strip()}

    def validate_update(self, changes: Mapping[str, object]) -> dict[str, Value]:
        """Parse and check an update; black-listed keys refuse the whole request, before any key
        is applied, as RocketMQ does."""
        black = self.black_list()
        refused = frozenset(k for k in changes if k in black)
        if refused:
            raise ConfigError({k: "this key cannot be updated at run time" for k in sorted(refused)}, refused)
        errors: dict[str, str] = {}
        parsed: dict[str, Value] = {}
        for key, raw in changes.items():
            if key not in self.schema.defaults:
                errors[key] = "unknown config key"
                continue
            try:
                parsed[key] = self.schema.parse(key, raw)
            except ValueError as exc:
                errors[key] = str(exc)
        if errors:
            raise ConfigError(errors)
        if not parsed:
            raise ConfigError({"non_field_errors": "no configuration key given"})
        return parsed
