"""Control-plane wide models: API tokens for brokers and tools."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models


class TokenScope(models.TextChoices):
    # Brokers: register, heartbeat, unregister, read routes and member groups.
    BROKER = "broker", "broker"
    # Tools and operators: everything, including topic administration and config updates.
    ADMIN = "admin", "admin"
    # Read-only tools (monitoring, dashboards' consumers).
    READ = "read", "read"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    name = models.CharField(max_length=100, unique=True)
    scope = models.CharField(max_length=10, choices=TokenScope.choices)
    # Only the SHA-256 of the token is stored; the token itself is shown once, at creation.
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    # Optional: restrict a broker token to one cluster.
    cluster_name = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.scope}, {self.prefix}…)"

    @classmethod
    def issue(cls, name: str, scope: str, cluster_name: str = "") -> tuple[ApiToken, str]:
        raw = "rmq_" + secrets.token_urlsafe(32)
        token = cls.objects.create(name=name, scope=scope, key_hash=hash_token(raw), prefix=raw[4:12], cluster_name=cluster_name)
        return token, raw


class OperatorAction(models.Model):
    """The operator audit log: every action taken from the dashboard or with an admin token (who,
    what, on which broker, the state before and after, the result). Append-only."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=150)  # a user name, or "token:<name>"
    action = models.CharField(max_length=255, db_index=True)  # e.g. elect_master, isolate; "POST /api/..." for REST
    cluster_name = models.CharField(max_length=255, blank=True, default="")
    broker_name = models.CharField(max_length=255, blank=True, default="", db_index=True)
    broker_id = models.BigIntegerField(null=True, blank=True)
    params = models.JSONField(default=dict, blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    result = models.CharField(max_length=32)  # "ok", or the error's name
    detail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.broker_name} -> {self.result}"


class Isolation(models.Model):
    """A broker an operator isolated: it leaves the routes, is not a candidate in elections, and is
    told over its websocket to stop taking writes, until an operator lifts it. Keyed by the broker's
    address (one broker process), which both the nameserver and the controller know."""

    cluster_name = models.CharField(max_length=255)
    broker_name = models.CharField(max_length=255, db_index=True)
    broker_addr = models.CharField(max_length=255)
    by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster_name", "broker_addr"], name="one_isolation_per_broker")]

    def __str__(self) -> str:
        return f"{self.cluster_name}/{self.broker_name} {self.broker_addr} (by {self.by})"


class DrillOutcome(models.TextChoices):
    RUNNING = "running", "running"
    OK = "ok", "ok"
    FAILED = "failed", "failed"


class Drill(models.Model):
    """A failover drill (controlplane/operations/drill.py): an operator's controlled switch-over of one
    broker set to a replica of its SyncStateSet, with what it cost: the RTO (from the controller's
    decision until the new master registered as id 0 at the new epoch) and the data at risk before the
    switch and lost at it. Written before the switch (running), completed after it."""

    cluster_name = models.CharField(max_length=255)
    broker_name = models.CharField(max_length=255, db_index=True)
    actor = models.CharField(max_length=150)
    from_broker_id = models.BigIntegerField()
    to_broker_id = models.BigIntegerField()
    old_epoch = models.IntegerField()
    new_epoch = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)  # the election committed
    serving_at = models.DateTimeField(null=True, blank=True)  # the new master registered as id 0 at the new epoch
    rto_ms = models.IntegerField(null=True, blank=True)
    data_at_risk_bytes = models.BigIntegerField(null=True, blank=True)  # before: the target's lag behind the master
    data_lost_bytes = models.BigIntegerField(null=True, blank=True)  # at the switch: acknowledged, not on the new master
    outcome = models.CharField(max_length=16, choices=DrillOutcome.choices, default=DrillOutcome.RUNNING)
    detail = models.TextField(blank=True, default="")
    figures = models.JSONField(default=dict, blank=True)  # the offsets the byte counts come from, and their source

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            # One drill of a broker set at a time.
            models.UniqueConstraint(
                fields=["broker_name"], condition=models.Q(outcome="running"), name="one_running_drill_per_set"
            ),
            models.CheckConstraint(condition=models.Q(outcome__in=["running", "ok", "failed"]), name="drill_outcome_valid"),
            models.CheckConstraint(
                condition=models.Q(rto_ms__isnull=True) | models.Q(rto_ms__gte=0), name="drill_rto_not_negative"
            ),
            models.CheckConstraint(
                condition=(models.Q(data_at_risk_bytes__isnull=True) | models.Q(data_at_risk_bytes__gte=0))
                & (models.Q(data_lost_bytes__isnull=True) | models.Q(data_lost_bytes__gte=0)),
                name="drill_bytes_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.broker_name} {self.from_broker_id}->{self.to_broker_id} by {self.actor}: {self.outcome}"
