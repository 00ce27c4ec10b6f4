"""DRF's side of ``controlplane.validation``: serializer fields that run its checks, and its ``Invalid``
as a DRF ``ValidationError``. No rule lives here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.core.validators import RegexValidator
from rest_framework import serializers

from controlplane import validation as v

T = TypeVar("T")


def validator(check: v.Check) -> Callable[[object], None]:
    """A DRF field validator running a pure check."""

    def run(value: object) -> None:
        if (message := check(value)) is not None:
            raise serializers.ValidationError(message)

    return run


class _CheckedCharField(serializers.CharField):
    """A string field whose rule is a pure check; ``pattern`` only describes it in the OpenAPI schema."""

    def __init__(self, check: v.Check, pattern: str, max_length: int, **kw):
        super().__init__(max_length=max_length, **kw)
        self.validators.append(validator(check))
        # drf-spectacular documents a field's RegexValidator as "pattern"; the check decides, this describes.
        self.validators.append(_Describe(pattern))


class _Describe(RegexValidator):
    """The pattern as the schema generator reads it (a RegexValidator); validates nothing."""

    def __call__(self, value: object) -> None:
        return None


def name_field(**kw) -> serializers.CharField:
    """A cluster, broker set, topic or group name."""
    return _CheckedCharField(v.name, v.NAME_PATTERN, v.NAME_MAX_LENGTH, **kw)


def addr_field(**kw) -> serializers.CharField:
    """A ``host:port`` address."""
    return _CheckedCharField(v.addr, v.ADDR_PATTERN, v.ADDR_MAX_LENGTH, **kw)


def as_drf(exc: v.Invalid) -> serializers.ValidationError:
    return serializers.ValidationError(exc.fields)


def drf_checked(parse: Callable[..., T], *args, **kw) -> T:
    """Run a pure parser; its ``Invalid`` becomes DRF's ValidationError (inside a serializer field)."""
    try:
        return parse(*args, **kw)
    except v.Invalid as exc:
        raise as_drf(exc) from None
