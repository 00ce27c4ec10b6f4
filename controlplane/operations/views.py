"""REST endpoints of the operations that span both siblings (/api/v1/operations/): changes for operators
only (an admin token or an operator login), reads (headroom, the drills) for any caller; calls with an
admin token land in the operator audit log (``controlplane.audit.AuditMiddleware``), as every admin
REST call does, except the failover drill, which records itself (``self_audited``: its election must
commit while the request waits)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, caller_of, who
from controlplane.errors import ApiError
from controlplane.openapi import AUTH, BODY, errors
from controlplane.validation_drf import checked_param, name_parameter
from mqrules.codes import ResponseCode

from . import drill, isolation
from .headroom import headroom
from .serializers import (
    BrokerSerializer,
    DrillAnswerSerializer,
    DrillSerializer,
    DrillsQuerySerializer,
    DrillsSerializer,
    HeadroomSerializer,
    IsolationSerializer,
)

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


class HeadroomView(APIView):
    @extend_schema(
        operation_id="getGroupHeadroom",
        parameters=[name_parameter("broker_name", OpenApiParameter.PATH)],
        responses={
            200: HeadroomSerializer,
            **errors(400, *AUTH, why={404: "2008 CONTROLLER_BROKER_METADATA_NOT_EXIST: not a controller-managed broker set."}),
        },
        description="How many more replica losses the broker set can take before writes stop: from its "
        "SyncStateSet, which replicas are alive, and the master's inSyncReplicas, minInSyncReplicas and "
        "allAckInSyncStateSet (its status report; RocketMQ's defaults, configKnown false, without one). "
        "In count mode also how many before sends are no longer acknowledged by enough replicas.",
    )
    def get(self, request, broker_name: str):
        checked_param("broker_name", broker_name)
        caller_of(request).check(broker_sets=[broker_name])
        answer = headroom(broker_name)
        if answer is None:
            raise ApiError(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"{broker_name} is not managed by the controller", 404
            )
        return Response(answer)


class DrillView(APIView):
    """A failover drill: the election and the wait for the new master are not one transaction (the
    brokers must hear of the election while the view waits), so the view records itself
    (controlplane/operations/drill.py commits the audit record with the drill row before the switch)."""

    permission_classes = [IsAdmin]
    self_audited = True

    @extend_schema(
        operation_id="runFailoverDrill",
        parameters=[name_parameter("broker_name", OpenApiParameter.PATH)],
        request=DrillSerializer,
        responses={
            200: DrillAnswerSerializer,
            **errors(
                *BODY,
                why={
                    400: "Invalid input, or a brokerId that is no replica of the set or is its master: 29 INVALID_PARAMETER.",
                    404: "2008 CONTROLLER_BROKER_METADATA_NOT_EXIST: not a controller-managed broker set.",
                    409: "Not drillable now, nothing changed: 2004 the master is not alive (use electMaster), 2012 the "
                    "target is outside the SyncStateSet or isolated (or no in-sync slave), 2006 the target is not "
                    "alive, 14 a broker of the switch is not registered with the nameserver, 2 a drill is running.",
                },
            ),
        },
        description="Switch the broker set over to a replica of its SyncStateSet (brokerId, or the best alive "
        "one) through the controller's election, wait (at most 15 s) until the new master is registered "
        "as id 0 at the new epoch, and answer the drill with its RTO, the data at risk before and lost at "
        "the switch. preview: which replica would take over and its lag, changing nothing. A switch the "
        "controller refuses or a new master that does not serve in time is a 200 with outcome failed.",
    )
    def post(self, request, broker_name: str):
        checked_param("broker_name", broker_name)
        s = DrillSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        caller_of(request).check(broker_sets=[broker_name])
        try:
            if d["preview"]:
                return Response({"preview": True, "plan": drill.preview(broker_name, d.get("brokerId"))})
            return Response({"preview": False, "drill": drill.run(who(request), broker_name, d.get("brokerId"))})
        except drill.DrillError as exc:
            raise exc.api_error() from None


class DrillsView(APIView):
    @extend_schema(
        operation_id="listFailoverDrills",
        parameters=[DrillsQuerySerializer],
        responses={200: DrillsSerializer, **errors(400, *AUTH)},
        description="The latest failover drills, newest first: RTO, data at risk and lost, outcome.",
    )
    def get(self, request):
        query = DrillsQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        broker_name = query.validated_data.get("brokerName")
        caller = caller_of(request)
        caller.check(broker_sets=[broker_name])
        rows = drill.recent(broker_name, query.validated_data["limit"], cluster_name=caller.bound_cluster or None)
        return Response({"drills": rows})
