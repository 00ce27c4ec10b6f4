"""Request validation for the controller API. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.validation_drf import (
    RuledSerializer,
    addr_field,
    boolean_field,
    integer_field,
    name_field,
    pattern_field,
    query_integer_field,
)
from mqrules import validation as v
from mqrules.validation import INT_MAX, MAX_ID

_name, _addr = name_field, addr_field


class ApplyBrokerIdSerializer(serializers.Serializer):
    clusterName = _name()
    brokerName = _name()
    appliedBrokerId = integer_field(min_value=1, max_value=MAX_ID)
    registerCheckCode = pattern_field(v.register_check_code, v.CHECK_CODE_PATTERN, v.CHECK_CODE_MAX_LENGTH)


class RegisterSerializer(serializers.Serializer):
    clusterName = _name()
    brokerName = _name()
    brokerId = integer_field(min_value=1, max_value=MAX_ID)
    brokerAddress = _addr()


class HeartbeatSerializer(serializers.Serializer):
    clusterName = _name()
    brokerName = _name()
    brokerAddr = _addr()
    brokerId = integer_field(
        min_value=1,
        max_value=MAX_ID,
        required=True,
        error_messages={"required": "brokerId is required (2005 CONTROLLER_INVALID_REQUEST)"},
    )
    epoch = integer_field(min_value=-1, max_value=INT_MAX, default=-1)
    maxOffset = integer_field(min_value=-1, max_value=MAX_ID, default=-1)
    confirmOffset = integer_field(min_value=-1, max_value=MAX_ID, default=-1)
    heartbeatTimeoutMillis = integer_field(min_value=100, max_value=3_600_000, default=10_000)
    electionPriority = integer_field(min_value=0, max_value=INT_MAX, default=INT_MAX)


class ElectSerializer(RuledSerializer):
    # validate(): a designated election names the broker to elect
    json_schema_rule = {
        "anyOf": [
            {"properties": {"designateElect": {"enum": [False]}}},
            {"required": ["brokerId"], "properties": {"brokerId": {"type": "integer"}}},
        ]
    }
    clusterName = _name(required=False)
    brokerName = _name()
    brokerId = integer_field(min_value=1, max_value=MAX_ID, required=False, allow_null=True)
    designateElect = boolean_field(default=False)

    def validate(self, attrs):
        if attrs.get("designateElect") and attrs.get("brokerId") is None:
            raise serializers.ValidationError({"brokerId": "a designated election names the broker to elect"})
        return attrs


class AlterSerializer(serializers.Serializer):
    brokerName = _name()
    masterBrokerId = integer_field(min_value=1, max_value=MAX_ID)
    masterEpoch = integer_field(min_value=0, max_value=INT_MAX)
    syncStateSet = serializers.ListField(
        child=integer_field(min_value=1, max_value=MAX_ID), allow_empty=False, min_length=1, max_length=1000
    )
    syncStateSetEpoch = integer_field(min_value=0, max_value=INT_MAX)


class CleanSerializer(serializers.Serializer):
    clusterName = _name(required=False)
    brokerName = _name()
    # Each id fits a Java long, checked before anything changes (RocketMQ: Long.valueOf, else 2009).
    brokerControllerIdsToClean = pattern_field(
        v.broker_ids_text, v.IDS_PATTERN, v.IDS_MAX_LENGTH, required=False, allow_blank=True
    )
    isCleanLivingBroker = boolean_field(default=False)

    def ids(self) -> set[int] | None:
        return set(v.broker_ids(self.validated_data.get("brokerControllerIdsToClean") or "")) or None


SYNC_STATE_DATA_MAX_NAMES = 1000  # repeated ?brokerName=: DATA_UPLOAD_MAX_NUMBER_FIELDS bounds a query string


class SyncStateDataSerializer(serializers.Serializer):
    brokerNames = serializers.ListField(child=_name(), allow_empty=False, max_length=SYNC_STATE_DATA_MAX_NAMES)


class NextBrokerIdQuerySerializer(serializers.Serializer):
    clusterName = _name(required=False)


class HistoryQuerySerializer(serializers.Serializer):
    brokerName = _name(required=False)
    limit = query_integer_field(min_value=1, max_value=1000, default=200)
