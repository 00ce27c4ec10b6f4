"""Request validation for the nameserver API. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from controlplane.validation_drf import (
    RuledSerializer,
    addr_field,
    boolean_field,
    drf_checked,
    integer_field,
    name_field,
    query_integer_field,
    text_field,
)
from mqrules import topic_attributes, validation
from mqrules.validation import INT_MAX, MAX_ID

from .core.registry import RegisterRequest
from .core.values import DataVersion, TopicConfig
from .core.water_levels import MAX_SLAVES, REPORT_FIELDS, SLAVE_FIELDS, BrokerRole
from .core.water_levels import parse_water_levels as parse_water_levels

_name_field, _addr_field = name_field, addr_field


class DataVersionSerializer(serializers.Serializer):
    stateVersion = integer_field(min_value=0, max_value=MAX_ID, default=0)
    counter = integer_field(min_value=0, max_value=MAX_ID, default=0)
    timestamp = integer_field(min_value=0, max_value=MAX_ID, default=0)


# --- topic attributes: the rules are pure (mqrules.topic_attributes); these are their fields --------

_ATTRIBUTE_SCHEMAS = {key: {"type": "string", "enum": list(values)} for key, values in topic_attributes.ATTRIBUTE_VALUES.items()}
TOPIC_ATTRIBUTES_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": _ATTRIBUTE_SCHEMAS,
    "description": "RocketMQ's TopicConfig.attributes; message.type absent: NORMAL",
}
TOPIC_ATTRIBUTES_UPDATE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    # Each attribute once, in one form or the other (one attribute so far: this says it exactly).
    "maxProperties": len(_ATTRIBUTE_SCHEMAS),
    "properties": {
        **_ATTRIBUTE_SCHEMAS,
        **{topic_attributes.ADD_PREFIX + key: schema for key, schema in _ATTRIBUTE_SCHEMAS.items()},
    },
    "description": 'Attributes to set, e.g. {"message.type": "DELAY"} (or RocketMQ\'s "+message.type"); '
    "those not named keep their value. message.type absent: NORMAL",
}


@extend_schema_field(TOPIC_ATTRIBUTES_SCHEMA)
class TopicAttributesField(serializers.Field):
    """A topic config's attributes as a broker registers them."""

    parse = staticmethod(topic_attributes.parse_attributes)

    def to_internal_value(self, data):
        return drf_checked(self.parse, data)

    def to_representation(self, value):
        return value


@extend_schema_field(TOPIC_ATTRIBUTES_UPDATE_SCHEMA)
class TopicAttributesUpdateField(TopicAttributesField):
    """The attributes an operator sets on a topic: ``parse_update``'s forms."""

    parse = staticmethod(topic_attributes.parse_update)


class TopicConfigSerializer(serializers.Serializer):
    topicName = _name_field(required=False)
    readQueueNums = integer_field(min_value=0, max_value=65535, default=16)
    writeQueueNums = integer_field(min_value=0, max_value=65535, default=16)
    perm = integer_field(min_value=0, max_value=7, default=6)
    topicSysFlag = integer_field(min_value=0, max_value=INT_MAX, default=0)
    attributes = TopicAttributesField(required=False, default=dict)


class TopicConfigWrapperSerializer(serializers.Serializer):
    dataVersion = DataVersionSerializer(required=False)
    topicConfigTable = serializers.DictField(child=TopicConfigSerializer(), required=False, default=dict)

    def validate_topicConfigTable(self, table):
        errors = {name: ["invalid topic name"] for name in table if not validation.is_name(name)}
        for name, tc in table.items():
            if tc.get("topicName") not in (None, name):
                errors[name] = [f"topicName {tc['topicName']!r} differs from its key"]
        if errors:
            raise serializers.ValidationError(errors)
        return table


class BrokerIdentitySerializer(serializers.Serializer):
    clusterName = _name_field()
    brokerAddr = _addr_field()
    brokerName = _name_field(required=False)


# --- water levels: an optional part of the broker's nameserver heartbeat (docs/websocket.md) -------
# The checks are pure (nameserver.core.water_levels); this is their DRF field and OpenAPI schema.

_U64 = {"type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_ID}
WATER_LEVELS_SCHEMA = {
    "type": "object",
    "required": list(REPORT_FIELDS),
    "properties": {
        "brokerName": validation.NAME_SCHEMA,
        "brokerId": _U64,
        "role": {"type": "string", "enum": list(BrokerRole)},
        "masterEpoch": {"type": "integer", "format": "int64", "minimum": -1, "maximum": MAX_ID, "description": "-1 if none"},
        "maxOffset": _U64,
        "confirmOffset": _U64,
        "minOffset": _U64,
        "haMaxGapNotInSync": {**_U64, "nullable": True, "description": "optional: the broker's threshold behind slaves' inSync"},
        "slaves": {
            "type": "array",
            "maxItems": MAX_SLAVES,
            "description": "masters only; defaults to []",
            "items": {
                "type": "object",
                "required": list(SLAVE_FIELDS),
                "properties": {
                    "brokerId": _U64,
                    "addr": validation.ADDR_SCHEMA,
                    "ackOffset": _U64,
                    "lagBytes": _U64,
                    "lastCaughtUpMs": {**_U64, "description": "epoch ms; 0 = never"},
                    "transferBytesPerS": {"type": "number", "minimum": 0},
                    "inSyncStateSet": {"type": "boolean"},
                    "inSync": {
                        "type": "boolean",
                        "nullable": True,
                        "description": "optional: the master's verdict, gap under haMaxGapNotInSync",
                    },
                },
            },
        },
    },
}


@extend_schema_field(WATER_LEVELS_SCHEMA)
class WaterLevelsField(serializers.Field):
    def to_internal_value(self, data):
        return drf_checked(parse_water_levels, data, broker_name=self.parent.initial_data.get("brokerName"))

    def to_representation(self, value):
        return value


# Named apart from the controller's HeartbeatSerializer: one OpenAPI component would hide the other.
@extend_schema_serializer(component_name="NameserverHeartbeat")
class HeartbeatSerializer(BrokerIdentitySerializer):
    brokerId = integer_field(min_value=0, max_value=MAX_ID, required=False)
    # Optional replication water levels (ours); null is the same as absent.
    waterLevels = WaterLevelsField(required=False, allow_null=True)


class WaterLevelsQuerySerializer(serializers.Serializer):
    clusterName = _name_field()
    brokerName = _name_field(required=False)


class BrokerStatusQuerySerializer(serializers.Serializer):
    brokerName = _name_field()
    brokerId = query_integer_field(min_value=0, max_value=MAX_ID, required=False, help_text="one broker (default: every one)")


class UnregisterSerializer(BrokerIdentitySerializer):
    brokerId = integer_field(min_value=0, max_value=MAX_ID, required=False)


class RegisterBrokerSerializer(serializers.Serializer):
    clusterName = _name_field()
    brokerName = _name_field()
    brokerAddr = _addr_field()
    haServerAddr = addr_field(allow_blank=True, required=False, default="")
    # Ours: the broker's RocketMQ 5 gRPC endpoint, returned in routes as brokerGrpcAddrs.
    grpcAddr = _addr_field(required=False, allow_blank=True, default="")
    brokerId = integer_field(min_value=0, max_value=MAX_ID)
    zoneName = text_field(max_length=255, allow_blank=True, required=False, default="")
    heartbeatTimeoutMillis = integer_field(min_value=1, max_value=3_600_000, required=False, allow_null=True)
    enableActingMaster = boolean_field(required=False, allow_null=True, default=None)
    topicConfigWrapper = TopicConfigWrapperSerializer(required=False)

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
                TopicConfig(name, tc["readQueueNums"], tc["writeQueueNums"], tc["perm"], tc["topicSysFlag"], tc["attributes"])
                for name, tc in sorted((wrapper.get("topicConfigTable") or {}).items())
            ),
        )


class MemberGroupQuerySerializer(serializers.Serializer):
    clusterName = _name_field(required=False)
    brokerName = _name_field()


class TopicTargetSerializer(RuledSerializer):
    json_schema_rule = {"oneOf": [{"required": ["clusterName"]}, {"required": ["brokerNames"]}]}  # validate()
    clusterName = _name_field(required=False)
    brokerNames = serializers.ListField(child=_name_field(), required=False, allow_empty=False, min_length=1, max_length=1000)

    def validate(self, attrs):
        if bool(attrs.get("clusterName")) == bool(attrs.get("brokerNames")):
            raise serializers.ValidationError({"clusterName": "give exactly one of clusterName or brokerNames"})
        return attrs


class TopicUpdateSerializer(TopicTargetSerializer):
    topicName = _name_field()
    readQueueNums = integer_field(min_value=1, max_value=65535, default=8)
    writeQueueNums = integer_field(min_value=1, max_value=65535, default=8)
    perm = integer_field(min_value=0, max_value=7, default=6)
    topicSysFlag = integer_field(min_value=0, max_value=INT_MAX, default=0)
    attributes = TopicAttributesUpdateField(required=False)


class TopicListQuerySerializer(serializers.Serializer):
    clusterName = _name_field(required=False)


# ?brokerName= repeated: a query string holds DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) fields, one of
# them may be clusterName.
TOPIC_DELETE_MAX_BROKERS = 999


class TopicDeleteSerializer(serializers.Serializer):
    clusterName = _name_field(required=False)
    brokerName = serializers.ListField(child=_name_field(), required=False, max_length=TOPIC_DELETE_MAX_BROKERS)


# --- static topics (seed 003; nameserver/static_topics.py) ------------------------------------------

MAX_LOGICAL_QUEUES = 1024


class StaticTopicCreateSerializer(serializers.Serializer):
    topicName = _name_field()
    queueNums = integer_field(min_value=1, max_value=MAX_LOGICAL_QUEUES, help_text="logical queues, spread round robin")
    brokerNames = serializers.ListField(child=_name_field(), min_length=1, max_length=1000)


class QueueCountSerializer(serializers.Serializer):
    queueNums = integer_field(min_value=1, max_value=MAX_LOGICAL_QUEUES, help_text="the new count: only more, never fewer")
    brokerNames = serializers.ListField(
        child=_name_field(),
        min_length=1,
        max_length=1000,
        required=False,
        help_text="where the new queues go (default: the sets writing it)",
    )
    epoch = integer_field(min_value=1, max_value=MAX_ID, required=False, help_text="the epoch this was planned at")
    preview = boolean_field(default=False, help_text="true: answer what would change, change nothing")


class StaticPreviewSerializer(serializers.Serializer):
    epoch = integer_field(min_value=1, max_value=MAX_ID, required=False, help_text="the epoch this was planned at")
    preview = boolean_field(default=False, help_text="true: answer what would change, change nothing")


class StaticDeleteQuerySerializer(serializers.Serializer):
    epoch = query_integer_field(min_value=1, max_value=MAX_ID, required=False, help_text="the epoch this was planned at")
    preview = serializers.ChoiceField(
        choices=["true", "false"], default="false", help_text="true: what would go, nothing changed"
    )


class QueueMoveSerializer(serializers.Serializer):
    queueId = integer_field(min_value=0, max_value=MAX_LOGICAL_QUEUES - 1, help_text="the logical queue")
    brokerName = _name_field(help_text="the broker set that takes its writes from now on")


class DrainSerializer(serializers.Serializer):
    brokerName = _name_field(help_text="the broker set to take every logical queue off")
    targets = serializers.ListField(
        child=_name_field(), required=False, min_length=1, max_length=1000,
        help_text="where they go (each to the one writing the fewest); absent: the other broker sets writing the topic",
    )  # fmt: skip


class MigrationSerializer(RuledSerializer):
    json_schema_rule = {"oneOf": [{"required": ["moves"]}, {"required": ["drain"]}, {"required": ["scaleOut"]}]}
    epoch = integer_field(min_value=1, max_value=MAX_ID, required=False, help_text="the epoch this was planned at")
    moves = serializers.ListField(child=QueueMoveSerializer(), required=False, min_length=1, max_length=MAX_LOGICAL_QUEUES)
    drain = DrainSerializer(required=False)
    scaleOut = _name_field(required=False, help_text="a new broker set to give its share of the logical queues")
    preview = boolean_field(default=False, help_text="true: answer what would change, change nothing")

    def validate(self, attrs):
        given = [k for k in ("moves", "drain", "scaleOut") if k in attrs]
        if len(given) != 1:
            raise serializers.ValidationError({"moves": "give exactly one of moves, drain or scaleOut"})
        ids = [m["queueId"] for m in attrs.get("moves", ())]
        if len(ids) != len(set(ids)):
            raise serializers.ValidationError({"moves": "each logical queue at most once"})
        return attrs
