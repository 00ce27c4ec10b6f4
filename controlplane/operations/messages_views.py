"""REST for finding messages, their traces, dead letters and connected clients
(/api/v1/clusters/<cluster>/...; docs/messages.md §5). Thin: check, call messages.py / dlq.py or the
nameserver's reports, shape. Reads: any token or login (a token bound to a cluster reaches that cluster
only); a resend: an operator, recorded by the service before the brokers are asked (``self_audited``)."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, path_cluster, who
from controlplane.openapi import AUTH, BODY, errors
from controlplane.validation_drf import checked_param, name_parameter, validated
from mqrules import validation as v
from nameserver import broker_status

from . import dlq, messages
from . import message_rules as rules
from .messages_serializers import (
    ByOffsetQuerySerializer,
    ClientsAnswer,
    ClientsQuerySerializer,
    DeadLettersAnswer,
    DlqQuerySerializer,
    MessageDetailSerializer,
    MessagesAnswer,
    MessagesQuerySerializer,
    ResendAnswer,
    ResendSerializer,
    TraceAnswer,
    TraceQuerySerializer,
)

CLUSTER = name_parameter("cluster", OpenApiParameter.PATH, description="the cluster whose brokers are asked")
GROUP = name_parameter("group", OpenApiParameter.PATH, description="the consumer group")
MSG_ID = OpenApiParameter(
    "msg_id",
    {"type": "string", "pattern": rules.KEY_PATTERN, "minLength": 1, "maxLength": rules.KEY_MAX},
    OpenApiParameter.PATH,
    description="the offset message id (the view's msgId: store host + commit-log offset); with ?topic=, "
    "also the client's message id (its unique key), as RocketMQ's admin looks an id up",
)
TOPIC = name_parameter(
    "topic", OpenApiParameter.QUERY, required=False, description="lets msg_id be the client's message id (a unique key)"
)
_WHY = {
    404: "The topic has no queues in the cluster, or the message is not there (any more): 17 TOPIC_NOT_EXIST; "
    "an unknown broker set: 211 BROKER_NOT_EXIST.",
    409: "A broker refused the request (its code).",
    503: "No replica of a broker set asked answered (none alive and connected, or silent): 14 SERVICE_NOT_AVAILABLE.",
}
READ_ERRORS = errors(400, *AUTH, why=_WHY)


def _msg_id(request, msg_id: str) -> tuple[str, str | None]:
    """The path's id and the ``topic`` parameter; without a topic the id must be an offset id."""
    topic = request.query_params.get("topic")
    if topic is not None:
        checked_param("topic", topic)
    try:
        if topic is None:
            rules.decode_msg_id(msg_id)
        elif len(msg_id) > rules.KEY_MAX or " " in msg_id:
            raise v.Invalid({"msgId": [f"an offset id, or a unique key of at most {rules.KEY_MAX} characters without spaces"]})
    except v.Invalid as exc:
        raise messages.invalid(exc).api_error() from None
    return msg_id, topic


def _run(call, *args, **kw):
    try:
        return call(*args, **kw)
    except messages.MessageError as exc:
        raise exc.api_error() from None


class MessagesView(APIView):
    @extend_schema(
        operation_id="queryMsgByKey",
        parameters=[CLUSTER, MessagesQuerySerializer],
        responses={200: MessagesAnswer, **READ_ERRORS},
        description="mqadmin queryMsgByKey (key), queryMsgByUniqueKey (uniqueKey) or printMsg (neither): the "
        "topic's messages from every broker set, newest first (printMsg: oldest first), each once. key and "
        "uniqueKey exclude each other; begin..end is at most 7 days (default: the last 7 days; by unique key, "
        "any time); max at most 1000 (default 64).",
    )
    def get(self, request, cluster: str):
        path_cluster(request, cluster)
        q = validated(MessagesQuerySerializer, request.query_params.dict())
        plan = _run(messages.plan, q["topic"], q.get("key"), q.get("uniqueKey"), q.get("begin"), q.get("end"), q.get("max"))
        return Response(_run(messages.query, cluster, plan))


class ByOffsetView(APIView):
    @extend_schema(
        operation_id="queryMsgByOffset",
        parameters=[CLUSTER, ByOffsetQuerySerializer],
        responses={200: MessageDetailSerializer, **READ_ERRORS},
        description="mqadmin queryMsgByOffset: the message whose record starts at commitLogOffset in the broker "
        "set's commit log, its body previewed.",
    )
    def get(self, request, cluster: str):
        path_cluster(request, cluster)
        q = validated(ByOffsetQuerySerializer, request.query_params.dict())
        found = _run(messages.find_by_offset, cluster, q["brokerName"], q["commitLogOffset"])
        return Response(messages.detailed(found))


class MessageView(APIView):
    @extend_schema(
        operation_id="queryMsgById",
        parameters=[CLUSTER, MSG_ID, TOPIC],
        responses={200: MessageDetailSerializer, **READ_ERRORS},
        description="mqadmin queryMsgById: the offset id is decoded (store host + commit-log offset) and the "
        "broker set that stored it is asked (its master, or a replica when the master is gone). The body is "
        "previewed: pretty JSON when it parses, text when it is UTF-8, else hex, at most 4 KiB.",
    )
    def get(self, request, cluster: str, msg_id: str):
        path_cluster(request, cluster)
        msg_id, topic = _msg_id(request, msg_id)
        found = _run(messages.find, cluster, msg_id, rules.PREVIEW_BYTES, topic)
        return Response(messages.detailed(found))


class BodyView(APIView):
    @extend_schema(
        operation_id="downloadMessageBody",
        parameters=[CLUSTER, MSG_ID, TOPIC],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **READ_ERRORS},
        description="The message's whole body, as stored.",
    )
    def get(self, request, cluster: str, msg_id: str):
        path_cluster(request, cluster)
        msg_id, topic = _msg_id(request, msg_id)
        found = _run(messages.find, cluster, msg_id, rules.BODY_MAX_BYTES, topic)
        response = HttpResponse(messages.body(found), content_type="application/octet-stream")
        response["Content-Disposition"] = f'attachment; filename="{msg_id}.bin"'
        return response


class TraceView(APIView):
    @extend_schema(
        operation_id="queryMsgTraceById",
        parameters=[CLUSTER, MSG_ID, TOPIC, TraceQuerySerializer],
        responses={200: TraceAnswer, **READ_ERRORS},
        description="What each consumer group did with the message: its deliveries (when, to which client, "
        "acked when), its copies in the group's retry topic and DLQ, and a verdict (consumed, delivered, "
        "in_flight, not_yet, dead, unknown). The groups: those with offsets committed on its topic, a retry "
        "topic of it, or clients subscribing now (or only the named ones).",
    )
    def get(self, request, cluster: str, msg_id: str):
        path_cluster(request, cluster)
        q = validated(TraceQuerySerializer, {"group": request.query_params.getlist("group")})
        msg_id, topic = _msg_id(request, msg_id)
        return Response(_run(messages.trace, cluster, msg_id, q.get("group") or None, topic))


class DeadLettersView(APIView):
    @extend_schema(
        operation_id="listDeadLetters",
        parameters=[CLUSTER, GROUP, DlqQuerySerializer],
        responses={200: DeadLettersAnswer, **READ_ERRORS},
        description="The group's dead letters (%DLQ%<group>) on each broker set, from a queue offset: each with "
        "its original topic and id, why it is dead and after how many attempts.",
    )
    def get(self, request, cluster: str, group: str):
        path_cluster(request, cluster)
        checked_param("group", group)
        q = validated(DlqQuerySerializer, request.query_params.dict())
        return Response(_run(dlq.dead_letters, cluster, group, q["offset"], q["limit"]))


class ExportView(APIView):
    @extend_schema(
        operation_id="exportDeadLetters",
        parameters=[CLUSTER, GROUP],
        responses={(200, "application/x-ndjson"): OpenApiTypes.STR, **READ_ERRORS},
        description="Every dead letter of the group (at most 100000) as JSON lines, one message view a line.",
    )
    def get(self, request, cluster: str, group: str):
        path_cluster(request, cluster)
        checked_param("group", group)
        lines = _run(dlq.export_lines, cluster, group)
        response = HttpResponse("".join(lines).encode(), content_type="application/x-ndjson")
        response["Content-Disposition"] = f'attachment; filename="dlq-{cluster}-{group}.jsonl"'
        return response


class ResendView(APIView):
    permission_classes = [IsAdmin]
    self_audited = True  # dlq.resend commits its record before a broker is asked

    @extend_schema(
        operation_id="resendDeadLetters",
        parameters=[CLUSTER, GROUP],
        request=ResendSerializer,
        responses={
            200: ResendAnswer,
            **errors(
                *BODY,
                why={
                    **_WHY,
                    404: "A message named is not in the group's DLQ (gone, or never there): 17, nothing resent.",
                    503: "A set has no live master, or it did not answer the preview: 14, nothing resent.",
                },
            ),
        },
        description="Resend dead letters (msgIds, or all) to their original topics, each as a new message "
        "keeping the original id (ORIGIN_MESSAGE_ID). dryRun: what would be resent, nothing sent. Every "
        "resend is previewed first and refused whole when a message is gone; idempotent per requestId: a "
        "message already resent under it is not resent again (already: true). Audited.",
    )
    def post(self, request, cluster: str, group: str):
        path_cluster(request, cluster)
        checked_param("group", group)
        d = validated(ResendSerializer, request.data)
        return Response(
            _run(
                dlq.resend,
                who(request),
                cluster,
                group,
                d.get("msgIds"),
                every=bool(d.get("all")),
                request_id=d.get("requestId"),
                dry_run=d["dryRun"],
            )
        )


class ClientsView(APIView):
    @extend_schema(
        operation_id="consumerConnection",
        parameters=[CLUSTER, ClientsQuerySerializer],
        responses={200: ClientsAnswer, **errors(400, *AUTH)},
        description="mqadmin consumerConnection / producerConnection: the clients connected now (gRPC and "
        "remoting), one row per (group, client) over the brokers that know it, from the brokers' status "
        "reports; of one group, of the clients of one topic.",
    )
    def get(self, request, cluster: str):
        path_cluster(request, cluster)
        q = validated(ClientsQuerySerializer, request.query_params.dict())
        return Response(broker_status.connected_clients(cluster, q.get("group"), q.get("topic")))
