"""REST endpoints of the nameserver (/api/v1/nameserver/). Thin: validate, call a service, shape; the
broker-facing ones (register, unregister, heartbeat, member group) each call one operation of ``api.py``."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, IsBroker, binding_refusal, broker_set_clusters, caller_of, who
from controlplane.config_views import ConfigView as BaseConfigView
from controlplane.config_views import config_schema_view
from controlplane.errors import ApiError, ResponseCode
from controlplane.openapi import AUTH, BODY, errors
from controlplane.validation_drf import checked_param, name_parameter
from mqrules.topic_attributes import TOPIC_MESSAGE_TYPES

from . import api, broker_status, responses, selectors, services, settings_store, static_topics, water_levels, wire
from .core.config import DEFAULTS as CONFIG_DEFAULTS
from .core.config import SCHEMA as CONFIG_SCHEMA
from .serializers import (
    TOPIC_DELETE_MAX_BROKERS,
    WATER_LEVELS_SCHEMA,
    BrokerStatusQuerySerializer,
    HeartbeatSerializer,
    MemberGroupQuerySerializer,
    MigrationSerializer,
    QueueCountSerializer,
    RegisterBrokerSerializer,
    StaticDeleteQuerySerializer,
    StaticPreviewSerializer,
    StaticTopicCreateSerializer,
    TopicDeleteSerializer,
    TopicListQuerySerializer,
    TopicUpdateSerializer,
    UnregisterSerializer,
    WaterLevelsQuerySerializer,
)

# The answers as the schema declares them (responses.py); errors are controlplane.openapi's.
_ok = api.ok
UNKNOWN_SETS = "Unknown broker set(s): 211 BROKER_NOT_EXIST."


def _unknown_brokers(exc: services.UnknownBrokers) -> ApiError:
    return ApiError(ResponseCode.BROKER_NOT_EXIST, "unknown broker set(s): " + ", ".join(exc.names), 404)


class RegisterBrokerView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="registerBroker",
        request=RegisterBrokerSerializer,
        responses={
            200: responses.RegisterAnswer,
            **errors(
                *BODY,
                why={
                    409: "2000 CONTROLLER_FENCED_MASTER_EPOCH: another address holds this id with a higher stateVersion "
                    "(conflictingStateVersion); 1 SYSTEM_ERROR: a single-topic registration before a full one."
                },
            ),
        },
        description="REGISTER_BROKER (103): full registration with topic configs and data version. "
        "An id already held by another address with a higher stateVersion (master epoch) is refused "
        "with 2000 CONTROLLER_FENCED_MASTER_EPOCH.",
    )
    def post(self, request):
        return Response(api.register(request.data, caller_of(request)))


class UnregisterBrokerView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="unregisterBroker",
        request=UnregisterSerializer,
        responses={200: responses.UnregisterAnswer, **errors(*BODY)},
    )
    def post(self, request):
        return Response(api.unregister(request.data, caller_of(request)))


class HeartbeatView(APIView):
    permission_classes = [IsBroker]

    @extend_schema(
        operation_id="brokerHeartbeat",
        request=HeartbeatSerializer,
        responses={200: responses.HeartbeatAnswer, **errors(*BODY)},
        description="BROKER_HEARTBEAT (904): lightweight; refreshes liveness only (Redis, no Postgres write). "
        "registered=false tells the broker to register again. An optional waterLevels report is kept (Redis, "
        f"{water_levels.TTL_MILLIS // 1000} s) as the broker's latest; see getWaterLevels.",
    )
    def post(self, request):
        return Response(api.heartbeat(request.data, caller_of(request)))


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
            200: {
                "type": "object",
                "required": ["waterLevels"],
                "properties": {"waterLevels": {"type": "array", "items": _REPORTED_WATER_LEVELS}},
            },
            **errors(400, *AUTH),
        },
        description="(ours) The latest replication water levels each live broker of a cluster (or of one broker "
        "set) sent with its heartbeat, sorted by brokerName, brokerId. A broker silent for "
        f"{water_levels.TTL_MILLIS // 1000} s drops out.",
    )
    def get(self, request):
        s = WaterLevelsQuerySerializer(data=request.query_params.dict())
        s.is_valid(raise_exception=True)
        d = s.validated_data
        caller_of(request).check(clusters=[d["clusterName"]], broker_sets=[d.get("brokerName")])
        return Response({"waterLevels": water_levels.latest_reports(d["clusterName"], d.get("brokerName"))})


class MemberGroupView(APIView):
    @extend_schema(
        operation_id="getBrokerMemberGroup",
        parameters=[MemberGroupQuerySerializer],
        responses={200: responses.MemberGroupAnswer, **errors(400, *AUTH)},
        description="GET_BROKER_MEMBER_GROUP (901). Looked up by brokerName; an unknown set has no members.",
    )
    def get(self, request):
        return Response(api.member_group(request.query_params.dict(), caller_of(request)))


class ClusterInfoView(APIView):
    @extend_schema(operation_id="getBrokerClusterInfo", responses={200: responses.ClusterInfoAnswer, **errors(*AUTH)})
    def get(self, request):
        groups = selectors.cluster_info(caller_of(request).bound_cluster or None)  # a bound token: its cluster
        return Response(wire.cluster_info(groups, selectors.liveness_of(groups.values())))


class TopicRouteView(APIView):
    @extend_schema(
        operation_id="getRouteInfoByTopic",
        parameters=[name_parameter("topic", OpenApiParameter.PATH)],
        responses={200: responses.TopicRouteAnswer, **errors(400, *AUTH, why={404: "No route: 17 TOPIC_NOT_EXIST."})},
        description="GET_ROUTEINFO_BY_TOPIC (105), with acting-master substitution when supportActingMaster.",
    )
    def get(self, request, topic: str):
        checked_param("topic", topic)
        body = selectors.topic_route_json(topic)
        if body is None:
            raise ApiError(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}", 404)
        return HttpResponse(body, content_type="application/json")


class TopicListView(APIView):
    def get_permissions(self):
        return [IsAdmin()] if self.request.method == "POST" else super().get_permissions()

    @extend_schema(
        operation_id="getTopicList",
        parameters=[TopicListQuerySerializer],
        responses={200: responses.TopicListAnswer, **errors(400, *AUTH)},
    )
    def get(self, request):
        query = TopicListQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        cluster = query.validated_data.get("clusterName")
        caller = caller_of(request)
        caller.check(clusters=[cluster])
        topics = selectors.topics(cluster or caller.bound_cluster or None)  # a bound token: its cluster
        return Response({"topicList": {t: [wire.queue_data(q) for q in qs] for t, qs in topics.items()}})

    @extend_schema(
        operation_id="updateAndCreateTopic",
        request=TopicUpdateSerializer,
        responses={200: responses.TopicUpdatedAnswer, **errors(*BODY, why={404: UNKNOWN_SETS})},
        description="UPDATE_AND_CREATE_TOPIC on every broker set of a cluster (clusterName) or on chosen "
        f"broker sets (brokerNames). attributes sets the topic's message.type ({', '.join(TOPIC_MESSAGE_TYPES)}; "
        "changeable later, as in RocketMQ); attributes not named keep their value. The route changes at once; "
        "the brokers are told over their websocket.",
    )
    def post(self, request):
        s = TopicUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        caller_of(request).check(clusters=[d.get("clusterName")], broker_sets=d.get("brokerNames") or [])
        try:
            names = services.update_topic(d)
        except services.UnknownBrokers as exc:
            raise _unknown_brokers(exc) from None
        return Response(_ok(topicName=d["topicName"], brokerNames=names))


class TopicDetailView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="deleteTopic",
        parameters=[
            name_parameter("topic", OpenApiParameter.PATH),
            name_parameter("clusterName"),
            name_parameter("brokerName", many=True, max_items=TOPIC_DELETE_MAX_BROKERS),
        ],
        responses={
            200: responses.TopicDeletedAnswer,
            **errors(400, *AUTH, why={404: "The topic has no queues there: 17 TOPIC_NOT_EXIST."}),
        },
        description="DELETE_TOPIC_IN_NAMESRV: everywhere, on one cluster, or on the given broker sets.",
    )
    def delete(self, request, topic: str):
        checked_param("topic", topic)
        data: dict = {}
        if "clusterName" in request.query_params:
            data["clusterName"] = request.query_params["clusterName"]
        if "brokerName" in request.query_params:
            data["brokerName"] = request.query_params.getlist("brokerName")
        s = TopicDeleteSerializer(data=data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        everywhere = not d.get("clusterName") and not d.get("brokerName")
        caller_of(request).check(clusters=[d.get("clusterName")], broker_sets=d.get("brokerName") or [], every_cluster=everywhere)
        deleted = services.delete_topic(topic, cluster_name=d.get("clusterName"), broker_names=d.get("brokerName"))
        if not deleted:
            raise ApiError(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} has no queue data there", 404)
        return Response(_ok(deletedQueueDatas=deleted))


class WritePermView(APIView):
    permission_classes = [IsAdmin]
    writeable = False

    @extend_schema(
        request=None,
        parameters=[name_parameter("broker_name", OpenApiParameter.PATH)],
        responses={200: responses.PermChangeAnswer, **errors(400, *AUTH, why={404: UNKNOWN_SETS})},
        description="WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327) for every topic of a broker set.",
    )
    def post(self, request, broker_name: str):
        checked_param("broker_name", broker_name)
        caller_of(request).check(broker_sets=[broker_name])
        try:
            changed = services.change_write_perm(broker_name, writeable=self.writeable)
        except services.UnknownBrokers as exc:
            raise _unknown_brokers(exc) from None
        return Response(_ok(changedTopics=changed))


@config_schema_view("getNamesrvConfig", "updateNamesrvConfig", CONFIG_DEFAULTS, update=CONFIG_SCHEMA)
class ConfigView(BaseConfigView):
    get_config = staticmethod(settings_store.current_config)
    update_config = staticmethod(settings_store.update_config)


# --- static topics (seed 003): the mapping, its history, migrations --------------------------------


def _refused(exc: static_topics.StaticTopicRefused) -> ApiError:
    return ApiError(exc.code, exc.detail, exc.http_status)


def _change_answer(change: static_topics.Change) -> dict:
    def shown(m):
        return None if m is None else wire.static_topic(m)

    return _ok(applied=change.applied, before=shown(change.before), after=shown(change.after))


def _static_change(request, topic: str, serializer, data, touched, change) -> Response:
    """Every static-topic change view: the topic's name and the input checked (``serializer`` over
    ``data``), the caller bound to every broker set it touches (the topic's, and ``touched(d)``: a bound
    token acts on a topic wholly on its cluster only), then ``change(d)``'s answer, a refusal answered
    with its code."""
    checked_param("topic", topic)
    s = serializer(data=data)
    s.is_valid(raise_exception=True)
    d = s.validated_data
    current = static_topics.mapping_of(topic)
    sets = [*touched(d), *(current.brokers() if current else ())]
    caller_of(request).check(broker_sets=[n for n in sets if n])
    try:
        return Response(change(d))
    except static_topics.StaticTopicRefused as exc:
        raise _refused(exc) from None


_CHANGE_ERRORS = errors(
    *BODY,
    why={
        400: "Malformed input: field errors.",
        404: "17 TOPIC_NOT_EXIST or 211 BROKER_NOT_EXIST.",
        409: "2100 LOGIC_QUEUE_MAPPING_FENCED_EPOCH: the mapping changed since epoch; 29 INVALID_PARAMETER: "
        "not more queues than now (a static topic's count never goes down), or already static.",
    },
)


class StaticTopicListView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="getStaticTopics",
        responses={200: responses.StaticTopicListAnswer, **errors(*AUTH)},
        description="Every static topic's mapping; a token bound to a cluster sees those wholly on its cluster.",
    )
    def get(self, request):
        bound = caller_of(request).bound_cluster
        shown = [
            m
            for m in static_topics.all_mappings()
            if binding_refusal(bound, known=broker_set_clusters(m.brokers()) if bound else None) is None
        ]
        return Response({"staticTopics": [wire.static_topic(m) for m in shown]})

    @extend_schema(
        operation_id="updateStaticTopic",
        request=StaticTopicCreateSerializer,
        responses={
            200: responses.StaticTopicCreatedAnswer,
            **errors(*BODY, why={404: UNKNOWN_SETS, 409: "A static topic of that name exists, or a broker set is isolated."}),
        },
        description="Create a static topic (RocketMQ's updateStaticTopic): queueNums logical queues spread round robin "
        "over brokerNames. Its logical queues keep their ids while they move between broker sets.",
    )
    def post(self, request):
        s = StaticTopicCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        caller_of(request).check(broker_sets=d["brokerNames"])
        try:
            m = static_topics.create(d["topicName"], d["queueNums"], d["brokerNames"], actor=who(request))
        except static_topics.StaticTopicRefused as exc:
            raise _refused(exc) from None
        return Response(_ok(mapping=wire.static_topic(m)))


class StaticTopicDetailView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="getStaticTopic",
        parameters=[name_parameter("topic", OpenApiParameter.PATH)],
        responses={
            200: responses.StaticTopicDetailAnswer,
            **errors(400, *AUTH, why={404: "Not a static topic: 17 TOPIC_NOT_EXIST."}),
        },
    )
    def get(self, request, topic: str):
        checked_param("topic", topic)
        m = static_topics.mapping_of(topic)
        if m is None:
            raise ApiError(ResponseCode.TOPIC_NOT_EXIST, f"{topic} is not a static topic", 404)
        caller_of(request).check(broker_sets=m.brokers())
        history = [
            {"epoch": c.epoch, "kind": c.kind, "actor": c.actor, "params": c.params, "at": c.created_at.isoformat()}
            for c in static_topics.history(topic)
        ]
        return Response({**wire.static_topic(m), "history": history})

    @extend_schema(
        operation_id="deleteStaticTopic",
        parameters=[name_parameter("topic", OpenApiParameter.PATH), StaticDeleteQuerySerializer],
        responses={200: responses.StaticTopicChangeAnswer, **_CHANGE_ERRORS},
        description="Delete a static topic: its mapping and history, and the topic on every broker set it names "
        "(its messages with it). ?preview=true: what would go, nothing changed; ?epoch=: refused if it moved on.",
    )
    def delete(self, request, topic: str):
        def change(d):
            apply = d["preview"] != "true"
            return _change_answer(static_topics.delete(topic, expected_epoch=d.get("epoch"), actor=who(request), apply=apply))

        return _static_change(request, topic, StaticDeleteQuerySerializer, request.query_params.dict(), lambda d: [], change)


class MigrationView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="remappingStaticTopic",
        parameters=[name_parameter("topic", OpenApiParameter.PATH)],
        request=MigrationSerializer,
        responses={
            200: responses.MigrationAnswer,
            **errors(
                *BODY,
                why={
                    400: "29 INVALID_PARAMETER: a logical queue out of range or already on its target, "
                    "or no broker set to drain into.",
                    404: "17 TOPIC_NOT_EXIST (not a static topic) or 211 BROKER_NOT_EXIST (an unknown target).",
                    409: "2100 LOGIC_QUEUE_MAPPING_FENCED_EPOCH (the mapping changed since epoch), 2101 LOGIC_QUEUE_MIGRATING "
                    "(a queue's last move is not decided yet), 16 NO_PERMISSION (an isolated target).",
                },
            ),
        },
        description="Move logical queues (RocketMQ's remappingStaticTopic): moves, every queue of one broker set (drain), "
        "or a share for a new broker set (scaleOut). Only the mapping moves: writes go to the new broker sets at once; "
        "consumers read each old segment to its end, then the new one. preview: what would change, nothing changed.",
    )
    def post(self, request, topic: str):
        def touched(d) -> list[str]:
            drain = d.get("drain") or {}
            moved = [m["brokerName"] for m in d.get("moves", ())]
            return [*moved, drain.get("brokerName"), *drain.get("targets", ()), d.get("scaleOut")]

        def change(d):
            done = static_topics.migrate_checked(topic, d, actor=who(request))
            return _ok(**wire.migration(done, static_topics.FILE_RESERVED_HOURS))

        return _static_change(request, topic, MigrationSerializer, request.data, touched, change)


class QueueCountView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="updateStaticTopicQueueNums",
        parameters=[name_parameter("topic", OpenApiParameter.PATH)],
        request=QueueCountSerializer,
        responses={200: responses.StaticTopicChangeAnswer, **_CHANGE_ERRORS},
        description="updateStaticTopic with a larger queueNums: new logical queues, each on the named broker set "
        "writing the fewest (a new physical queue, or one whose segments all expired). The count never goes down.",
    )
    def post(self, request, topic: str):
        def change(d):
            done = static_topics.resize(
                topic,
                d["queueNums"],
                d.get("brokerNames"),
                expected_epoch=d.get("epoch"),
                actor=who(request),
                apply=not d["preview"],
            )
            return _change_answer(done)

        return _static_change(request, topic, QueueCountSerializer, request.data, lambda d: d.get("brokerNames", []), change)


class AdoptView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="convertToStaticTopic",
        parameters=[name_parameter("topic", OpenApiParameter.PATH)],
        request=StaticPreviewSerializer,
        responses={200: responses.StaticTopicChangeAnswer, **_CHANGE_ERRORS},
        description="Turn an existing topic static: its queues on every broker set become its logical queues (broker "
        "sets in name order), each starting at logical offset = physical offset, so stored messages and committed "
        "offsets keep their meaning.",
    )
    def post(self, request, topic: str):
        def change(d):
            return _change_answer(static_topics.adopt(topic, actor=who(request), apply=not d["preview"]))

        return _static_change(
            request, topic, StaticPreviewSerializer, request.data, lambda d: selectors.topic_broker_sets(topic), change
        )


# --- broker status, consumer progress, topic status (nameserver/broker_status.py) ---------------------

_REPORT_NOTE = (
    "From the brokers' own status reports (the broker_status frame, every brokerStatusReportInterval, "
    "2 s by default); stale: no report for three intervals."
)


def _bound(request) -> str | None:
    return caller_of(request).bound_cluster or None  # a bound token sees its cluster only


class BrokerStatusView(APIView):
    @extend_schema(
        operation_id="getBrokerStatus",
        parameters=[BrokerStatusQuerySerializer],
        responses={200: responses.BrokerStatusAnswer, **errors(400, *AUTH, why={404: "No report: 211 BROKER_NOT_EXIST."})},
        description="mqadmin brokerStatus / getBrokerConfig: each broker's runtime status, its configuration "
        "(secrets left out) and the keys updateBrokerConfig may change. " + _REPORT_NOTE,
    )
    def get(self, request):
        query = BrokerStatusQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        name, broker_id = query.validated_data["brokerName"], query.validated_data.get("brokerId")
        caller_of(request).check(broker_sets=[name])
        rows = broker_status.reports(name, broker_id, _bound(request))
        if not rows:
            which = f"broker set {name}" + (f" id {broker_id}" if broker_id is not None else "")
            raise ApiError(ResponseCode.BROKER_NOT_EXIST, f"no status report from {which}", 404)
        return Response({"brokers": rows})


class ConsumerGroupsView(APIView):
    @extend_schema(
        operation_id="getConsumerGroups",
        responses={200: responses.ConsumerGroupsAnswer, **errors(*AUTH)},
        description="mqadmin consumerProgress without a group: every consumer group the serving brokers hold, "
        "with its topics, queue count, summed committed and max offsets, and total lag. " + _REPORT_NOTE,
    )
    def get(self, request):
        return Response({"groups": broker_status.consumer_groups(_bound(request))})


class ConsumerGroupView(APIView):
    @extend_schema(
        operation_id="getConsumerProgress",
        parameters=[name_parameter("group", OpenApiParameter.PATH)],
        responses={
            200: responses.ConsumerProgressAnswer,
            **errors(400, *AUTH, why={404: "No broker holds this group: 26 SUBSCRIPTION_GROUP_NOT_EXIST."}),
        },
        description="mqadmin consumerProgress -g: per queue the committed offset, the max offset and the lag "
        "(max - committed). " + _REPORT_NOTE,
    )
    def get(self, request, group: str):
        checked_param("group", group)
        found = broker_status.consumer_progress(group, _bound(request))
        if found is None:
            raise ApiError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"no broker holds consumer group {group}", 404)
        return Response(found)


class TopicOffsetsView(APIView):
    @extend_schema(
        operation_id="getTopicStatus",
        parameters=[name_parameter("topic", OpenApiParameter.PATH)],
        responses={200: responses.TopicStatusAnswer, **errors(400, *AUTH, why={404: "No queue reported: 17 TOPIC_NOT_EXIST."})},
        description="mqadmin topicStatus: each queue's min and max offset, per broker set. " + _REPORT_NOTE,
    )
    def get(self, request, topic: str):
        checked_param("topic", topic)
        queues = broker_status.topic_offsets(topic, _bound(request))
        if not queues:
            raise ApiError(ResponseCode.TOPIC_NOT_EXIST, f"no broker reported a queue of topic {topic}", 404)
        return Response({"topic": topic, "queues": queues})
