"""The controller's durable state (reference §1.2) and the append-only history of its transitions.

Every transition is one Postgres transaction that locks the ``ReplicaGroup`` row first
(``SELECT ... FOR UPDATE``); the constraints below make an invariant-breaking bug fail loudly.
"""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q


class ReplicaGroup(models.Model):
    """``SyncStateInfo`` + ``BrokerReplicaInfo`` of one broker set."""

    cluster_name = models.CharField(max_length=255, db_index=True)
    broker_name = models.CharField(max_length=255, unique=True)
    master_broker_id = models.BigIntegerField(null=True, blank=True)
    master_epoch = models.IntegerField(default=0)
    sync_state_set_epoch = models.IntegerField(default=0)
    next_assign_broker_id = models.BigIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "controlplane_replicagroup"  # the table predates the controller app
        ordering = ["cluster_name", "broker_name"]
        constraints = [
            models.CheckConstraint(condition=Q(master_epoch__gte=0), name="group_master_epoch_not_negative"),
            models.CheckConstraint(condition=Q(sync_state_set_epoch__gte=0), name="group_ss_epoch_not_negative"),
            models.CheckConstraint(condition=Q(next_assign_broker_id__gte=1), name="group_next_id_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.broker_name}"


class Replica(models.Model):
    group = models.ForeignKey(ReplicaGroup, on_delete=models.CASCADE, related_name="replicas")
    broker_id = models.BigIntegerField()
    broker_address = models.CharField(max_length=255)
    register_check_code = models.CharField(max_length=300)
    in_sync_state_set = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "controlplane_replica"
        ordering = ["group_id", "broker_id"]
        constraints = [
            models.UniqueConstraint(fields=["group", "broker_id"], name="replica_unique_id_in_group"),
            models.CheckConstraint(condition=Q(broker_id__gte=1), name="replica_controller_id_positive"),
        ]


class TransitionKind(models.TextChoices):
    ELECT = "elect", "elect master"
    ALTER = "alter", "alter SyncStateSet"
    APPLY_BROKER_ID = "apply_broker_id", "apply broker id"
    UPDATE_ADDRESS = "update_address", "update broker address"
    CLEAN = "clean", "clean broker data"


class Transition(models.Model):
    """One committed change of a broker set's controller state. Never updated, never deleted."""

    cluster_name = models.CharField(max_length=255)
    broker_name = models.CharField(max_length=255, db_index=True)
    kind = models.CharField(max_length=20, choices=TransitionKind.choices)
    trigger = models.CharField(max_length=20)  # broker / controller / operator
    requested_by = models.CharField(max_length=255, blank=True, default="")
    requested_broker_id = models.BigIntegerField(null=True, blank=True)
    old_master_broker_id = models.BigIntegerField(null=True, blank=True)
    new_master_broker_id = models.BigIntegerField(null=True, blank=True)
    old_master_epoch = models.IntegerField()
    new_master_epoch = models.IntegerField()
    old_sync_state_set_epoch = models.IntegerField()
    new_sync_state_set_epoch = models.IntegerField()
    old_sync_state_set = ArrayField(models.BigIntegerField(), default=list)
    new_sync_state_set = ArrayField(models.BigIntegerField(), default=list)
    candidates = models.JSONField(default=list, blank=True)
    response_code = models.IntegerField()
    detail = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "controlplane_transition"
        ordering = ["id"]
        constraints = [
            # At most one elect row per (brokerName, masterEpoch): two masters of one epoch cannot be committed.
            models.UniqueConstraint(
                fields=["broker_name", "new_master_epoch"], condition=Q(kind="elect"), name="one_elect_per_master_epoch"
            ),
            models.CheckConstraint(
                condition=Q(new_master_epoch__gte=models.F("old_master_epoch")), name="master_epoch_never_decreases"
            ),
            models.CheckConstraint(
                condition=Q(new_sync_state_set_epoch__gte=models.F("old_sync_state_set_epoch")), name="ss_epoch_never_decreases"
            ),
        ]


class ControllerConfigEntry(models.Model):
    """An operator's override of one ``ControllerConfig`` key; absent keys take RocketMQ's default."""

    key = models.CharField(max_length=100, primary_key=True)
    value = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "controlplane_controllerconfigentry"
