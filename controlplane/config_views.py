"""GET / PATCH of a keyed config (``GET_*_CONFIG`` / ``UPDATE_*_CONFIG``), shared by the nameserver
and the controller."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin
from controlplane.codes import ResponseCode
from controlplane.errors import ApiError
from controlplane.keyed_config import ConfigError


class ConfigUpdateSerializer(serializers.Serializer):
    """Any subset of the config's keys; checked by the config's own validation."""

    def to_internal_value(self, data):
        if not isinstance(data, dict) or not data:
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object of config keys"]})
        return data


class ConfigView(APIView):
    """Subclasses set ``get_config`` and ``update_config`` (the store's functions)."""

    get_config = None
    update_config = None

    def get_permissions(self):
        return [IsAdmin()] if self.request.method == "PATCH" else super().get_permissions()

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        return Response(dict(type(self).get_config().values))

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT},
        description="A JSON object of config keys. Black-listed keys (configBlackList and the keys it names) are "
        "refused with 16 NO_PERMISSION; the whole update is refused then.",
    )
    def patch(self, request):
        s = ConfigUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
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
