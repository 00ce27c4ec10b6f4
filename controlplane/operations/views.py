"""REST endpoints of the operations that span both siblings (/api/v1/operations/): operators only
(an admin token or an operator login); calls with an admin token land in the operator audit log
(``controlplane.audit.AuditMiddleware``), as every admin REST call does."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, caller_of, who
from controlplane.codes import ResponseCode
from controlplane.errors import ApiError
from controlplane.openapi import BODY, errors

from . import isolation
from .serializers import BrokerSerializer, IsolationSerializer

_ERRORS = errors(
    *BODY,
    why={
        400: "Invalid input, or no such broker in that set: 29 INVALID_PARAMETER with `fields`.",
        404: "Unknown broker set: 211 BROKER_NOT_EXIST.",
    },
)


class _IsolationView(APIView):
    permission_classes = [IsAdmin]
    isolated: bool

    def post(self, request):
        s = BrokerSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        name, broker_id = s.validated_data["brokerName"], s.validated_data["brokerId"]
        caller_of(request).check(broker_sets=[name])
        try:
            outcome = isolation.isolate(name, broker_id, self.isolated, by=who(request))
        except isolation.UnknownGroup as exc:
            raise ApiError(ResponseCode.BROKER_NOT_EXIST, f"unknown broker set {name}", 404) from exc
        except isolation.UnknownMember as exc:
            raise serializers.ValidationError({"brokerId": [f"no broker {broker_id} in {name}"]}) from exc
        return Response({"code": 0, "name": "SUCCESS", **outcome.as_dict()})


@extend_schema_view(
    post=extend_schema(
        operation_id="isolateBroker",
        request=BrokerSerializer,
        responses={200: IsolationSerializer, **_ERRORS},
        description="Isolate one broker: it leaves the topic routes, is no candidate in elections and is "
        "told to stop taking writes (now over its websocket, and in every registration answer).",
    )
)
class IsolateView(_IsolationView):
    isolated = True


@extend_schema_view(
    post=extend_schema(
        operation_id="unisolateBroker",
        request=BrokerSerializer,
        responses={200: IsolationSerializer, **_ERRORS},
        description="Lift an isolation: the broker is back in routes and elections and takes writes again.",
    )
)
class UnisolateView(_IsolationView):
    isolated = False
