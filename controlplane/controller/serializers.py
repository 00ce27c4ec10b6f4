"""Request validation for the controller API. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.validation import INT_MAX, MAX_ID
from controlplane.validation_drf import addr_field, name_field

_name, _addr = name_field, addr_field


class ApplyBrokerIdSerializer(serializers.Serializer):
    clusterName = _name()
    brokerName = _name()
    appliedBrokerId = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    registerCheckCode = serializers.RegexField(
        r"^[^;\s]+:\d{1,5};\d+$", max_length=300, error_messages={"invalid": "must be '<brokerAddr>;<millis>'"}
    )


class RegisterSerializer(serializers.Serializer):
    clusterName = _name()
    brokerName = _name()
    brokerId = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    brokerAddress = _addr()


class HeartbeatSerializer(serializers.Serializer):
    clusterName = _name()
    brokerName = _name()
    brokerAddr = _addr()
    brokerId = serializers.IntegerField(
        min_value=1,
        max_value=MAX_ID,
        required=True,
        error_messages={"required": "brokerId is required (2005 CONTROLLER_INVALID_REQUEST)"},
    )
    epoch = serializers.IntegerField(min_value=-1, max_value=INT_MAX, default=-1)
    maxOffset = serializers.IntegerField(min_value=-1, max_value=MAX_ID, default=-1)
    confirmOffset = serializers.IntegerField(min_value=-1, max_value=MAX_ID, default=-1)
    heartbeatTimeoutMillis = serializers.IntegerField(min_value=100, max_value=3_600_000, default=10_000)
    electionPriority = serializers.IntegerField(min_value=0, max_value=INT_MAX, default=INT_MAX)


class ElectSerializer(serializers.Serializer):
    clusterName = _name(required=False)
    brokerName = _name()
    brokerId = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False, allow_null=True)
    designateElect = serializers.BooleanField(default=False)

    def validate(self, attrs):
        if attrs.get("designateElect") and attrs.get("brokerId") is None:
            raise serializers.ValidationError({"brokerId": "a designated election names the broker to elect"})
        return attrs


class AlterSerializer(serializers.Serializer):
    brokerName = _name()
    masterBrokerId = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    masterEpoch = serializers.IntegerField(min_value=0, max_value=INT_MAX)
    syncStateSet = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID), allow_empty=False, max_length=1000
    )
    syncStateSetEpoch = serializers.IntegerField(min_value=0, max_value=INT_MAX)


class CleanSerializer(serializers.Serializer):
    clusterName = _name(required=False)
    brokerName = _name()
    brokerControllerIdsToClean = serializers.RegexField(
        r"^\s*(\d+\s*(;\s*\d+\s*)*)?;?$",
        required=False,
        allow_blank=True,
        error_messages={"invalid": "ids separated by ';', e.g. 1;2"},
    )
    isCleanLivingBroker = serializers.BooleanField(default=False)

    def ids(self) -> set[int] | None:
        raw = self.validated_data.get("brokerControllerIdsToClean") or ""
        ids = {int(p) for p in raw.replace(" ", "").split(";") if p}
        return ids or None


class SyncStateDataSerializer(serializers.Serializer):
    brokerNames = serializers.ListField(child=_name(), allow_empty=False, max_length=10_000)
