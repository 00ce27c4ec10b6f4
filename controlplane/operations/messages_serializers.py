"""Requests and answers of the message endpoints (docs/messages.md §5): query parameters as the schema
states them (their cross-field rules: message_rules.plan_query), the broker's message view (§3) and
the shapes built on it. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.validation_drf import (
    RuledSerializer,
    boolean_field,
    name_field,
    pattern_field,
    query_integer_field,
)
from mqrules import validation as v

from . import message_rules as rules

_HEX32 = r"^[0-9A-Fa-f]{32}$"
_msg_id_check = v.matching(rules.MSG_ID_PATTERN, "an offset message id: 32 or 56 hex digits", 56)
_key_check = v.matching(rules.KEY_PATTERN, f"1 to {rules.KEY_MAX} characters, no space", rules.KEY_MAX)


def key_field(**kw) -> serializers.CharField:
    return pattern_field(_key_check, rules.KEY_PATTERN, rules.KEY_MAX, min_length=1, **kw)


def msg_id_field(**kw) -> serializers.CharField:
    return pattern_field(_msg_id_check, rules.MSG_ID_PATTERN, 56, **kw)


class MessagesQuerySerializer(serializers.Serializer):
    topic = name_field()
    key = key_field(required=False, help_text="queryMsgByKey: one of the message's KEYS")
    uniqueKey = key_field(required=False, help_text="queryMsgByUniqueKey: the client's message id (UNIQ_KEY)")
    begin = query_integer_field(min_value=0, max_value=v.MAX_ID, required=False, help_text="stored at or after (epoch ms)")
    end = query_integer_field(
        min_value=0, max_value=v.MAX_ID, required=False, help_text="stored at or before (epoch ms); a range is at most 7 days"
    )
    max = query_integer_field(min_value=1, max_value=rules.MAX_CAP, required=False, help_text=f"default {rules.DEFAULT_MAX}")


class ByOffsetQuerySerializer(serializers.Serializer):
    brokerName = name_field()
    commitLogOffset = query_integer_field(min_value=0, max_value=v.MAX_ID)


class TraceQuerySerializer(serializers.Serializer):
    group = serializers.ListField(
        child=name_field(), required=False, max_length=256, help_text="only these groups (default: every group subscribed)"
    )


class DlqQuerySerializer(serializers.Serializer):
    offset = query_integer_field(
        min_value=0, max_value=v.MAX_ID, required=False, default=0, help_text="from this DLQ queue offset"
    )
    limit = query_integer_field(min_value=1, max_value=500, required=False, default=100, help_text="per broker set")


class ResendSerializer(RuledSerializer):
    json_schema_rule = {"oneOf": [{"required": ["msgIds"]}, {"required": ["all"]}]}  # the service checks it
    msgIds = serializers.ListField(
        child=msg_id_field(),
        min_length=1,
        max_length=rules.MAX_CAP,
        required=False,
        help_text="offset message ids (the DLQ's msgId)",
    )
    all = boolean_field(required=False, help_text="true: every dead letter of the group (at most 10000)")
    requestId = pattern_field(
        v.matching(_HEX32, "32 hex digits", 32),
        _HEX32,
        32,
        required=False,
        help_text="the resend's id (default: a new one); the same id resends nothing twice",
    )
    dryRun = boolean_field(default=False, help_text="true: what would be resent, nothing sent")

    def validate(self, data):
        if "all" in data and data["all"] is not True:
            raise serializers.ValidationError({"all": ["only true (or leave it out and name msgIds)"]})
        return data


class ClientsQuerySerializer(serializers.Serializer):
    group = name_field(required=False)
    topic = name_field(required=False)


# --- answers ------------------------------------------------------------------------------------------


class MessageViewSerializer(serializers.Serializer):
    msgId = serializers.CharField(help_text="the offset message id (store host + commit-log offset)")
    uniqKey = serializers.CharField(allow_null=True, help_text="the client's message id")
    topic = serializers.CharField()
    tags = serializers.CharField(allow_null=True)
    keys = serializers.ListField(child=serializers.CharField())
    queueId = serializers.IntegerField()
    queueOffset = serializers.IntegerField()
    commitLogOffset = serializers.IntegerField()
    storeHost = serializers.CharField()
    bornHost = serializers.CharField(allow_blank=True)
    bornTimestamp = serializers.IntegerField()
    storeTimestamp = serializers.IntegerField()
    reconsumeTimes = serializers.IntegerField()
    bodySize = serializers.IntegerField()
    bodyCrc = serializers.IntegerField()
    properties = serializers.DictField(child=serializers.CharField(allow_blank=True))
    messageType = serializers.ChoiceField(choices=["NORMAL", "FIFO", "DELAY", "TRANSACTION"])
    deliveryTimestamp = serializers.IntegerField(allow_null=True)
    transactionState = serializers.CharField(allow_null=True)
    brokerName = serializers.CharField()
    brokerId = serializers.IntegerField()
    brokerAddr = serializers.CharField()


class _Failed(serializers.Serializer):
    brokerName = serializers.CharField()
    error = serializers.CharField()


class MessagesAnswer(serializers.Serializer):
    messages = MessageViewSerializer(many=True)
    truncated = serializers.BooleanField(help_text="more matched than max")
    failed = _Failed(many=True, required=False, help_text="broker sets that did not answer (others did)")


class BodyPreviewSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=[f.value for f in rules.BodyFormat])
    text = serializers.CharField(allow_blank=True, help_text="at most 4 KiB of the body: pretty JSON, text, or hex")
    size = serializers.IntegerField(help_text="the whole body's bytes")
    truncated = serializers.BooleanField(help_text="only the first 4 KiB are shown (GET .../body: all of it)")


class MessageDetailSerializer(MessageViewSerializer):
    body = BodyPreviewSerializer()


class _Delivery(serializers.Serializer):
    attempt = serializers.IntegerField()
    popTimeMs = serializers.IntegerField(allow_null=True)
    clientId = serializers.CharField(allow_null=True, allow_blank=True)
    invisibleUntilMs = serializers.IntegerField(allow_null=True)
    ackTimeMs = serializers.IntegerField(allow_null=True)
    topic = serializers.CharField()
    queueId = serializers.IntegerField()
    queueOffset = serializers.IntegerField()


class GroupTraceSerializer(serializers.Serializer):
    consumed = serializers.ChoiceField(choices=["consumed", "delivered", "in_flight", "not_yet", "dead", "unknown"])
    deliveries = _Delivery(many=True)
    retry = MessageViewSerializer(many=True, help_text="its copies in the group's retry topic")
    dlq = MessageViewSerializer(allow_null=True, help_text="its copy in the group's DLQ")
    committedOffset = serializers.IntegerField(allow_null=True)
    recordsGone = serializers.BooleanField(help_text="retention deleted records that may have told more")


class TraceAnswer(serializers.Serializer):
    message = MessageViewSerializer()
    groups = serializers.DictField(child=GroupTraceSerializer())


class DeadLetterSerializer(MessageViewSerializer):
    originTopic = serializers.CharField(allow_null=True)
    originMsgId = serializers.CharField(allow_null=True)
    reason = serializers.CharField()
    attempts = serializers.IntegerField()


class _DlqRange(serializers.Serializer):
    brokerName = serializers.CharField()
    minOffset = serializers.IntegerField(allow_null=True)
    maxOffset = serializers.IntegerField(allow_null=True)


class DeadLettersAnswer(serializers.Serializer):
    group = serializers.CharField()
    messages = DeadLetterSerializer(many=True)
    sets = _DlqRange(many=True)
    failed = _Failed(many=True, required=False)


class _Resent(serializers.Serializer):
    msgId = serializers.CharField(allow_null=True)
    brokerName = serializers.CharField()
    commitLogOffset = serializers.IntegerField()
    originTopic = serializers.CharField()
    newMsgId = serializers.CharField(allow_null=True)
    newUniqKey = serializers.CharField(allow_null=True)
    already = serializers.BooleanField(help_text="resent before under this requestId: not again")


class ResendAnswer(serializers.Serializer):
    group = serializers.CharField()
    requestId = serializers.CharField()
    dryRun = serializers.BooleanField()
    applied = serializers.BooleanField()
    resent = _Resent(many=True)
    failed = _Failed(many=True, required=False)


class _Subscription(serializers.Serializer):
    topic = serializers.CharField()
    expression = serializers.CharField(allow_blank=True)
    type = serializers.CharField()


class _Client(serializers.Serializer):
    group = serializers.CharField()
    clientId = serializers.CharField()
    language = serializers.CharField(allow_blank=True)
    version = serializers.CharField(allow_blank=True)
    address = serializers.CharField(allow_blank=True)
    protocol = serializers.ChoiceField(choices=["grpc", "remoting"])
    lastSeenMs = serializers.IntegerField()
    brokerNames = serializers.ListField(child=serializers.CharField())


class _Consumer(_Client):
    subscriptions = _Subscription(many=True)
    queues = serializers.ListField(child=serializers.ListField(), help_text="[brokerName, topic, queueId]")


class ClientsAnswer(serializers.Serializer):
    producers = _Client(many=True)
    consumers = _Consumer(many=True)
