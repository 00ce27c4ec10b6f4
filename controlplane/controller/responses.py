"""The controller's answers as the OpenAPI schema describes them: ``api.state_body`` and the views'
bodies, field for field (tests/test_api_schema_fuzz.py checks every answer against them). Descriptions
only: nothing here validates or renders."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.utils import OpenApiResponse, extend_schema_serializer
from rest_framework import serializers

from controlplane.openapi import ErrorSerializer


class _Ack(serializers.Serializer):
    code = serializers.IntegerField(help_text="0 SUCCESS (2011 CONTROLLER_MASTER_STILL_EXIST for an election)")
    name = serializers.CharField()


class _State(serializers.Serializer):
    """``api.state_body``: absent when the request named no known broker set."""

    clusterName = serializers.CharField(required=False)
    brokerName = serializers.CharField(required=False)
    masterBrokerId = serializers.IntegerField(required=False, allow_null=True, help_text="null: no master")
    masterAddress = serializers.CharField(required=False, allow_null=True)
    masterEpoch = serializers.IntegerField(required=False)
    syncStateSetEpoch = serializers.IntegerField(required=False)
    syncStateSet = serializers.ListField(child=serializers.IntegerField(), required=False)
    brokerMemberGroup = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="controller brokerId -> brokerAddress"
    )


@extend_schema_serializer(component_name="ReplicaGroupState")
class StateAnswer(_Ack, _State):
    """A replica group's state after the operation (``api.state_body``); only code and name when the
    request named no known broker set."""

    detail = serializers.CharField(required=False)


@extend_schema_serializer(component_name="ControllerRefusal")
class RefusalAnswer(ErrorSerializer, _State):
    """A refused transition: the error and the set's current state beside it."""


def refusals(why: Mapping[int, str]) -> dict[int, OpenApiResponse]:
    """Refused transitions by status (``api.HTTP_STATUS``: 404 for an unknown set or id, else 409), each
    with its RocketMQ codes: the error and the set's current state."""
    return {status: OpenApiResponse(RefusalAnswer, description=reason) for status, reason in why.items()}


@extend_schema_serializer(component_name="ControllerAck")
class AckAnswer(_Ack):
    pass


@extend_schema_serializer(component_name="NextBrokerId")
class NextBrokerIdAnswer(_Ack):
    clusterName = serializers.CharField(allow_null=True, help_text="as asked; null if not given")
    brokerName = serializers.CharField()
    nextBrokerId = serializers.IntegerField()


@extend_schema_serializer(component_name="ReplicaIdentity")
class _ReplicaIdentity(serializers.Serializer):
    brokerName = serializers.CharField()
    brokerId = serializers.IntegerField()
    brokerAddress = serializers.CharField(allow_blank=True)
    alive = serializers.BooleanField()


@extend_schema_serializer(component_name="BrokerReplicasInfo")
class _ReplicasInfo(serializers.Serializer):
    masterBrokerId = serializers.IntegerField(allow_null=True)
    masterAddress = serializers.CharField(allow_null=True)
    masterEpoch = serializers.IntegerField()
    syncStateSetEpoch = serializers.IntegerField()
    inSyncReplicas = _ReplicaIdentity(many=True)
    notInSyncReplicas = _ReplicaIdentity(many=True)


@extend_schema_serializer(component_name="SyncStateData")
class SyncStateDataAnswer(_Ack):
    brokerReplicasInfo = serializers.DictField(
        child=_ReplicasInfo(), help_text="brokerName -> its replicas; unknown names absent"
    )


@extend_schema_serializer(component_name="ControllerMetadata")
class MetadataAnswer(_Ack):
    group = serializers.CharField()
    controllerLeaderId = serializers.CharField()
    controllerLeaderAddress = serializers.CharField()
    isLeader = serializers.BooleanField()
    peers = serializers.CharField(allow_blank=True)


@extend_schema_serializer(component_name="ElectionCandidate")
class _Candidate(serializers.Serializer):
    brokerId = serializers.IntegerField()
    alive = serializers.BooleanField()
    inSyncStateSet = serializers.BooleanField()
    epoch = serializers.IntegerField()
    maxOffset = serializers.IntegerField()
    confirmOffset = serializers.IntegerField()
    electionPriority = serializers.IntegerField()


@extend_schema_serializer(component_name="Transition")
class _Transition(serializers.Serializer):
    id = serializers.IntegerField()
    clusterName = serializers.CharField()
    brokerName = serializers.CharField()
    kind = serializers.CharField()
    trigger = serializers.CharField()
    requestedBy = serializers.CharField(allow_blank=True)
    requestedBrokerId = serializers.IntegerField(allow_null=True)
    oldMasterBrokerId = serializers.IntegerField(allow_null=True)
    newMasterBrokerId = serializers.IntegerField(allow_null=True)
    oldMasterEpoch = serializers.IntegerField()
    newMasterEpoch = serializers.IntegerField()
    oldSyncStateSetEpoch = serializers.IntegerField()
    newSyncStateSetEpoch = serializers.IntegerField()
    oldSyncStateSet = serializers.ListField(child=serializers.IntegerField())
    newSyncStateSet = serializers.ListField(child=serializers.IntegerField())
    candidates = _Candidate(many=True, help_text="the replicas as an election saw them; empty for other transitions")
    responseCode = serializers.IntegerField()
    detail = serializers.CharField(allow_blank=True)
    createdAt = serializers.DateTimeField()


@extend_schema_serializer(component_name="ControllerHistory")
class HistoryAnswer(serializers.Serializer):
    transitions = _Transition(many=True, help_text="newest first")
