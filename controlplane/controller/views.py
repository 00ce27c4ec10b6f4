"""REST endpoints of the controller (/api/v1/controller/): each calls one operation of ``api.py``."""

from __future__ import annotations

import os
import socket

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, IsBroker, request_is_operator, who
from controlplane.config_views import ConfigView as BaseConfigView

from . import api, config_store, liveness, selectors
from .serializers import (
    AlterSerializer,
    ApplyBrokerIdSerializer,
    CleanSerializer,
    ElectSerializer,
    HeartbeatSerializer,
    RegisterSerializer,
    SyncStateDataSerializer,
)


class _Op(APIView):
    """A POST that runs one controller operation with the request body."""

    operation = None

    def post(self, request):
        return Response(type(self).operation(request.data, who(request)))


@extend_schema_view(
    post=extend_schema(
        operation_id="applyBrokerId",
        request=ApplyBrokerIdSerializer,
        responses={200: OpenApiTypes.OBJECT},
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
        responses={200: OpenApiTypes.OBJECT},
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
        responses={200: OpenApiTypes.OBJECT},
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
        responses={200: OpenApiTypes.OBJECT},
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
        responses={200: OpenApiTypes.OBJECT},
        description="CONTROLLER_ELECT_MASTER (1002). A broker token elects as that broker (brokerId = "
        "itself); an admin token is an operator: designateElect with brokerId moves mastership "
        "to that replica, without brokerId it is an automatic election. 2011 (master still "
        "alive) answers 200 like RocketMQ's brokers treat it.",
    )
    def post(self, request):
        return Response(api.elect(request.data, who(request), operator=request_is_operator(request)))


class CleanView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="cleanBrokerData",
        request=CleanSerializer,
        responses={200: OpenApiTypes.OBJECT},
        description="CLEAN_BROKER_DATA (1011): 2009 when refused.",
    )
    def post(self, request):
        return Response(api.clean(request.data, who(request)))


class NextBrokerIdView(APIView):
    @extend_schema(
        operation_id="getNextBrokerId",
        parameters=[OpenApiParameter("clusterName", str)],
        responses={200: OpenApiTypes.OBJECT},
        description="CONTROLLER_GET_NEXT_BROKER_ID (1012).",
    )
    def get(self, request, broker_name: str):
        return Response(
            api.next_broker_id({"brokerName": broker_name, "clusterName": request.query_params.get("clusterName")}, who(request))
        )


class ReplicaInfoView(APIView):
    @extend_schema(
        operation_id="getReplicaInfo",
        responses={200: OpenApiTypes.OBJECT},
        description="CONTROLLER_GET_REPLICA_INFO (1004); 404 + 2008 for an unknown set.",
    )
    def get(self, request, broker_name: str):
        return Response(api.replica_info({"brokerName": broker_name}, who(request)))


class SyncStateDataView(APIView):
    @extend_schema(
        operation_id="getSyncStateData",
        parameters=[OpenApiParameter("brokerName", str, many=True)],
        responses={200: OpenApiTypes.OBJECT},
        description="CONTROLLER_GET_SYNC_STATE_DATA (1006): unknown names are skipped.",
    )
    def get(self, request):
        s = SyncStateDataSerializer(data={"brokerNames": request.query_params.getlist("brokerName")})
        s.is_valid(raise_exception=True)
        out = {}
        for state in selectors.states(s.validated_data["brokerNames"]):
            live = liveness.live_infos(state.cluster_name, state.broker_name, state.replica_ids)

            def identity(r, state=state, live=live):
                return {
                    "brokerName": state.broker_name,
                    "brokerId": r.broker_id,
                    "brokerAddress": r.broker_address,
                    "alive": bool(live.get(r.broker_id) and live[r.broker_id].alive),
                }

            out[state.broker_name] = {
                "masterBrokerId": state.master_broker_id,
                "masterAddress": state.master_address,
                "masterEpoch": state.master_epoch,
                "syncStateSetEpoch": state.sync_state_set_epoch,
                "inSyncReplicas": [identity(r) for r in state.replicas if r.broker_id in state.sync_state_set],
                "notInSyncReplicas": [identity(r) for r in state.replicas if r.broker_id not in state.sync_state_set],
            }
        return Response({"code": 0, "name": "SUCCESS", "brokerReplicasInfo": out})


class MetadataView(APIView):
    @extend_schema(
        operation_id="getControllerMetadata",
        responses={200: OpenApiTypes.OBJECT},
        description="CONTROLLER_GET_METADATA_INFO (1005). Postgres is the consensus point, so every "
        "control-plane process is a leader: brokers may call any of them.",
    )
    def get(self, request):
        me = f"{socket.gethostname()}:{os.getpid()}"
        return Response(
            {
                "code": 0,
                "name": "SUCCESS",
                "group": "postgres",
                "controllerLeaderId": me,
                "controllerLeaderAddress": request.get_host(),
                "isLeader": True,
                "peers": "",
            }
        )


class HistoryView(APIView):
    @extend_schema(
        operation_id="getControllerHistory",
        parameters=[OpenApiParameter("brokerName", str), OpenApiParameter("limit", int)],
        responses={200: OpenApiTypes.OBJECT},
        description="The append-only history of committed transitions, newest first.",
    )
    def get(self, request):
        try:
            limit = max(1, min(1000, int(request.query_params.get("limit", 200))))
        except ValueError:
            limit = 200
        rows = selectors.history(request.query_params.get("brokerName") or None, limit)
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


@extend_schema_view(
    get=extend_schema(operation_id="getControllerConfig"), patch=extend_schema(operation_id="updateControllerConfig")
)
class ConfigView(BaseConfigView):
    get_config = staticmethod(config_store.current_config)
    update_config = staticmethod(config_store.update_config)
