"""Audit runs of consumer-offset rollbacks and their findings.

The offset events themselves are not rows: they live in the Parquet event store (audits/event_store.py).
Rows here are written by the Spark job (spark_jobs/pg.py, raw SQL against these tables) and read by
the pages and the REST API; the constraints keep both sides honest. A Finding row is the job's typed
record (spark_jobs.schema.Finding) plus its run: tests/audits/test_finding_record.py checks that the
two name the same fields.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from spark_jobs import schema
from spark_jobs.schema import FINDING_FIELDS, Cause


class RunStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


class RunTrigger(models.TextChoices):
    SCHEDULE = "schedule", "Celery beat"
    OPERATOR = "operator", "an operator (dashboard)"
    API = "api", "the REST API"
    CLI = "cli", "the command line"


class AuditRun(models.Model):
    trigger = models.CharField(max_length=16, choices=RunTrigger.choices)
    requested_by = models.CharField(max_length=150, blank=True, default="")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    # True while queued or running, NULL after: the unique constraint allows one active run at a time.
    active = models.BooleanField(null=True, default=True, unique=True)
    stage = models.CharField(max_length=64, blank=True, default="")
    progress = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # the job's last progress report
    spark_master = models.CharField(max_length=255, blank=True, default="")
    events_uri = models.TextField(blank=True, default="")
    lookback_days = models.IntegerField(null=True, blank=True)
    events_scanned = models.BigIntegerField(null=True, blank=True)
    rollbacks = models.IntegerField(null=True, blank=True)
    messages_again = models.BigIntegerField(null=True, blank=True)
    beyond_max_offset = models.IntegerField(null=True, blank=True)
    explained_by_reset = models.IntegerField(null=True, blank=True)
    session_seconds = models.FloatField(null=True, blank=True)
    job_seconds = models.FloatField(null=True, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(progress__gte=0) & Q(progress__lte=1), name="audit_progress_in_0_1"),
            models.CheckConstraint(
                condition=(Q(status__in=ACTIVE_STATUSES) & Q(active=True))
                | (~Q(status__in=ACTIVE_STATUSES) & Q(active__isnull=True)),
                name="audit_active_iff_queued_or_running",
            ),
            models.CheckConstraint(
                condition=Q(finished_at__isnull=True) | Q(status__in=[RunStatus.SUCCEEDED, RunStatus.FAILED]),
                name="audit_finished_only_when_done",
            ),
        ]

    def __str__(self) -> str:
        return f"audit run {self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES


FindingKind = models.TextChoices("FindingKind", [(k.name, (k.value, k.label)) for k in schema.FindingKind])


class Finding(models.Model):
    run = models.ForeignKey(AuditRun, on_delete=models.CASCADE, related_name="findings")
    kind = models.CharField(max_length=24, choices=FindingKind.choices)
    cause = models.CharField(max_length=48, choices=[(c.value, c.value.replace("_", " ")) for c in Cause], null=True, blank=True)
    cluster_name = models.CharField(max_length=255, blank=True, default="")
    consumer_group = models.CharField(max_length=255, db_index=True)
    topic = models.CharField(max_length=255)
    broker_name = models.CharField(max_length=255, db_index=True)
    queue_id = models.IntegerField()
    master_epoch = models.BigIntegerField()  # the epoch the rollback belongs to (an election's, else the commit's)
    broker_id = models.BigIntegerField()  # the broker that reported the rolled-back (or beyond-max) offset
    role = models.CharField(max_length=16, blank=True, default="")
    source = models.CharField(max_length=24)
    previous_broker_id = models.BigIntegerField(null=True, blank=True)
    previous_master_epoch = models.BigIntegerField(null=True, blank=True)
    previous_offset = models.BigIntegerField(null=True, blank=True)
    previous_at = models.DateTimeField(null=True, blank=True)
    offset = models.BigIntegerField()
    messages_again = models.BigIntegerField(default=0)
    messages_lost = models.BigIntegerField(default=0)  # retention skips: deleted before the group consumed them
    queue_max_offset = models.BigIntegerField(null=True, blank=True)
    excess = models.BigIntegerField(null=True, blank=True)  # offset - queue max offset (beyond-max findings)
    event_count = models.IntegerField(default=1)
    detected_at = models.DateTimeField(db_index=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    transition = models.ForeignKey("controller.Transition", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    operator_initiated = models.BooleanField(default=False)  # the election was an operator's switch-over

    class Meta:
        ordering = ["-messages_again", "detected_at", "id"]
        indexes = [models.Index(fields=["run", "kind"]), models.Index(fields=["run", "cause"])]
        constraints = [
            models.CheckConstraint(condition=Q(messages_again__gte=0), name="finding_messages_again_not_negative"),
            models.CheckConstraint(
                condition=(Q(kind=FindingKind.ROLLBACK) & Q(cause__isnull=False) & Q(previous_offset__gt=models.F("offset")))
                | (Q(kind=FindingKind.BEYOND_MAX_OFFSET) & Q(cause__isnull=True) & Q(offset__gt=models.F("queue_max_offset")))
                | (Q(kind=FindingKind.RETENTION_SKIP) & Q(cause__isnull=True) & Q(messages_lost__gte=0)),
                name="finding_kind_consistent",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.consumer_group}/{self.topic}@{self.broker_name}:{self.queue_id}"

    def as_record(self) -> schema.Finding:
        """The row as the job's record (without its run)."""
        values = {name: getattr(self, name) for name in FINDING_FIELDS}
        return schema.Finding(
            **{**values, "kind": schema.FindingKind(self.kind), "cause": Cause(self.cause) if self.cause else None}
        )
