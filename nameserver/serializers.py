"""Request validation for the nameserver API. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
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


# --- water levels: an optional part of the broker's nameserver heartbeat (docs/websocket.md) -------

MAX_SLAVES = 64


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    MASTER = "MASTER"
    SLAVE = "SLAVE"


def _integer(minimum: int = 0) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        # JSON types are checked strictly (no "12" or true for 12): the report is stored as sent.
        if type(value) is not int or not minimum <= value <= MAX_ID:
            return f"must be an integer from {minimum} to {MAX_ID}"
        return None

    return check


def _matching(pattern, max_length: int, message: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        ok = isinstance(value, str) and len(value) <= max_length and pattern.match(value)
        return None if ok else message

    return check


def _rate(value: object) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return None if ok else "must be a non-negative number"


def _boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _role(value: object) -> str | None:
    return None if isinstance(value, str) and value in BrokerRole.__members__ else "must be one of " + ", ".join(BrokerRole)


_REPORT_FIELDS = {
    "brokerName": _matching(NAME_RE, 127, "only letters, digits and %|_.- are allowed"),
    "brokerId": _integer(),
    "role": _role,
    "masterEpoch": _integer(-1),  # -1: no epoch yet
    "maxOffset": _integer(),
    "confirmOffset": _integer(),
    "minOffset": _integer(),
}
_SLAVE_FIELDS = {
    "brokerId": _integer(),
    "addr": _matching(ADDR_RE, 255, "must be host:port"),
    "ackOffset": _integer(),
    "lagBytes": _integer(),
    "lastCaughtUpMs": _integer(),  # epoch ms; 0 = never caught up
    "transferBytesPerS": _rate,
    "inSyncStateSet": _boolean,
}


def _json_object(value: dict, checks: dict[str, Callable[[object], str | None]]) -> tuple[dict, dict[str, list[str]]]:
    """The known fields of a JSON object (unknown ones are dropped) and the errors per field."""
    out: dict = {}
    errors: dict[str, list[str]] = {}
    for name, check in checks.items():
        if name not in value:
            errors[name] = ["This field is required."]
        elif (message := check(value[name])) is not None:
            errors[name] = [message]
        else:
            out[name] = value[name]
    return out, errors


def _slaves(value: object, role: object) -> tuple[list[dict], object]:
    if not isinstance(value, list):
        return [], ["must be a list"]
    if len(value) > MAX_SLAVES:
        return [], [f"at most {MAX_SLAVES} slaves"]
    if value and role == BrokerRole.SLAVE:
        return [], ["only a master reports slaves"]
    slaves: list[dict] = []
    errors: dict[str, object] = {}
    for i, raw in enumerate(value):
        slave, slave_errors = _json_object(raw, _SLAVE_FIELDS) if isinstance(raw, dict) else ({}, ["must be a JSON object"])
        if slave_errors:
            errors[str(i)] = slave_errors
        slaves.append(slave)
    if errors:
        return [], errors
    ids = [s["brokerId"] for s in slaves]
    if len(set(ids)) != len(ids):
        return [], ["a slave brokerId appears more than once"]
    return slaves, None


def parse_water_levels(value: object, *, broker_name: object = None) -> dict:
    """A heartbeat's ``waterLevels`` checked and reduced to the known fields (``slaves`` defaults to
    []); raises ValidationError with DRF-shaped field errors. Shared by REST and the websocket, whose
    heartbeat path avoids DRF serializers. ``broker_name``: the heartbeat's own, if it gave one."""
    if not isinstance(value, dict):
        raise serializers.ValidationError(["must be a JSON object"])
    report, errors = _json_object(value, _REPORT_FIELDS)
    if broker_name is not None and "brokerName" in report and report["brokerName"] != broker_name:
        errors["brokerName"] = ["differs from the heartbeat's brokerName"]
    slaves, slave_errors = _slaves(value.get("slaves", []), value.get("role"))
    if slave_errors:
        errors["slaves"] = slave_errors
    if errors:
        raise serializers.ValidationError(errors)
    return {**report, "slaves": slaves}


_U64 = {"type": "integer", "format": "int64", "minimum": 0}
WATER_LEVELS_SCHEMA = {
    "type": "object",
    "required": list(_REPORT_FIELDS),
    "properties": {
        "brokerName": {"type": "string", "maxLength": 127},
        "brokerId": _U64,
        "role": {"type": "string", "enum": list(BrokerRole)},
        "masterEpoch": {"type": "integer", "format": "int64", "minimum": -1, "description": "-1 if none"},
        "maxOffset": _U64,
        "confirmOffset": _U64,
        "minOffset": _U64,
        "slaves": {
            "type": "array",
            "maxItems": MAX_SLAVES,
            "description": "masters only; defaults to []",
            "items": {
                "type": "object",
                "required": list(_SLAVE_FIELDS),
                "properties": {
                    "brokerId": _U64,
                    "addr": {"type": "string", "description": "host:port"},
                    "ackOffset": _U64,
                    "lagBytes": _U64,
                    "lastCaughtUpMs": {**_U64, "description": "epoch ms; 0 = never"},
                    "transferBytesPerS": {"type": "number", "minimum": 0},
                    "inSyncStateSet": {"type": "boolean"},
                },
            },
        },
    },
}


@extend_schema_field(WATER_LEVELS_SCHEMA)
class WaterLevelsField(serializers.Field):
    def to_internal_value(self, data):
        return parse_water_levels(data, broker_name=self.parent.initial_data.get("brokerName"))

    def to_representation(self, value):
        return value


# Named apart from the controller's HeartbeatSerializer: one OpenAPI component would hide the other.
@extend_schema_serializer(component_name="NameserverHeartbeat")
class HeartbeatSerializer(BrokerIdentitySerializer):
    brokerId = serializers.IntegerField(min_value=0, max_value=MAX_ID, required=False)
    # Optional replication water levels (ours); null is the same as absent.
    waterLevels = WaterLevelsField(required=False, allow_null=True)


class WaterLevelsQuerySerializer(serializers.Serializer):
    clusterName = _name_field()
    brokerName = _name_field(required=False)


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
