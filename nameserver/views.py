"""REST endpoints of the nameserver (/api/v1/nameserver/). Thin: validate, call a service, shape."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, IsBroker, TokenPrincipal
from controlplane.config_views import ConfigView as BaseConfigView
from controlplane.errors import ApiError, ResponseCode

from . import selectors, services, settings_store, water_levels, wire
from .core.registry import RegisterOutcome
from .serializers import (
    WATER_LEVELS_SCHEMA,
    HeartbeatSerializer,
    MemberGroupQuerySerializer,
    RegisterBrokerSerializer,
    TopicDeleteSerializer,
    TopicUpdateSerializer,
    UnregisterSerializer,
    WaterLevelsQuerySerializer,
)

ERROR = inline_serializer(
    "Error",
    {
        "code": serializers.IntegerField(),
        "name": serializers.CharField(),
        "detail": serializers.CharField(),
        "fields": serializers.DictField(required=False),
    },
)
OK = inline_serializer("Ok", {"code": serializers.IntegerField(), "name": serializers.CharField()})
COMMON_ERRORS = {400: ERROR, 401: ERROR, 403: ERROR}


def _ok(**extra) -> dict:
    return {"code": 0, "name": "SUCCESS", **extra}


def _check_cluster(request, cluster_name: str) -> None:
    if isinstance(request.auth, TokenPrincipal) and not request.auth.allows_cluster(cluster_name):
        raise ApiError(ResponseCode.NO_PERMISSION, f"this token may not act on cluster {cluster_name}", 403)


def _unknown_brokers(exc: services.UnknownBrokers) -> ApiError:
    return ApiError(ResponseCode.BROKER_NOT_EXIST, "unknown broker set(s): " + ", ".join(exc.names), 404)


class RegisterBrokerView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="registerBroker",
        request=RegisterBrokerSerializer,
        responses={200: OK, 409: ERROR, **COMMON_ERRORS},
        description="REGISTER_BROKER (103): full registration with topic configs and data version. "
        "An id already held by another address with a higher stateVersion (master epoch) is refused "
        "with 2000 CONTROLLER_FENCED_MASTER_EPOCH.",
    )
    def post(self, request):
        s = RegisterBrokerSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        _check_cluster(request, s.validated_data["clusterName"])
        return Response(register_response(services.register_broker(s.to_request())))


def register_response(result: services.RegisterResult) -> dict:
    """The answer to a registration, shared by REST and the websocket; raises ApiError on refusal."""
    if result.outcome is RegisterOutcome.REFUSED_STALE_STATE_VERSION:
        raise ApiError(
            ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
            "another address holds this broker id with a higher stateVersion "
            f"({result.conflicting_state_version}); this registration is stale",
            conflictingStateVersion=result.conflicting_state_version,
        )
    if result.outcome is RegisterOutcome.REFUSED_SINGLE_TOPIC:
        raise ApiError(
            ResponseCode.SYSTEM_ERROR,
            "register broker failed: a single-topic registration needs a prior full registration",
        )
    return _ok(masterAddr=result.master_addr, haServerAddr=result.master_ha_addr, isolated=result.isolated)


class UnregisterBrokerView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(operation_id="unregisterBroker", request=UnregisterSerializer, responses={200: OK, **COMMON_ERRORS})
    def post(self, request):
        s = UnregisterSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        _check_cluster(request, d["clusterName"])
        result = services.unregister_broker(d["clusterName"], d["brokerAddr"], broker_name=d.get("brokerName"))
        return Response(_ok(unregistered=result is not None))


class HeartbeatView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="brokerHeartbeat",
        request=HeartbeatSerializer,
        responses={200: inline_serializer("HeartbeatAck", {"registered": serializers.BooleanField()}), **COMMON_ERRORS},
        description="BROKER_HEARTBEAT (904): lightweight; refreshes liveness only (Redis, no Postgres write). "
        "registered=false tells the broker to register again. An optional waterLevels report is kept (Redis, "
        f"{water_levels.TTL_MILLIS // 1000} s) as the broker's latest; see getWaterLevels.",
    )
    def post(self, request):
        s = HeartbeatSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        _check_cluster(request, d["clusterName"])
        registered = services.record_heartbeat(d["clusterName"], d["brokerAddr"])
        if d.get("waterLevels") is not None:
            water_levels.store([water_levels.WaterLevelReport(d["clusterName"], d["brokerAddr"], d["waterLevels"])])
        return Response(_ok(registered=registered))


_REPORTED_WATER_LEVELS = {
    **WATER_LEVELS_SCHEMA,
    "required": [*WATER_LEVELS_SCHEMA["required"], "slaves", "clusterName", "brokerAddr", "reportedAtMs"],
    "properties": {
        **WATER_LEVELS_SCHEMA["properties"],
        "clusterName": {"type": "string"},
        "brokerAddr": {"type": "string"},
        "reportedAtMs": {"type": "integer", "format": "int64", "description": "when it was stored (Redis clock, epoch ms)"},
    },
}


class WaterLevelsView(APIView):
    @extend_schema(
        operation_id="getWaterLevels",
        parameters=[WaterLevelsQuerySerializer],
        responses={
            200: {"type": "object", "properties": {"waterLevels": {"type": "array", "items": _REPORTED_WATER_LEVELS}}},
            **COMMON_ERRORS,
        },
        description="(ours) The latest replication water levels each live broker of a cluster (or of one broker "
        "set) sent with its heartbeat, sorted by brokerName, brokerId. A broker silent for "
        f"{water_levels.TTL_MILLIS // 1000} s drops out.",
    )
    def get(self, request):
        s = WaterLevelsQuerySerializer(data=request.query_params)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        _check_cluster(request, d["clusterName"])
        return Response({"waterLevels": water_levels.latest_reports(d["clusterName"], d.get("brokerName"))})


class MemberGroupView(APIView):
    @extend_schema(
        operation_id="getBrokerMemberGroup",
        parameters=[MemberGroupQuerySerializer],
        responses={200: OpenApiTypes.OBJECT, **COMMON_ERRORS},
        description="GET_BROKER_MEMBER_GROUP (901). Looked up by brokerName; an unknown set has no members.",
    )
    def get(self, request):
        s = MemberGroupQuerySerializer(data=request.query_params)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        group = selectors.member_group(d["brokerName"])
        if group is None:
            return Response({"cluster": d.get("clusterName", ""), "brokerName": d["brokerName"], "brokerAddrs": {}})
        return Response(wire.member_group(group))


class ClusterInfoView(APIView):
    @extend_schema(operation_id="getBrokerClusterInfo", responses={200: OpenApiTypes.OBJECT, **COMMON_ERRORS})
    def get(self, request):
        groups = selectors.cluster_info()
        return Response(wire.cluster_info(groups, selectors.liveness_of(groups.values())))


class TopicRouteView(APIView):
    @extend_schema(
        operation_id="getRouteInfoByTopic",
        responses={200: OpenApiTypes.OBJECT, 404: ERROR, **COMMON_ERRORS},
        description="GET_ROUTEINFO_BY_TOPIC (105), with acting-master substitution when supportActingMaster.",
    )
    def get(self, request, topic: str):
        body = selectors.topic_route_json(topic)
        if body is None:
            raise ApiError(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}", 404)
        return HttpResponse(body, content_type="application/json")


class TopicListView(APIView):
    def get_permissions(self):
        return [IsAdmin()] if self.request.method == "POST" else super().get_permissions()

    @extend_schema(
        operation_id="getTopicList",
        parameters=[OpenApiParameter("clusterName", str, required=False)],
        responses={200: OpenApiTypes.OBJECT, **COMMON_ERRORS},
    )
    def get(self, request):
        cluster = request.query_params.get("clusterName") or None
        topics = selectors.topics(cluster)
        return Response({"topicList": {t: [wire.queue_data(q) for q in qs] for t, qs in topics.items()}})

    @extend_schema(
        operation_id="updateAndCreateTopic",
        request=TopicUpdateSerializer,
        responses={200: OpenApiTypes.OBJECT, 404: ERROR, **COMMON_ERRORS},
        description="UPDATE_AND_CREATE_TOPIC on every broker set of a cluster (clusterName) or on chosen "
        "broker sets (brokerNames). The route changes at once; the brokers are told over their websocket.",
    )
    def post(self, request):
        s = TopicUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        try:
            names = services.create_or_update_topic(
                d["topicName"],
                read_queue_nums=d["readQueueNums"],
                write_queue_nums=d["writeQueueNums"],
                perm=d["perm"],
                topic_sys_flag=d["topicSysFlag"],
                cluster_name=d.get("clusterName"),
                broker_names=d.get("brokerNames"),
            )
        except services.UnknownBrokers as exc:
            raise _unknown_brokers(exc) from None
        return Response(_ok(topicName=d["topicName"], brokerNames=names))


class TopicDetailView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="deleteTopic",
        parameters=[
            OpenApiParameter("clusterName", str, required=False),
            OpenApiParameter("brokerName", str, required=False, many=True),
        ],
        responses={200: OpenApiTypes.OBJECT, 404: ERROR, **COMMON_ERRORS},
        description="DELETE_TOPIC_IN_NAMESRV: everywhere, on one cluster, or on the given broker sets.",
    )
    def delete(self, request, topic: str):
        data: dict = {}
        if cluster := request.query_params.get("clusterName"):
            data["clusterName"] = cluster
        if brokers := request.query_params.getlist("brokerName"):
            data["brokerName"] = brokers
        s = TopicDeleteSerializer(data=data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        deleted = services.delete_topic(topic, cluster_name=d.get("clusterName"), broker_names=d.get("brokerName"))
        if not deleted:
            raise ApiError(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} has no queue data there", 404)
        return Response(_ok(deletedQueueDatas=deleted))


class WritePermView(APIView):
    permission_classes = [IsAdmin]
    writeable = False

    @extend_schema(
        request=None,
        responses={
            200: inline_serializer("PermChange", {"changedTopics": serializers.IntegerField()}),
            404: ERROR,
            **COMMON_ERRORS,
        },
        description="WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327) for every topic of a broker set.",
    )
    def post(self, request, broker_name: str):
        try:
            changed = services.change_write_perm(broker_name, writeable=self.writeable)
        except services.UnknownBrokers as exc:
            raise _unknown_brokers(exc) from None
        return Response(_ok(changedTopics=changed))


@extend_schema_view(get=extend_schema(operation_id="getNamesrvConfig"), patch=extend_schema(operation_id="updateNamesrvConfig"))
class ConfigView(BaseConfigView):
    get_config = staticmethod(settings_store.current_config)
    update_config = staticmethod(settings_store.update_config)
