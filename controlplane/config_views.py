"""GET / PATCH of a keyed config (``GET_*_CONFIG`` / ``UPDATE_*_CONFIG``), shared by the nameserver
and the controller."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, caller_of
from controlplane.errors import ApiError
from controlplane.openapi import AUTH, BODY, config_schema, errors
from mqrules.codes import ResponseCode
from mqrules.keyed_config import ConfigError, ConfigSchema, Value


class ConfigUpdateSerializer(serializers.Serializer):
    """Any subset of the config's keys; checked by the config's own validation."""

    def to_internal_value(self, data):
        if not isinstance(data, dict) or not data:
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object of config keys"]})
        return data


_GET_ERRORS = errors(*AUTH)
_PATCH_ERRORS = errors(
    *BODY,
    why={
        400: "Unknown keys or bad values: 29 INVALID_PARAMETER, with each refused key in `fields`.",
        403: "Black-listed keys, or a token bound to one cluster (the config is every cluster's): 16 NO_PERMISSION.",
    },
)


def config_schema_view(
    get_operation_id: str, patch_operation_id: str, defaults: Mapping[str, Value], *, update: ConfigSchema | None = None
):
    """A subclass's OpenAPI operations: their ids, and its config's keys as both answers; ``update``:
    the config's schema, whose rules (types, Java int/long bounds) the PATCH body is declared with."""
    answer = config_schema(defaults)
    request = {"request": {"application/json": update.update_json_schema()}} if update is not None else {}
    return extend_schema_view(
        get=extend_schema(operation_id=get_operation_id, responses={200: answer, **_GET_ERRORS}),
        patch=extend_schema(operation_id=patch_operation_id, responses={200: answer, **_PATCH_ERRORS}, **request),
    )


class ConfigView(APIView):
    """Subclasses set ``get_config`` and ``update_config`` (the store's functions) and are decorated
    with ``config_schema_view``."""

    get_config = None
    update_config = None

    def get_permissions(self):
        return [IsAdmin()] if self.request.method == "PATCH" else super().get_permissions()

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **_GET_ERRORS})
    def get(self, request):
        return Response(dict(type(self).get_config().values))

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **_PATCH_ERRORS},
        description="A JSON object of config keys. Black-listed keys (configBlackList and the keys it names) are "
        "refused with 16 NO_PERMISSION; the whole update is refused then.",
    )
    def patch(self, request):
        s = ConfigUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        caller_of(request).check(every_cluster=True)  # the config is every cluster's
        try:
            config = type(self).update_config(s.validated_data)
        except ConfigError as exc:
            if exc.black_listed:
                raise ApiError(
                    ResponseCode.NO_PERMISSION,
                    "black-listed config keys cannot be updated: " + ", ".join(sorted(exc.black_listed)),
                    status.HTTP_403_FORBIDDEN,
                ) from None
            raise serializers.ValidationError(exc.field_errors) from None
        return Response(dict(config.values))
