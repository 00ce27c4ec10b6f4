"""DRF's side of ``mqrules.validation``: the request body parser, serializer fields and parameters
that run its checks, and its ``Invalid`` as a DRF ``ValidationError``. No rule lives here.

Every field of a request serializer is one of these: a string field takes a JSON string and nothing
else (``"brokerName": 0`` is refused, not turned into "0"), an integer field a JSON integer, a boolean
field true or false; so the OpenAPI schema says what the server takes, and clients and fuzzers
generated from it can trust it. Query parameters arrive as text: ``query_integer_field`` parses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import OpenApiParameter
from rest_framework import parsers, serializers
from rest_framework.fields import ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator

from controlplane.errors import PayloadTooLarge, too_large_detail
from mqrules import validation as v

T = TypeVar("T")


def validator(check: v.Check) -> Callable[[object], None]:
    """A DRF field validator running a pure check."""

    def run(value: object) -> None:
        if (message := check(value)) is not None:
            raise serializers.ValidationError(message)

    return run


# --- the body ---------------------------------------------------------------------------------------


class JsonParser(parsers.JSONParser):
    """The API's only parser (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES): a JSON body of at most
    DATA_UPLOAD_MAX_MEMORY_SIZE bytes, parsed by ``validation.parse_json``. Form and multipart bodies
    get 415."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise PayloadTooLarge(too_large_detail())
        try:
            return v.parse_json(raw)
        except v.Invalid as exc:
            raise as_drf(exc) from None


# --- fields -----------------------------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    """A JSON string as sent: no number turned into text, no whitespace trimmed, nothing Postgres
    cannot store (``validation.storable``, in place of DRF's own NUL and surrogate validators)."""

    def __init__(self, **kw):
        kw.setdefault("trim_whitespace", False)
        super().__init__(**kw)
        drf_own = (ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator)
        self.validators = [x for x in self.validators if not isinstance(x, drf_own)]
        self.validators.append(validator(v.storable))

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class _Describe(RegexValidator):
    """A pattern as the schema generator reads it (drf-spectacular documents a field's RegexValidator
    as "pattern"); validates nothing: the pure check decides, this describes."""

    def __call__(self, value: object) -> None:
        return None


class _CheckedCharField(StrictCharField):
    """A string field whose rule is a pure check; ``pattern`` only describes it in the OpenAPI schema."""

    def __init__(self, check: v.Check | None, pattern: str, max_length: int, **kw):
        super().__init__(max_length=max_length, **kw)
        if check is not None:
            self.validators.append(validator(check))
        self.validators.append(_Describe(pattern))


def name_field(**kw) -> serializers.CharField:
    """A cluster, broker set, topic or group name."""
    return _CheckedCharField(v.name, v.NAME_PATTERN, v.NAME_MAX_LENGTH, **kw)


def addr_field(**kw) -> serializers.CharField:
    """A ``host:port`` address."""
    return _CheckedCharField(v.addr, v.ADDR_PATTERN, v.ADDR_MAX_LENGTH, **kw)


def text_field(max_length: int = v.TEXT_MAX_LENGTH, **kw) -> serializers.CharField:
    """Free text that will be stored (a zone name): a string of at most ``max_length`` that Postgres can
    store, the rule of ``validation.text`` as a StrictCharField checks it."""
    return _CheckedCharField(None, v.TEXT_PATTERN, max_length, **kw)


def pattern_field(check: v.Check, pattern: str, max_length: int, **kw) -> serializers.CharField:
    """A string of a format of its own (``validation.matching``), e.g. a registerCheckCode."""
    return _CheckedCharField(check, pattern, max_length, **kw)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not "12", not 12.0, not true)."""

    def to_internal_value(self, data):
        if type(data) is not int:
            self.fail("invalid")
        return data


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false (not "yes", not 1)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


def integer_field(**kw) -> serializers.IntegerField:
    return StrictIntegerField(**kw)


def boolean_field(**kw) -> serializers.BooleanField:
    return StrictBooleanField(**kw)


class _QueryIntegerField(serializers.IntegerField):
    """A query parameter's integer: ASCII digits, optionally signed, as the schema's "integer" reads."""

    def to_internal_value(self, data):
        value = v.query_integer(data) if isinstance(data, str) else None
        if value is None:
            self.fail("invalid")
        return value


def query_integer_field(**kw) -> serializers.IntegerField:
    return _QueryIntegerField(**kw)


# --- path and query parameters ---------------------------------------------------------------------


def name_parameter(
    name: str,
    location: str = OpenApiParameter.QUERY,
    *,
    required: bool | None = None,
    many: bool = False,
    max_items: int | None = None,
    description: str = "",
) -> OpenApiParameter:
    """A name as a path or query parameter in the OpenAPI schema, with the name rule's pattern and
    lengths (``many``: repeated, at least once when required)."""
    schema: dict = dict(v.NAME_SCHEMA)
    if many:
        schema = {"type": "array", "items": schema, **({"minItems": 1} if required else {})}
        if max_items is not None:
            schema["maxItems"] = max_items
    if required is None:
        required = location == OpenApiParameter.PATH
    return OpenApiParameter(name, schema, location, required=required, description=description)


def validated(serializer_class: type[serializers.Serializer], data: object) -> dict:
    """``data`` checked by the serializer: its validated data, else 400 with its field errors."""
    s = serializer_class(data=data)
    s.is_valid(raise_exception=True)
    return s.validated_data


def checked_param(field: str, value: object, check: v.Check = v.name) -> str:
    """A path or query parameter that must pass ``check`` (by default the name rule); else 400 with
    ``fields: {field: [message]}``."""
    if (message := check(value)) is not None:
        raise serializers.ValidationError({field: [message]})
    return value  # type: ignore[return-value]


# --- the OpenAPI schema says what the server takes ------------------------------------------------


class RuledSerializer(serializers.Serializer):
    """A request serializer with a rule across its fields (its ``validate``), stated in the OpenAPI
    schema too: ``json_schema_rule`` is merged into the serializer's schema (``oneOf``/``anyOf``)."""

    json_schema_rule: dict = {}


class _RuledSerializerSchema(OpenApiSerializerExtension):
    target_class = RuledSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, **self.target.json_schema_rule}  # the target: a RuledSerializer, class or instance


def require_bodies(result: dict, generator, request, public) -> dict:
    """A drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS): a body whose schema requires
    properties is a required body. drf-spectacular marks neither a body given as a raw schema (an
    offset-event batch) nor any PATCH body (a config update) required; the server refuses both
    without one."""
    components = result.get("components", {}).get("schemas", {})
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if not body or body.get("required"):
                continue
            for content in body.get("content", {}).values():
                schema = content.get("schema") or {}
                if "$ref" in schema:
                    schema = components.get(schema["$ref"].rsplit("/", 1)[1], {})
                if schema.get("required") or schema.get("minProperties"):
                    body["required"] = True
    return result


# --- pure errors as DRF's ---------------------------------------------------------------------------


def as_drf(exc: v.Invalid) -> serializers.ValidationError:
    return serializers.ValidationError(exc.fields)


def drf_checked(parse: Callable[..., T], *args, **kw) -> T:
    """Run a pure parser; its ``Invalid`` becomes DRF's ValidationError (inside a serializer field)."""
    try:
        return parse(*args, **kw)
    except v.Invalid as exc:
        raise as_drf(exc) from None
