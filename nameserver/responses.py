"""The nameserver's answers as the OpenAPI schema describes them: the shapes ``wire.py`` renders and the
views' acknowledgements, field for field (tests/test_api_schema_fuzz.py checks every answer against
them). Descriptions only: nothing here validates or renders."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from .models import StaticTopicChange


class _Ack(serializers.Serializer):
    code = serializers.IntegerField(help_text="0 SUCCESS")
    name = serializers.CharField(help_text="SUCCESS")


def _addr_table(help_text: str) -> serializers.DictField:
    return serializers.DictField(child=serializers.CharField(allow_blank=True), help_text=help_text)


@extend_schema_serializer(component_name="RegisterBrokerResult")
class RegisterAnswer(_Ack):
    masterAddr = serializers.CharField(allow_null=True, allow_blank=True, help_text="the set's master, if it has one")
    haServerAddr = serializers.CharField(allow_null=True, allow_blank=True, help_text="the master's HA address")
    isolated = serializers.BooleanField(help_text="an operator isolated this broker: it takes no writes")


@extend_schema_serializer(component_name="UnregisterBrokerResult")
class UnregisterAnswer(_Ack):
    unregistered = serializers.BooleanField(help_text="false: the broker was not registered")


@extend_schema_serializer(component_name="BrokerHeartbeatResult")
class HeartbeatAnswer(_Ack):
    registered = serializers.BooleanField(help_text="false: register again")


@extend_schema_serializer(component_name="BrokerMemberGroup")
class MemberGroupAnswer(serializers.Serializer):
    cluster = serializers.CharField(allow_blank=True)
    brokerName = serializers.CharField()
    brokerAddrs = _addr_table("brokerId -> brokerAddr; empty for an unknown set")


@extend_schema_serializer(component_name="QueueData")
class QueueDataAnswer(serializers.Serializer):
    brokerName = serializers.CharField()
    readQueueNums = serializers.IntegerField()
    writeQueueNums = serializers.IntegerField()
    perm = serializers.IntegerField()
    topicSysFlag = serializers.IntegerField()
    attributes = serializers.DictField(
        child=serializers.CharField(), help_text="ours: the broker set's topic attributes (message.type; absent: NORMAL)"
    )


@extend_schema_serializer(component_name="BrokerData")
class BrokerDataAnswer(serializers.Serializer):
    cluster = serializers.CharField()
    brokerName = serializers.CharField()
    brokerAddrs = _addr_table("brokerId -> brokerAddr; id 0 is the master (or the slave acting for it)")
    zoneName = serializers.CharField(allow_blank=True)
    enableActingMaster = serializers.BooleanField()
    actingMaster = serializers.BooleanField(help_text="ours: id 0 is a slave standing in, read-only")
    brokerGrpcAddrs = _addr_table("ours: brokerId -> the RocketMQ 5 client endpoint")


class _WireSegment(serializers.Serializer):
    brokerName = serializers.CharField()
    queueId = serializers.IntegerField(help_text="the physical queue on that broker set")
    logicStart = serializers.IntegerField(allow_null=True, help_text="its first logical offset; null until decided")
    physStart = serializers.IntegerField()
    physEnd = serializers.IntegerField(allow_null=True, help_text="null while messages may still land")
    expired = serializers.BooleanField()


@extend_schema_serializer(component_name="LogicQueueMapping")
class _WireMapping(serializers.Serializer):
    topic = serializers.CharField()
    epoch = serializers.IntegerField()
    queues = serializers.ListField(
        child=serializers.ListField(child=_WireSegment()), help_text="per logical queue, its segments oldest first"
    )


@extend_schema_serializer(component_name="TopicRouteData")
class TopicRouteAnswer(serializers.Serializer):
    orderTopicConf = serializers.CharField(allow_null=True, help_text="always null")
    queueDatas = QueueDataAnswer(many=True)
    brokerDatas = BrokerDataAnswer(many=True)
    filterServerTable = serializers.DictField(help_text="always empty")
    logicQueueMapping = _WireMapping(
        required=False, help_text="a static topic's only (docs/static-topics.md), as RocketMQ's topicQueueMappingByBroker"
    )


@extend_schema_serializer(component_name="TopicList")
class TopicListAnswer(serializers.Serializer):
    topicList = serializers.DictField(child=QueueDataAnswer(many=True), help_text="topic -> its queues on each broker set")


@extend_schema_serializer(component_name="TopicUpdated")
class TopicUpdatedAnswer(_Ack):
    topicName = serializers.CharField()
    brokerNames = serializers.ListField(child=serializers.CharField(), help_text="the broker sets that now have the topic")


@extend_schema_serializer(component_name="TopicDeleted")
class TopicDeletedAnswer(_Ack):
    deletedQueueDatas = serializers.IntegerField(help_text="how many broker sets' queues were removed")


@extend_schema_serializer(component_name="PermChange")
class PermChangeAnswer(_Ack):
    changedTopics = serializers.IntegerField()


@extend_schema_serializer(component_name="MemberDataVersion")
class _DataVersion(serializers.Serializer):
    stateVersion = serializers.IntegerField()
    counter = serializers.IntegerField()
    timestamp = serializers.IntegerField()


@extend_schema_serializer(component_name="ClusterMember")
class ClusterMemberAnswer(serializers.Serializer):
    brokerId = serializers.IntegerField()
    brokerAddr = serializers.CharField()
    haServerAddr = serializers.CharField(allow_blank=True)
    heartbeatTimeoutMillis = serializers.IntegerField()
    dataVersion = _DataVersion()
    lastUpdateTimestamp = serializers.IntegerField(allow_null=True, help_text="last heartbeat (epoch ms); null: not live")
    expiresAt = serializers.IntegerField(allow_null=True, help_text="when it expires (epoch ms); null: not live")


@extend_schema_serializer(component_name="ClusterBrokerData")
class ClusterBrokerDataAnswer(serializers.Serializer):
    cluster = serializers.CharField()
    brokerName = serializers.CharField()
    brokerAddrs = _addr_table("brokerId -> brokerAddr")
    zoneName = serializers.CharField(allow_blank=True)
    enableActingMaster = serializers.BooleanField()
    members = ClusterMemberAnswer(many=True)


@extend_schema_serializer(component_name="ClusterInfo")
class ClusterInfoAnswer(serializers.Serializer):
    brokerAddrTable = serializers.DictField(child=ClusterBrokerDataAnswer(), help_text="brokerName -> the set")
    clusterAddrTable = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), help_text="clusterName -> its broker sets"
    )


# --- static topics ------------------------------------------------------------------------------------


class _SegmentAnswer(_WireSegment):
    state = serializers.ChoiceField(choices=["writable", "sealing", "read_only", "expired"])


class _LogicalQueueAnswer(serializers.Serializer):
    queueId = serializers.IntegerField()
    segments = _SegmentAnswer(many=True)


@extend_schema_serializer(component_name="StaticTopicMapping")
class StaticTopicAnswer(serializers.Serializer):
    topic = serializers.CharField()
    epoch = serializers.IntegerField()
    queues = _LogicalQueueAnswer(many=True)


@extend_schema_serializer(component_name="StaticTopicList")
class StaticTopicListAnswer(serializers.Serializer):
    staticTopics = StaticTopicAnswer(many=True)


class _ChangeAnswer(serializers.Serializer):
    epoch = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=StaticTopicChange.Kind.values)
    actor = serializers.CharField()
    params = serializers.DictField()
    at = serializers.DateTimeField()


@extend_schema_serializer(component_name="StaticTopicDetail")
class StaticTopicDetailAnswer(StaticTopicAnswer):
    history = _ChangeAnswer(many=True, help_text="every change, oldest first")


@extend_schema_serializer(component_name="StaticTopicCreated")
class StaticTopicCreatedAnswer(_Ack):
    mapping = StaticTopicAnswer()


class StaticTopicChangeAnswer(_Ack):
    applied = serializers.BooleanField(help_text="false: a preview, nothing changed")
    before = StaticTopicAnswer(allow_null=True, help_text="the mapping before (null: the topic was not static)")
    after = StaticTopicAnswer(allow_null=True, help_text="the mapping after (null: the static topic is deleted)")


class _EndAnswer(serializers.Serializer):
    brokerName = serializers.CharField()
    queueId = serializers.IntegerField()


class _MoveAnswer(serializers.Serializer):
    queueId = serializers.IntegerField(help_text="the logical queue")
    source = _EndAnswer(help_text="where its writes went until now; consumers read it to its end")
    target = _EndAnswer(help_text="where its writes go from now on; consumers read it next")
    reused = serializers.BooleanField(help_text="the target's physical queue held expired segments before")


@extend_schema_serializer(component_name="StaticTopicMigration")
class MigrationAnswer(_Ack):
    applied = serializers.BooleanField(help_text="false: a preview, nothing changed")
    epochBefore = serializers.IntegerField()
    epoch = serializers.IntegerField(help_text="the mapping's epoch after the change (or after it, previewed)")
    moves = _MoveAnswer(many=True)
    oldSegmentsKeptHours = serializers.IntegerField(
        help_text="the old segments stay readable until their brokers delete the data: "
        "by default this long after their last message"
    )
    mapping = StaticTopicAnswer()


# --- broker status, consumer progress, topic status -------------------------------------------------


class _StoreStatus(serializers.Serializer):
    """brokers/retention.py's figures (docs/retention.md)."""

    diskPath = serializers.CharField(required=False, allow_null=True)
    diskTotalBytes = serializers.IntegerField(required=False, allow_null=True)
    diskUsedBytes = serializers.IntegerField(required=False, allow_null=True)
    diskUsedRatio = serializers.FloatField(required=False, allow_null=True, help_text="percent of the store's filesystem")
    diskMaxUsedSpaceRatio = serializers.IntegerField(required=False, allow_null=True)
    diskSpaceCleanForciblyRatio = serializers.IntegerField(required=False, allow_null=True)
    diskSpaceWarningLevelRatio = serializers.IntegerField(required=False, allow_null=True)
    diskFull = serializers.BooleanField(required=False, allow_null=True, help_text="past the warning ratio: sends refused")
    retentionMs = serializers.IntegerField(required=False, allow_null=True)
    oldestMessageMs = serializers.IntegerField(required=False, allow_null=True, help_text="the retention horizon")
    commitLogBytes = serializers.IntegerField(required=False, allow_null=True)
    bytesDeletedLastHour = serializers.IntegerField(required=False, allow_null=True)
    filesDeletedTotal = serializers.IntegerField(required=False, allow_null=True)
    bytesDeletedTotal = serializers.IntegerField(required=False, allow_null=True)
    writeBytesPerS = serializers.FloatField(required=False, allow_null=True, help_text="over the last minute")
    secondsUntilFull = serializers.FloatField(
        required=False, allow_null=True, help_text="until diskSpaceWarningLevelRatio at writeBytesPerS; null when not writing"
    )


class _BrokerStatus(serializers.Serializer):
    role = serializers.CharField(required=False, allow_null=True, help_text="ASYNC_MASTER, SYNC_MASTER or SLAVE")
    metaMode = serializers.CharField(
        required=False, allow_null=True, help_text="WRITER (serves consumers), FOLLOWER, ACTING (acting master)"
    )
    masterEpoch = serializers.IntegerField(required=False, allow_null=True)
    writable = serializers.BooleanField(required=False, allow_null=True, help_text="takes sends now")
    writeRefusal = serializers.CharField(required=False, allow_null=True, help_text="why it takes no sends")
    isolated = serializers.BooleanField(required=False, allow_null=True)
    commitLogMinOffset = serializers.IntegerField(required=False, allow_null=True)
    commitLogMaxOffset = serializers.IntegerField(required=False, allow_null=True)
    confirmOffset = serializers.IntegerField(required=False, allow_null=True)
    startedAtMs = serializers.IntegerField(required=False, allow_null=True)
    uptimeMs = serializers.IntegerField(required=False, allow_null=True)
    storeCodec = serializers.CharField(required=False, allow_null=True)
    pid = serializers.IntegerField(required=False, allow_null=True)
    topics = serializers.IntegerField(required=False, allow_null=True)
    consumerGroups = serializers.IntegerField(required=False, allow_null=True)
    store = _StoreStatus(required=False, allow_null=True)


@extend_schema_serializer(component_name="BrokerStatusReport")
class _BrokerReport(serializers.Serializer):
    clusterName = serializers.CharField()
    brokerName = serializers.CharField()
    brokerId = serializers.IntegerField()
    brokerAddr = serializers.CharField()
    alive = serializers.BooleanField(help_text="its nameserver heartbeats arrive")
    stale = serializers.BooleanField(help_text="no report for three of its intervals")
    reportedAtMs = serializers.IntegerField(help_text="Redis clock, epoch ms")
    ageMs = serializers.IntegerField()
    status = _BrokerStatus()
    config = serializers.DictField(child=serializers.CharField(allow_blank=True), help_text="broker.conf keys, as text")
    dynamicKeys = serializers.ListField(child=serializers.CharField(), help_text="keys updateBrokerConfig may change")


@extend_schema_serializer(component_name="BrokerStatus")
class BrokerStatusAnswer(serializers.Serializer):
    brokers = _BrokerReport(many=True)


class _GroupSummary(serializers.Serializer):
    group = serializers.CharField()
    topics = serializers.ListField(child=serializers.CharField())
    queues = serializers.IntegerField()
    committedOffset = serializers.IntegerField(help_text="summed over its queues")
    maxOffset = serializers.IntegerField(help_text="summed over its queues")
    lag = serializers.IntegerField(help_text="messages stored and not yet consumed, summed")
    stale = serializers.BooleanField(help_text="one of its broker sets' reports is stale")
    behindHorizon = serializers.BooleanField(
        help_text="a queue's committed offset is below the queue's min offset: retention deleted messages it never got"
    )


@extend_schema_serializer(component_name="ConsumerGroups")
class ConsumerGroupsAnswer(serializers.Serializer):
    groups = _GroupSummary(many=True)


class _QueueProgress(serializers.Serializer):
    topic = serializers.CharField()
    brokerName = serializers.CharField()
    servedBy = serializers.IntegerField(help_text="the brokerId whose report this row is from (its set's serving broker)")
    queueId = serializers.IntegerField()
    committedOffset = serializers.IntegerField()
    maxOffset = serializers.IntegerField(allow_null=True, help_text="null: the queue is gone from its broker")
    lag = serializers.IntegerField()
    stale = serializers.BooleanField()
    minOffset = serializers.IntegerField(allow_null=True, help_text="the queue's first offset kept (retention moves it)")
    behindHorizon = serializers.BooleanField(help_text="committedOffset < minOffset: the group's next pop skips forward")


@extend_schema_serializer(component_name="ConsumerProgress")
class ConsumerProgressAnswer(serializers.Serializer):
    group = serializers.CharField()
    lag = serializers.IntegerField()
    queues = _QueueProgress(many=True)


class _QueueOffsets(serializers.Serializer):
    brokerName = serializers.CharField()
    queueId = serializers.IntegerField()
    minOffset = serializers.IntegerField()
    maxOffset = serializers.IntegerField()
    stale = serializers.BooleanField()


@extend_schema_serializer(component_name="TopicStatus")
class TopicStatusAnswer(serializers.Serializer):
    topic = serializers.CharField()
    queues = _QueueOffsets(many=True)
