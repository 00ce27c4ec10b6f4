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
