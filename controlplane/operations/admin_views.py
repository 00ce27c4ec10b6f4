"""REST for the changes brokers carry out (controlplane/operations/broker_admin.py): updateBrokerConfig
and a consumer group's offset reset. Operators only; each view writes its own audit record (committed
before a broker is asked: ``self_audited``), so the audit middleware leaves it alone."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import IsAdmin, caller_of, who
from controlplane.openapi import BODY, errors
from controlplane.validation_drf import (
    RuledSerializer,
    boolean_field,
    checked_param,
    integer_field,
    name_field,
    name_parameter,
)
from mqrules.validation import MAX_ID

from . import broker_admin


@extend_schema_field(
    {
        "type": "object",
        "minProperties": 1,
        "maxProperties": broker_admin.MAX_UPDATES,
        "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"},
        "additionalProperties": {
            "oneOf": [
                {"type": "string", "maxLength": broker_admin.VALUE_MAX, "pattern": r"^[^\x00\n\r]*$"},
                {"type": "integer", "minimum": broker_admin.LONG_MIN, "maximum": broker_admin.LONG_MAX},
                {"type": "boolean"},
            ]
        },
    }
)
class _UpdatesField(serializers.JSONField):
    """Checked by the service (broker_admin._check_updates), described here."""


class BrokerConfigSerializer(serializers.Serializer):
    brokerName = name_field()
    brokerId = integer_field(min_value=0, max_value=MAX_ID, required=False, help_text="one broker (default: every live one)")
    updates = _UpdatesField(help_text="broker.conf keys and their new values (text, number or boolean)")
    preview = boolean_field(default=False, help_text="true: what would change, changing nothing")


class ResetOffsetSerializer(RuledSerializer):
    json_schema_rule = {"oneOf": [{"required": ["timestampMs"]}, {"required": ["offset"]}]}  # the service checks it
    topic = name_field()
    timestampMs = integer_field(
        min_value=0, max_value=MAX_ID, required=False, help_text="the first message stored at or after (epoch ms)"
    )
    offset = integer_field(
        min_value=-1, max_value=MAX_ID, required=False, help_text="this offset on every queue; -1: each queue's max"
    )
    preview = boolean_field(default=False, help_text="true: the offsets it would set, changing nothing")


class _ChangedBroker(serializers.Serializer):
    brokerName = serializers.CharField()
    brokerId = serializers.IntegerField()
    brokerAddr = serializers.CharField()
    changed = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), help_text="key: [old, new]")
    persisted = serializers.BooleanField(required=False, help_text="written to the broker's broker.conf")
    error = serializers.CharField(required=False, help_text="why this broker did not apply it")


class BrokerConfigAnswer(serializers.Serializer):
    preview = serializers.BooleanField()
    applied = serializers.BooleanField(required=False, help_text="every broker applied it")
    brokers = _ChangedBroker(many=True)


class _ResetQueue(serializers.Serializer):
    brokerName = serializers.CharField()
    queueId = serializers.IntegerField()
    committedOffset = serializers.IntegerField(allow_null=True)
    newOffset = serializers.IntegerField()
    maxOffset = serializers.IntegerField(allow_null=True)
    reconsumed = serializers.IntegerField(help_text="messages the group will consume again")
    skipped = serializers.IntegerField(help_text="messages the group will never consume")


class _ResetFailure(serializers.Serializer):
    brokerName = serializers.CharField()
    error = serializers.CharField()


class ResetOffsetAnswer(serializers.Serializer):
    group = serializers.CharField()
    topic = serializers.CharField()
    timestampMs = serializers.IntegerField(required=False)
    offset = serializers.IntegerField(required=False)
    preview = serializers.BooleanField()
    applied = serializers.BooleanField()
    queues = _ResetQueue(many=True)
    failed = _ResetFailure(many=True, required=False)


_WHY = {
    400: "Invalid input (a key that is not dynamic, a value the broker refuses): 29 INVALID_PARAMETER with `fields`.",
    404: "No report from that broker (211) / no route for the topic (17).",
    409: "No live broker to carry it out: 14 SERVICE_NOT_AVAILABLE. Nothing changed.",
    503: "A broker did not answer the preview: 14. Nothing changed.",
}


class BrokerConfigView(APIView):
    permission_classes = [IsAdmin]
    self_audited = True

    @extend_schema(
        operation_id="updateBrokerConfig",
        request=BrokerConfigSerializer,
        responses={200: BrokerConfigAnswer, **errors(*BODY, 404, 409, 503, why=_WHY)},
        description="mqadmin updateBrokerConfig: change dynamic keys (each broker's status report lists them) "
        "of one broker or of every live broker of a set. Applied at once and written to the broker's "
        "broker.conf. A partial outcome is a 200 naming the broker that did not apply it.",
    )
    def post(self, request):
        s = BrokerConfigSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        caller_of(request).check(broker_sets=[d["brokerName"]])
        try:
            return Response(
                broker_admin.update_config(who(request), d["brokerName"], d.get("brokerId"), d["updates"], preview=d["preview"])
            )
        except broker_admin.AdminError as exc:
            raise exc.api_error() from None


class ResetOffsetView(APIView):
    permission_classes = [IsAdmin]
    self_audited = True

    @extend_schema(
        operation_id="resetOffsetByTime",
        parameters=[name_parameter("group", OpenApiParameter.PATH)],
        request=ResetOffsetSerializer,
        responses={200: ResetOffsetAnswer, **errors(*BODY, 404, 409, 503, why=_WHY)},
        description="mqadmin resetOffsetByTime (timestampMs) / resetOffset (offset): every queue of the topic "
        "on every broker set, carried out by each set's serving master and replicated to its slaves; "
        "recorded as operator_reset, which the offset audit never counts as a rollback. preview answers "
        "per queue the committed and new offsets and how many messages would be consumed again or skipped.",
    )
    def post(self, request, group: str):
        checked_param("group", group)
        s = ResetOffsetSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        caller_of(request).check(broker_sets=broker_admin.topic_sets(d["topic"]))
        try:
            return Response(
                broker_admin.reset_offset(
                    who(request),
                    group,
                    d["topic"],
                    timestamp_ms=d.get("timestampMs"),
                    offset=d.get("offset"),
                    preview=d["preview"],
                )
            )
        except broker_admin.AdminError as exc:
            raise exc.api_error() from None
