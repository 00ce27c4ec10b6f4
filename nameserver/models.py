"""The nameserver's durable registry (reference §3.1). Liveness lives in Redis (``liveness.py``).

``BrokerGroup`` is RocketMQ's ``BrokerData`` (the cluster table is derived from it), ``BrokerMember``
an entry of ``brokerAddrs`` with the durable part of its live-table entry, ``TopicQueue`` a
``QueueData`` of ``topicQueueTable``.
"""

from django.db import models
from django.db.models import F, Q

from mqrules.topic_attributes import MESSAGE_TYPE, TOPIC_MESSAGE_TYPES


class BrokerGroup(models.Model):
    cluster_name = models.CharField(max_length=255, db_index=True)
    broker_name = models.CharField(max_length=255, unique=True)
    zone_name = models.CharField(max_length=255, blank=True, default="")
    # None: registered by a broker that predates RIP-32.
    enable_acting_master = models.BooleanField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster_name", "broker_name"]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.broker_name}"


class BrokerMember(models.Model):
    group = models.ForeignKey(BrokerGroup, on_delete=models.CASCADE, related_name="members")
    broker_id = models.BigIntegerField()
    broker_addr = models.CharField(max_length=255)
    ha_server_addr = models.CharField(max_length=255, blank=True, default="")
    grpc_addr = models.CharField(max_length=255, blank=True, default="")  # ours: RocketMQ 5 client endpoint
    heartbeat_timeout_millis = models.IntegerField()
    state_version = models.BigIntegerField(default=0)
    data_version_counter = models.BigIntegerField(default=0)
    data_version_timestamp = models.BigIntegerField(default=0)
    registered_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["group_id", "broker_id"]
        constraints = [
            models.UniqueConstraint(fields=["group", "broker_id"], name="member_unique_id_in_group"),
            models.UniqueConstraint(fields=["group", "broker_addr"], name="member_unique_addr_in_group"),
            models.CheckConstraint(condition=Q(broker_id__gte=0), name="member_broker_id_not_negative"),
            models.CheckConstraint(condition=Q(heartbeat_timeout_millis__gt=0), name="member_timeout_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.group.broker_name}[{self.broker_id}]@{self.broker_addr}"


class TopicQueue(models.Model):
    topic = models.CharField(max_length=255, db_index=True)
    group = models.ForeignKey(BrokerGroup, on_delete=models.CASCADE, related_name="queue_datas")
    read_queue_nums = models.IntegerField()
    write_queue_nums = models.IntegerField()
    perm = models.SmallIntegerField()
    topic_sys_flag = models.IntegerField(default=0)
    # The broker set's TopicConfig.attributes (mqrules.topic_attributes): {"message.type": "DELAY"}.
    attributes = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["topic", "group_id"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "group"], name="queue_unique_topic_group"),
            models.CheckConstraint(
                condition=~Q(attributes__has_key=MESSAGE_TYPE) | Q(**{f"attributes__{MESSAGE_TYPE}__in": TOPIC_MESSAGE_TYPES}),
                name="queue_message_type_valid",
            ),
            models.CheckConstraint(condition=Q(perm__gte=0) & Q(perm__lt=8), name="queue_perm_valid"),
            models.CheckConstraint(
                condition=Q(read_queue_nums__gte=0) & Q(write_queue_nums__gte=0), name="queue_nums_not_negative"
            ),
        ]
        indexes = [models.Index(F("group"), name="queue_by_group")]


class NamesrvConfigEntry(models.Model):
    """An operator's override of one ``NamesrvConfig`` key; absent keys take RocketMQ's default."""

    key = models.CharField(max_length=100, primary_key=True)
    value = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)


class StaticTopic(models.Model):
    """A static topic's logical-queue mapping (seed 003; mqrules/logical_queues.py): every
    logical queue's chain of segments, as ``TopicMapping.to_wire()``. Changed only by
    nameserver/static_topics.py, one row-locked transaction per change, each one epoch higher."""

    topic = models.CharField(max_length=255, primary_key=True)
    epoch = models.BigIntegerField()
    mapping = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["topic"]
        constraints = [models.CheckConstraint(condition=Q(epoch__gte=1), name="static_topic_epoch_positive")]


class StaticTopicChange(models.Model):
    """The append-only history of a static topic's mapping: one row per epoch, written in the
    transaction that made the change (the database refuses a second change at one epoch)."""

    class Kind(models.TextChoices):
        CREATE = "create"
        MOVE = "move"
        DECIDE = "decide"
        EXPIRE = "expire"
        RESIZE = "resize"  # more logical queues
        ADOPT = "adopt"  # a plain topic turned static

    topic = models.ForeignKey(StaticTopic, on_delete=models.CASCADE, related_name="changes")
    epoch = models.BigIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    actor = models.CharField(max_length=255)
    params = models.JSONField(default=dict)
    mapping = models.JSONField()  # the mapping after the change
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["topic_id", "epoch"]
        constraints = [models.UniqueConstraint(fields=["topic", "epoch"], name="static_topic_one_change_per_epoch")]


class AclUser(models.Model):
    """An ACL 2.0 user of one cluster (issue 39, mqrules/acl.py): the access key clients sign with, its
    secret key encrypted at rest (controlplane/secretbox.py; never stored, logged or answered in clear),
    Super or Normal, enabled or not. Changed only by nameserver/acl.py, under the cluster's version row."""

    class UserType(models.TextChoices):
        SUPER = "Super"
        NORMAL = "Normal"

    class UserStatus(models.TextChoices):
        ENABLE = "enable"
        DISABLE = "disable"

    cluster_name = models.CharField(max_length=255)
    username = models.CharField(max_length=255)
    secret_key_encrypted = models.TextField()  # a Fernet token
    user_type = models.CharField(max_length=16, choices=UserType.choices, default=UserType.NORMAL)
    user_status = models.CharField(max_length=16, choices=UserStatus.choices, default=UserStatus.ENABLE)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster_name", "username"]
        constraints = [
            models.UniqueConstraint(fields=["cluster_name", "username"], name="acl_user_unique_in_cluster"),
            models.CheckConstraint(condition=~Q(username=""), name="acl_user_username_not_empty"),
            models.CheckConstraint(condition=~Q(secret_key_encrypted=""), name="acl_user_secret_not_empty"),
            models.CheckConstraint(condition=Q(user_type__in=["Super", "Normal"]), name="acl_user_type_valid"),
            models.CheckConstraint(condition=Q(user_status__in=["enable", "disable"]), name="acl_user_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.username}"


class AclPolicy(models.Model):
    """A user's ACL policy: its entries as ``mqrules.acl.entry_as_dict`` gives them, one per resource.
    One per user; it goes with its user."""

    user = models.OneToOneField(AclUser, on_delete=models.CASCADE, related_name="policy")
    entries = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["user_id"]
        constraints = [models.CheckConstraint(condition=~Q(entries=[]), name="acl_policy_not_empty")]


class AclVersion(models.Model):
    """A cluster's ACL version: raised in the transaction of every change of its users or policies, taken
    with ``SELECT ... FOR UPDATE`` first, so one cluster's changes take turns; brokers keep the highest
    snapshot version they have seen (the ``acl_update`` push and the registration answer's ``acl``)."""

    cluster_name = models.CharField(max_length=255, primary_key=True)
    version = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(version__gte=0), name="acl_version_not_negative")]
