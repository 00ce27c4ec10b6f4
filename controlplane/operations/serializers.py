"""Request validation for the operations API. Field names keep RocketMQ's camelCase."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.validation_drf import boolean_field, integer_field, name_field, query_integer_field
from mqrules.validation import MAX_ID


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


# --- headroom and the failover drill (controlplane/operations/headroom.py, drill.py) ------------------


class _QuorumSettings(serializers.Serializer):
    inSyncReplicas = serializers.IntegerField()
    minInSyncReplicas = serializers.IntegerField()
    allAckInSyncStateSet = serializers.BooleanField()
    known = serializers.BooleanField(help_text="false: the master sent no status report; RocketMQ's defaults are used")
    fromBrokerId = serializers.IntegerField(allow_null=True, help_text="the broker whose report they come from")
    fromBrokerAddr = serializers.CharField(allow_null=True)
    stale = serializers.BooleanField(allow_null=True, help_text="that report is older than three of its intervals")


class HeadroomSerializer(serializers.Serializer):
    clusterName = serializers.CharField()
    brokerName = serializers.CharField()
    masterBrokerId = serializers.IntegerField(allow_null=True)
    masterEpoch = serializers.IntegerField()
    syncStateSet = serializers.ListField(child=serializers.IntegerField())
    aliveBrokerIds = serializers.ListField(child=serializers.IntegerField(), help_text="heard by the controller, not isolated")
    isolatedBrokerIds = serializers.ListField(child=serializers.IntegerField())
    losses = serializers.IntegerField(help_text="more replica losses the set can take and still take writes")
    writes = serializers.ChoiceField(choices=["taken", "awaitElection", "refused", "noMember"], help_text="writes now")
    reason = serializers.CharField()
    aliveInSync = serializers.IntegerField()
    deadInSync = serializers.IntegerField(help_text="members still in the SyncStateSet that are not alive")
    aliveOutside = serializers.IntegerField(help_text="alive replicas outside the SyncStateSet (not counted)")
    ackLosses = serializers.IntegerField(
        allow_null=True, help_text="count mode: more losses before sends answer FLUSH_SLAVE_TIMEOUT; null: not count mode"
    )
    ackReason = serializers.CharField()
    config = _QuorumSettings()
    configKnown = serializers.BooleanField()


class DrillSerializer(serializers.Serializer):
    brokerId = integer_field(
        min_value=0, max_value=MAX_ID, required=False, help_text="the replica to switch to (default: the best in-sync slave)"
    )
    preview = boolean_field(default=False, help_text="true: which replica would take over and what is at risk, changing nothing")


class DrillsQuerySerializer(serializers.Serializer):
    brokerName = name_field(required=False)
    limit = query_integer_field(min_value=1, max_value=200, default=20)


class _Candidate(serializers.Serializer):
    brokerId = serializers.IntegerField()
    brokerAddr = serializers.CharField()
    ackOffset = serializers.IntegerField(allow_null=True)
    lagBytes = serializers.IntegerField(allow_null=True)


class DrillPlanSerializer(serializers.Serializer):
    clusterName = serializers.CharField()
    brokerName = serializers.CharField()
    fromBrokerId = serializers.IntegerField()
    fromBrokerAddr = serializers.CharField()
    toBrokerId = serializers.IntegerField()
    toBrokerAddr = serializers.CharField()
    masterEpoch = serializers.IntegerField()
    syncStateSet = serializers.ListField(child=serializers.IntegerField())
    candidates = _Candidate(many=True, help_text="the alive in-sync slaves, best first (the controller's election order)")
    masterMaxOffset = serializers.IntegerField(allow_null=True)
    targetAckOffset = serializers.IntegerField(allow_null=True)
    lagBytes = serializers.IntegerField(allow_null=True)
    dataAtRiskBytes = serializers.IntegerField(allow_null=True, help_text="the master's log end minus what the target acked")
    figuresFrom = serializers.ChoiceField(choices=["waterLevels", "heartbeats", "none"])
    detail = serializers.CharField()


class DrillRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    clusterName = serializers.CharField()
    brokerName = serializers.CharField()
    actor = serializers.CharField()
    fromBrokerId = serializers.IntegerField()
    toBrokerId = serializers.IntegerField()
    oldEpoch = serializers.IntegerField()
    newEpoch = serializers.IntegerField(allow_null=True)
    startedAt = serializers.DateTimeField()
    decidedAt = serializers.DateTimeField(allow_null=True, help_text="the election committed")
    servingAt = serializers.DateTimeField(allow_null=True, help_text="the new master registered as id 0 at the new epoch")
    rtoMs = serializers.IntegerField(allow_null=True)
    dataAtRiskBytes = serializers.IntegerField(allow_null=True)
    dataLostBytes = serializers.IntegerField(allow_null=True, help_text="acknowledged by the old master, not on the new one")
    outcome = serializers.ChoiceField(choices=["running", "ok", "failed"])
    detail = serializers.CharField(allow_blank=True)
    figures = serializers.DictField(help_text="the offsets the byte counts come from")


class DrillAnswerSerializer(serializers.Serializer):
    preview = serializers.BooleanField()
    plan = DrillPlanSerializer(required=False, help_text="preview: what a drill would do")
    drill = DrillRowSerializer(required=False, help_text="a run: the drill as it ended")


class DrillsSerializer(serializers.Serializer):
    drills = DrillRowSerializer(many=True)
