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
        token = cls.objects.create(
            name=name, scope=scope, key_hash=hash_token(raw), prefix=raw[4:12], cluster_name=cluster_name
        )
        return token, raw


# The controller's models live beside its code; importing them here registers them with the app.
from controlplane.controller.models import (  # noqa: E402,F401
    ControllerConfigEntry,
    Replica,
    ReplicaGroup,
    Transition,
)
