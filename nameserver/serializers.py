"""Request validation for the nameserver API. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.validation import ADDR_RE, NAME_RE, addr_field, name_field

from .core.registry import RegisterRequest
from .core.values import DataVersion, TopicConfig

MAX_ID = 2**63 - 1
_name_field, _addr_field = name_field, addr_field


class DataVersionSerializer(serializers.Serializer):
    stateVersion = serializers.IntegerField(min_value=0, max_value=MAX_ID, default=0)
    counter = serializers.IntegerField(min_value=0, max_value=MAX_ID, default=0)
    timestamp = serializers.IntegerField(min_value=0, max_value=MAX_ID, default=0)


class TopicConfigSerializer(serializers.Serializer):
    topicName = _name_field(required=False)
    readQueueNums = serializers.IntegerField(min_value=0, max_value=65535, default=16)
    writeQueueNums = serializers.IntegerField(min_value=0, max_value=65535, default=16)
    perm = serializers.IntegerField(min_value=0, max_value=7, default=6)
    topicSysFlag = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)


class TopicConfigWrapperSerializer(serializers.Serializer):
    dataVersion = DataVersionSerializer(required=False)
    topicConfigTable = serializers.DictField(child=TopicConfigSerializer(), required=False, default=dict)

    def validate_topicConfigTable(self, table):
        errors = {name: "invalid topic name" for name in table if not NAME_RE.match(name) or len(name) > 127}
        for name, tc in table.items():
            if tc.get("topicName") not in (None, name):
                errors[name] = f"topicName {tc['topicName']!r} differs from its key"
        if errors:
            raise serializers.ValidationError(errors)
        return table


class BrokerIdentitySerializer(serializers.Serializer):
    clusterName = _name_field()
    brokerAddr = _addr_field()
    brokerName = _name_field(required=False)


class HeartbeatSerializer(BrokerIdentitySerializer):
    brokerId = serializers.IntegerField(min_value=0, max_value=MAX_ID, required=False)


class UnregisterSerializer(BrokerIdentitySerializer):
    brokerId = serializers.IntegerField(min_value=0, max_value=MAX_ID, required=False)


class RegisterBrokerSerializer(serializers.Serializer):
    clusterName = _name_field()
    brokerName = _name_field()
    brokerAddr = _addr_field()
    haServerAddr = serializers.CharField(max_length=255, allow_blank=True, required=False, default="")
    # Ours: the broker's RocketMQ 5 gRPC endpoint, returned in routes as brokerGrpcAddrs.
    grpcAddr = addr_field(required=False, allow_blank=True, default="")
    brokerId = serializers.IntegerField(min_value=0, max_value=MAX_ID)
    zoneName = serializers.CharField(max_length=255, allow_blank=True, required=False, default="")
    heartbeatTimeoutMillis = serializers.IntegerField(min_value=1, max_value=3_600_000, required=False, allow_null=True)
    enableActingMaster = serializers.BooleanField(required=False, allow_null=True, default=None)
    topicConfigWrapper = TopicConfigWrapperSerializer(required=False)

    def validate_haServerAddr(self, value: str) -> str:
        if value and not ADDR_RE.match(value):
            raise serializers.ValidationError("must be host:port")
        return value

    def to_request(self) -> RegisterRequest:
        d = self.validated_data
        wrapper = d.get("topicConfigWrapper") or {}
        dv = wrapper.get("dataVersion") or {}
        return RegisterRequest(
            cluster_name=d["clusterName"],
            broker_addr=d["brokerAddr"],
            broker_name=d["brokerName"],
            broker_id=d["brokerId"],
            ha_server_addr=d.get("haServerAddr") or "",
            zone_name=d.get("zoneName") or "",
            heartbeat_timeout_millis=d.get("heartbeatTimeoutMillis"),
            enable_acting_master=d.get("enableActingMaster"),
            data_version=DataVersion(dv.get("stateVersion", 0), dv.get("counter", 0), dv.get("timestamp", 0)),
            grpc_addr=d.get("grpcAddr") or "",
            topic_configs=tuple(
                TopicConfig(name, tc["readQueueNums"], tc["writeQueueNums"], tc["perm"], tc["topicSysFlag"])
                for name, tc in sorted((wrapper.get("topicConfigTable") or {}).items())
            ),
        )


class MemberGroupQuerySerializer(serializers.Serializer):
    clusterName = _name_field(required=False)
    brokerName = _name_field()


class TopicTargetSerializer(serializers.Serializer):
    clusterName = _name_field(required=False)
    brokerNames = serializers.ListField(child=_name_field(), required=False, allow_empty=False, max_length=1000)

    def validate(self, attrs):
        if bool(attrs.get("clusterName")) == bool(attrs.get("brokerNames")):
            raise serializers.ValidationError({"clusterName": "give exactly one of clusterName or brokerNames"})
        return attrs


class TopicUpdateSerializer(TopicTargetSerializer):
    topicName = _name_field()
    readQueueNums = serializers.IntegerField(min_value=1, max_value=65535, default=8)
    writeQueueNums = serializers.IntegerField(min_value=1, max_value=65535, default=8)
    perm = serializers.IntegerField(min_value=0, max_value=7, default=6)
    topicSysFlag = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)


class TopicDeleteSerializer(serializers.Serializer):
    clusterName = _name_field(required=False)
    brokerName = serializers.ListField(child=_name_field(), required=False)
