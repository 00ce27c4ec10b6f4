"""What the REST API answers, for its OpenAPI schema (drf-spectacular): the error body of
``controlplane.errors`` as one component, the error statuses each view declares with what they mean,
a keyed config's shape, and what every operation may answer beyond its view's declaration (a
postprocessing hook). The served schema lists every status the server really answers, with its body;
tests/test_api_schema_fuzz.py holds the server to it."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.utils import OpenApiResponse, extend_schema_serializer
from rest_framework import serializers

from mqrules.keyed_config import Value


@extend_schema_serializer(component_name="Error")
class ErrorSerializer(serializers.Serializer):
    """``controlplane.errors.error_body``; a refusal that carries state (a controller transition, a
    stale registration, a busy audit) adds it beside these keys."""

    code = serializers.IntegerField(help_text="RocketMQ response code (mqrules/codes.py)")
    name = serializers.CharField(help_text="the code's name, e.g. INVALID_PARAMETER")
    detail = serializers.CharField()
    fields = serializers.DictField(required=False, help_text="400: each refused field and why")


# What a status means wherever it is answered; a view gives its own reason where it has one.
MEANING = {
    400: "Invalid input (a field, a query parameter or a malformed body): 29 INVALID_PARAMETER with `fields`.",
    401: "No token, a malformed Authorization header, or an unknown or revoked token: 16 NO_PERMISSION.",
    403: "This caller may not do this (the token's scope, or a cluster the token is not bound to): 16 NO_PERMISSION.",
    404: "Not found.",
    409: "Refused in the current state.",
    413: "A body larger than the server reads (DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MiB): 29 INVALID_PARAMETER.",
    415: "A body that is not application/json (the only media type the API reads): 29 INVALID_PARAMETER.",
    429: "Busy, try again later: 2 SYSTEM_BUSY.",
}

# Every endpoint needs a caller (401) that may do what it asks (403).
AUTH = (401, 403)
# An endpoint that reads a body also refuses bad input and media types it does not read.
BODY = (400, 415, *AUTH)


def errors(*statuses: int, why: Mapping[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """The error responses of ``statuses`` for ``extend_schema(responses=...)``; ``why`` gives a view's
    own reason for a status (its RocketMQ code), else the shared meaning is used."""
    reasons = {**MEANING, **(why or {})}
    return {status: OpenApiResponse(ErrorSerializer, description=reasons[status]) for status in sorted({*statuses, *(why or {})})}


_JSON_TYPES = {bool: "boolean", int: "integer", str: "string"}


def config_schema(defaults: Mapping[str, Value]) -> dict:
    """A keyed config (``mqrules.keyed_config``) as GET and PATCH answer it: every key, typed as
    its default is."""
    return {
        "type": "object",
        "required": sorted(defaults),
        "properties": {key: {"type": _JSON_TYPES[type(default)], "default": default} for key, default in defaults.items()},
    }


# What every operation may answer beyond what its view declares, added to the whole schema by a
# drf-spectacular postprocessing hook (settings.SPECTACULAR_SETTINGS):
# - the HTTP server (uvicorn) refuses a request head it cannot parse or hold (its request line and
#   headers beyond 64 KiB with httptools, 16 KiB with h11) before Django sees it, with a plain-text
#   400: a long enough path or query parameter does that on any operation;
# - a 401 names the scheme to authenticate with (``controlplane.errors.exception_handler``);
# - a state-changing call may carry a body larger than the server reads, whether or not the operation
#   takes one (an operator's body is read for the audit log before the view runs): 413.
_TRANSPORT_REFUSAL = "a request line or headers the HTTP server cannot take (beyond 64 KiB), in text/plain"
_CHALLENGE = {"description": 'Bearer realm="api"', "required": True, "schema": {"type": "string"}}
_HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
_WITH_BODY = {"put", "post", "patch", "delete"}
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


def complete_responses(result: dict, generator, request, public) -> dict:
    """The postprocessing hook: a text/plain 400, the 401's WWW-Authenticate and, for state-changing
    methods, 413 on every operation."""
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in _HTTP_METHODS:
                continue
            responses = operation.setdefault("responses", {})
            if "400" in responses:
                responses["400"]["description"] = responses["400"]["description"].rstrip(".") + "; or " + _TRANSPORT_REFUSAL + "."
            else:
                responses["400"] = {"description": _TRANSPORT_REFUSAL[0].upper() + _TRANSPORT_REFUSAL[1:] + "."}
            responses["400"].setdefault("content", {})["text/plain"] = {"schema": {"type": "string"}}
            if "401" in responses:
                responses["401"].setdefault("headers", {})["WWW-Authenticate"] = _CHALLENGE
            if method in _WITH_BODY:
                responses.setdefault("413", {"description": MEANING[413], "content": _ERROR_CONTENT})
    return result
