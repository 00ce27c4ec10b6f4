"""RocketMQ-style key/value configs (``NamesrvConfig``, ``ControllerConfig``): typed defaults,
run-time updates, and a black list of keys that can never be updated. Pure.

A value is sent as JSON (true, 5000, "DLedger") or, as in a RocketMQ properties file, as text ("true",
"5000"). Integer keys are bounded as RocketMQ types them: a Java ``int`` (at most 2^31-1) unless the
schema names the key a ``long`` (at most 2^63-1); text must be storable (no NUL, no lone surrogate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from mqrules import validation as v

# A broker's broker.conf keys that hold secrets: a broker never reports them (brokers/admin.py) and the
# control plane never stores them, whatever a broker sends (nameserver/core/broker_status.py).
BROKER_SECRET_KEYS = frozenset({"controlPlaneToken", "peerToken"})

Value = bool | int | str

# The note of a RocketMQ thread-pool key (ConfigSchema.notes): both configs keep some.
THREAD_POOL_NO_EFFECT = "No effect here: requests are served by the web server's workers, not Java thread pools."

_TRUE_FALSE = "^(?:[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"  # Java's Boolean.parseBoolean, as text
_BOOLEAN = re.compile(_TRUE_FALSE)
_DECIMAL = re.compile("^" + v.decimal_pattern(0, v.LONG_MAX) + "$")


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
    # Integer keys RocketMQ declares ``long``; every other integer key is a Java ``int``.
    longs: frozenset[str] = frozenset()
    # What an operator must know about a key beyond its type, shown with it on the config page and in
    # the API schema: chiefly that a key keeps RocketMQ's name and is accepted but has no effect here.
    notes: Mapping[str, str] = field(default_factory=dict)

    def bounds(self, key: str) -> tuple[int, int]:
        return self.minimums.get(key, 0), v.LONG_MAX if key in self.longs else v.INT_MAX

    def parse(self, key: str, raw: object) -> Value:
        default = self.defaults[key]
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and _BOOLEAN.fullmatch(raw):
                return raw.lower() == "true"
            raise ValueError("must be true or false")
        if isinstance(default, int):
            low, high = self.bounds(key)
            message = f"must be an integer from {low} to {high}"
            if isinstance(raw, str) and _DECIMAL.fullmatch(raw):
                raw = int(raw)
            if type(raw) is not int or not low <= raw <= high:
                raise ValueError(message)
            return raw
        if (problem := v.text()(raw)) is not None:
            raise ValueError(problem)
        return raw  # type: ignore[return-value]

    def json_schema(self, key: str) -> dict:
        """What ``parse`` takes for ``key``, as an OpenAPI schema (with the key's note, if any)."""
        note = {"description": self.notes[key]} if key in self.notes else {}
        default = self.defaults[key]
        if isinstance(default, bool):
            return {"oneOf": [{"type": "boolean"}, {"type": "string", "pattern": _TRUE_FALSE}], "default": default, **note}
        if isinstance(default, int):
            low, high = self.bounds(key)
            as_text = {"type": "string", "pattern": "^" + v.decimal_pattern(low, high) + "$"}
            return {"oneOf": [{"type": "integer", "minimum": low, "maximum": high}, as_text], "default": default, **note}
        return {"type": "string", "maxLength": v.TEXT_MAX_LENGTH, "pattern": v.TEXT_PATTERN, "default": default, **note}

    def update_json_schema(self) -> dict:
        """An update: any non-empty subset of the keys that may ever be updated."""
        keys = [k for k in self.defaults if k not in self.always_black_listed]
        return {
            "type": "object",
            "properties": {k: self.json_schema(k) for k in keys},
            "additionalProperties": False,
            "minProperties": 1,
        }


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
