"""REST endpoints of the controller (/api/v1/controller/): each calls one operation of ``api.py``."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, IsBroker, caller_of, request_is_operator
from controlplane.config_views import ConfigView as BaseConfigView
from controlplane.config_views import config_schema_view
from controlplane.openapi import AUTH, BODY, errors
from controlplane.validation_drf import name_parameter

from . import api, config_store, responses, selectors
from .core.config import DEFAULTS as CONFIG_DEFAULTS
from .core.config import SCHEMA as CONFIG_SCHEMA
from .responses import refusals
from .serializers import (
    SYNC_STATE_DATA_MAX_NAMES,
    AlterSerializer,
    ApplyBrokerIdSerializer,
    CleanSerializer,
    ElectSerializer,
    HeartbeatSerializer,
    HistoryQuerySerializer,
    NextBrokerIdQuerySerializer,
    RegisterSerializer,
    SyncStateDataSerializer,
)


class _Op(APIView):
    """A POST that runs one controller operation with the request body."""

    operation = None

    def post(self, request):
        return Response(type(self).operation(request.data, caller_of(request)))


@extend_schema_view(
    post=extend_schema(
        operation_id="applyBrokerId",
        request=ApplyBrokerIdSerializer,
        responses={
            200: responses.StateAnswer,
            **errors(*BODY),
            **refusals({409: "2014 CONTROLLER_BROKER_ID_INVALID: the id is taken or out of order."}),
        },
        description="CONTROLLER_APPLY_BROKER_ID (1013); 2014 when the id is taken.",
    )
)
class ApplyBrokerIdView(_Op):
    permission_classes = [IsBroker]
    operation = staticmethod(api.apply_broker_id)


@extend_schema_view(
    post=extend_schema(
        operation_id="registerBrokerToController",
        request=RegisterSerializer,
        responses={
            200: responses.StateAnswer,
            **errors(*BODY),
            **refusals({404: "2010 CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: the id was never applied for."}),
        },
        description="CONTROLLER_REGISTER_BROKER (1003); 2010 for an unknown id.",
    )
)
class RegisterView(_Op):
    permission_classes = [IsBroker]
    operation = staticmethod(api.register)


@extend_schema_view(
    post=extend_schema(
        operation_id="controllerHeartbeat",
        request=HeartbeatSerializer,
        responses={200: responses.AckAnswer, **errors(*BODY)},
        description="BROKER_HEARTBEAT (904) to the controller: Redis only.",
    )
)
class HeartbeatView(_Op):
    permission_classes = [IsBroker]
    operation = staticmethod(api.heartbeat)


@extend_schema_view(
    post=extend_schema(
        operation_id="alterSyncStateSet",
        request=AlterSerializer,
        responses={
            200: responses.StateAnswer,
            **errors(*BODY),
            **refusals(
                {
                    409: "2000 fenced master epoch, 2001 fenced SyncStateSet epoch, 2002 invalid master, 2003 invalid "
                    "replicas, 2006 broker not alive, 2013 alter failed (unknown set, no change, master left out)."
                }
            ),
        },
        description="CONTROLLER_ALTER_SYNC_STATE_SET (1001), fenced: 2000/2001/2002/2003/2006/2013.",
    )
)
class AlterView(_Op):
    permission_classes = [IsBroker]
    operation = staticmethod(api.alter)


class ElectView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="electMaster",
        request=ElectSerializer,
        responses={
            200: responses.StateAnswer,
            **errors(
                *BODY,
                why={
                    400: "Invalid input, or a broker's election without its brokerId (2005 CONTROLLER_INVALID_REQUEST).",
                    403: "A broker token designating a master, or a set of another cluster: 16 NO_PERMISSION.",
                },
            ),
            **refusals(
                {
                    404: "2010 CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: unknown broker set.",
                    409: "2004 CONTROLLER_MASTER_NOT_AVAILABLE, 2012 CONTROLLER_ELECT_MASTER_FAILED: no eligible replica.",
                }
            ),
        },
        description="CONTROLLER_ELECT_MASTER (1002). A broker token elects as that broker (brokerId = "
        "itself); an admin token is an operator: designateElect with brokerId moves mastership "
        "to that replica, without brokerId it is an automatic election. 2011 (master still "
        "alive) answers 200 like RocketMQ's brokers treat it.",
    )
    def post(self, request):
        return Response(api.elect(request.data, caller_of(request), operator=request_is_operator(request)))


class CleanView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="cleanBrokerData",
        request=CleanSerializer,
        responses={
            200: responses.StateAnswer,
            **errors(*BODY),
            **refusals({409: "2009 CONTROLLER_INVALID_CLEAN_BROKER_METADATA: unknown set, a master left, or ids alive."}),
        },
        description="CLEAN_BROKER_DATA (1011): 2009 when refused.",
    )
    def post(self, request):
        return Response(api.clean(request.data, caller_of(request)))


class NextBrokerIdView(APIView):
    @extend_schema(
        operation_id="getNextBrokerId",
        parameters=[name_parameter("broker_name", OpenApiParameter.PATH), NextBrokerIdQuerySerializer],
        responses={200: responses.NextBrokerIdAnswer, **errors(400, *AUTH)},
        description="CONTROLLER_GET_NEXT_BROKER_ID (1012).",
    )
    def get(self, request, broker_name: str):
        query = NextBrokerIdQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        return Response(
            api.next_broker_id(
                {"brokerName": broker_name, "clusterName": query.validated_data.get("clusterName")}, caller_of(request)
            )
        )


class ReplicaInfoView(APIView):
    @extend_schema(
        operation_id="getReplicaInfo",
        parameters=[name_parameter("broker_name", OpenApiParameter.PATH)],
        responses={
            200: responses.StateAnswer,
            **errors(400, *AUTH, why={404: "2008 CONTROLLER_BROKER_METADATA_NOT_EXIST: unknown broker set."}),
        },
        description="CONTROLLER_GET_REPLICA_INFO (1004); 404 + 2008 for an unknown set.",
    )
    def get(self, request, broker_name: str):
        return Response(api.replica_info({"brokerName": broker_name}, caller_of(request)))


class SyncStateDataView(APIView):
    @extend_schema(
        operation_id="getSyncStateData",
        parameters=[name_parameter("brokerName", many=True, required=True, max_items=SYNC_STATE_DATA_MAX_NAMES)],
        responses={200: responses.SyncStateDataAnswer, **errors(400, *AUTH)},
        description="CONTROLLER_GET_SYNC_STATE_DATA (1006): unknown names are skipped.",
    )
    def get(self, request):
        s = SyncStateDataSerializer(data={"brokerNames": request.query_params.getlist("brokerName")})
        s.is_valid(raise_exception=True)
        caller_of(request).check(broker_sets=s.validated_data["brokerNames"])
        out = selectors.sync_state_data(s.validated_data["brokerNames"])
        return Response({"code": 0, "name": "SUCCESS", "brokerReplicasInfo": out})


class MetadataView(APIView):
    @extend_schema(
        operation_id="getControllerMetadata",
        responses={200: responses.MetadataAnswer, **errors(*AUTH)},
        description="CONTROLLER_GET_METADATA_INFO (1005). Postgres is the consensus point, so every "
        "control-plane process is a leader: brokers may call any of them.",
    )
    def get(self, request):
        return Response({"code": 0, "name": "SUCCESS", **selectors.metadata(request.get_host())})


class HistoryView(APIView):
    @extend_schema(
        operation_id="getControllerHistory",
        parameters=[HistoryQuerySerializer],
        responses={200: responses.HistoryAnswer, **errors(400, *AUTH)},
        description="The append-only history of committed transitions, newest first.",
    )
    def get(self, request):
        query = HistoryQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        broker_name, limit = query.validated_data.get("brokerName"), query.validated_data["limit"]
        caller = caller_of(request)
        caller.check(broker_sets=[broker_name])
        rows = selectors.history(broker_name, limit, cluster_name=caller.bound_cluster or None)
        return Response(
            {
                "transitions": [
                    {
                        "id": t.id,
                        "clusterName": t.cluster_name,
                        "brokerName": t.broker_name,
                        "kind": t.kind,
                        "trigger": t.trigger,
                        "requestedBy": t.requested_by,
                        "requestedBrokerId": t.requested_broker_id,
                        "oldMasterBrokerId": t.old_master_broker_id,
                        "newMasterBrokerId": t.new_master_broker_id,
                        "oldMasterEpoch": t.old_master_epoch,
                        "newMasterEpoch": t.new_master_epoch,
                        "oldSyncStateSetEpoch": t.old_sync_state_set_epoch,
                        "newSyncStateSetEpoch": t.new_sync_state_set_epoch,
                        "oldSyncStateSet": t.old_sync_state_set,
                        "newSyncStateSet": t.new_sync_state_set,
                        "candidates": t.candidates,
                        "responseCode": t.response_code,
                        "detail": t.detail,
                        "createdAt": t.created_at.isoformat(),
                    }
                    for t in rows
                ]
            }
        )


@config_schema_view("getControllerConfig", "updateControllerConfig", CONFIG_DEFAULTS, update=CONFIG_SCHEMA)
class ConfigView(BaseConfigView):
    get_config = staticmethod(config_store.current_config)
    update_config = staticmethod(config_store.update_config)
