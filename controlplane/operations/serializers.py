"""Request validation for the operations API. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.validation import MAX_ID
from controlplane.validation_drf import integer_field, name_field


class BrokerSerializer(serializers.Serializer):
    """One broker process: the replica ``brokerId`` of ``brokerName`` (its controller id in a
    controller-managed set, else its nameserver id)."""

    brokerName = name_field()
    brokerId = integer_field(min_value=0, max_value=MAX_ID)


class IsolationSerializer(serializers.Serializer):
    code = serializers.IntegerField()
    name = serializers.CharField()
    clusterName = serializers.CharField()
    brokerName = serializers.CharField()
    brokerId = serializers.IntegerField()
    brokerAddr = serializers.CharField()
    isolated = serializers.BooleanField()
    changed = serializers.BooleanField(help_text="false when the broker already was in that state")
