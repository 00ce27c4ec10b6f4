"""REST shapes of the audits API (camelCase, as the rest of the API)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.urls import NoReverseMatch, reverse
from rest_framework import serializers

from .models import AuditRun, Finding


class AuditRunSerializer(serializers.ModelSerializer):
    createdAt = serializers.DateTimeField(source="created_at")
    startedAt = serializers.DateTimeField(source="started_at", allow_null=True)
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)
    heartbeatAt = serializers.DateTimeField(source="heartbeat_at", allow_null=True)
    requestedBy = serializers.CharField(source="requested_by")
    sparkMaster = serializers.CharField(source="spark_master")
    eventsUri = serializers.CharField(source="events_uri")
    lookbackDays = serializers.IntegerField(source="lookback_days", allow_null=True)
    eventsScanned = serializers.IntegerField(source="events_scanned", allow_null=True)
    messagesAgain = serializers.IntegerField(source="messages_again", allow_null=True)
    beyondMaxOffset = serializers.IntegerField(source="beyond_max_offset", allow_null=True)
    explainedByReset = serializers.IntegerField(source="explained_by_reset", allow_null=True)
    sessionSeconds = serializers.FloatField(source="session_seconds", allow_null=True)
    jobSeconds = serializers.FloatField(source="job_seconds", allow_null=True)

    class Meta:
        model = AuditRun
        fields = [
            "id",
            "trigger",
            "requestedBy",
            "status",
            "stage",
            "progress",
            "createdAt",
            "startedAt",
            "finishedAt",
            "heartbeatAt",
            "sparkMaster",
            "eventsUri",
            "lookbackDays",
            "eventsScanned",
            "rollbacks",
            "messagesAgain",
            "beyondMaxOffset",
            "explainedByReset",
            "sessionSeconds",
            "jobSeconds",
            "summary",
            "error",
        ]
        read_only_fields = fields


class FindingSerializer(serializers.ModelSerializer):
    clusterName = serializers.CharField(source="cluster_name")
    consumerGroup = serializers.CharField(source="consumer_group")
    brokerName = serializers.CharField(source="broker_name")
    queueId = serializers.IntegerField(source="queue_id")
    masterEpoch = serializers.IntegerField(source="master_epoch")
    brokerId = serializers.IntegerField(source="broker_id")
    previousBrokerId = serializers.IntegerField(source="previous_broker_id", allow_null=True)
    previousMasterEpoch = serializers.IntegerField(source="previous_master_epoch", allow_null=True)
    previousOffset = serializers.IntegerField(source="previous_offset", allow_null=True)
    previousAt = serializers.DateTimeField(source="previous_at", allow_null=True)
    messagesAgain = serializers.IntegerField(source="messages_again")
    messagesLost = serializers.IntegerField(source="messages_lost")
    queueMaxOffset = serializers.IntegerField(source="queue_max_offset", allow_null=True)
    eventCount = serializers.IntegerField(source="event_count")
    detectedAt = serializers.DateTimeField(source="detected_at")
    lastSeenAt = serializers.DateTimeField(source="last_seen_at", allow_null=True)
    transitionId = serializers.IntegerField(source="transition_id", allow_null=True)
    operatorInitiated = serializers.BooleanField(source="operator_initiated")
    replicaGroupUrl = serializers.SerializerMethodField()
    historyUrl = serializers.SerializerMethodField()

    class Meta:
        model = Finding
        fields = [
            "id",
            "kind",
            "cause",
            "clusterName",
            "consumerGroup",
            "topic",
            "brokerName",
            "queueId",
            "masterEpoch",
            "brokerId",
            "role",
            "source",
            "previousBrokerId",
            "previousMasterEpoch",
            "previousOffset",
            "previousAt",
            "offset",
            "messagesAgain",
            "messagesLost",
            "queueMaxOffset",
            "excess",
            "eventCount",
            "detectedAt",
            "lastSeenAt",
            "transitionId",
            "operatorInitiated",
            "replicaGroupUrl",
            "historyUrl",
        ]
        read_only_fields = fields

    def get_replicaGroupUrl(self, finding: Finding) -> str | None:
        return replica_group_url(finding.broker_name)

    def get_historyUrl(self, finding: Finding) -> str:
        return replica_group_history_url(finding.broker_name)


def replica_group_url(broker_name: str) -> str | None:
    """The replica group's dashboard page (its epochs and elections), if this process serves it."""
    try:
        return reverse("dashboards:group", args=[broker_name])
    except NoReverseMatch:
        return None


def replica_group_history_url(broker_name: str) -> str:
    """The controller's transition history of a replica group (REST): its epochs and elections."""
    try:
        base = reverse("controller:history")
    except NoReverseMatch:  # the controller half is not served by this process (CONTROLPLANE_ROLES)
        base = "/api/v1/controller/history"
    return f"{base}?{urlencode({'brokerName': broker_name})}"
