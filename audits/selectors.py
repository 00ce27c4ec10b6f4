"""Reads of the audits app: runs, findings, and the series the results page charts."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncHour

from spark_jobs.schema import Cause

from .models import AuditRun, Finding, FindingKind, RunStatus


def runs(limit: int = 20) -> list[AuditRun]:
    return list(AuditRun.objects.all()[:limit])


def active_run() -> AuditRun | None:
    return AuditRun.objects.filter(active=True).first()


def run(run_id: int) -> AuditRun | None:
    return AuditRun.objects.filter(pk=run_id).first()


def latest_finished_run() -> AuditRun | None:
    return AuditRun.objects.filter(status=RunStatus.SUCCEEDED).first()


def findings(
    audit_run: AuditRun,
    *,
    kind: str | None = None,
    cause: str | None = None,
    cluster_name: str | None = None,
    limit: int | None = None,
) -> QuerySet[Finding]:
    qs = Finding.objects.filter(run=audit_run)
    if kind:
        qs = qs.filter(kind=kind)
    if cause:
        qs = qs.filter(cause=cause)
    if cluster_name:
        qs = qs.filter(cluster_name=cluster_name)
    return qs[:limit] if limit else qs


def chart_series(audit_run: AuditRun, top_groups: int = 10) -> dict:
    """Plotly-ready series: rollbacks per hour by cause, messages consumed again per hour by cause,
    and the consumer groups with the most messages consumed again."""
    rollbacks = Finding.objects.filter(run=audit_run, kind=FindingKind.ROLLBACK)
    per_hour = (
        rollbacks.annotate(hour=TruncHour("detected_at"))
        .values("hour", "cause")
        .annotate(n=Count("id"), again=Sum("messages_again"))
        .order_by("hour")
    )
    hours = sorted({row["hour"] for row in per_hour})
    count: dict[str, dict] = defaultdict(dict)
    again: dict[str, dict] = defaultdict(dict)
    for row in per_hour:
        count[row["cause"]][row["hour"]] = row["n"]
        again[row["cause"]][row["hour"]] = row["again"] or 0
    x = [h.isoformat() for h in hours]
    causes = [c.value for c in Cause if c.value in count]
    groups = list(
        rollbacks.values("consumer_group")
        .annotate(again=Sum("messages_again"), n=Count("id"))
        .order_by("-again", "consumer_group")[:top_groups]
    )
    return {
        "rollbacksOverTime": [{"name": c, "x": x, "y": [count[c].get(h, 0) for h in hours]} for c in causes],
        "messagesAgainOverTime": [{"name": c, "x": x, "y": [again[c].get(h, 0) for h in hours]} for c in causes],
        "topGroups": {
            "groups": [g["consumer_group"] for g in groups],
            "messagesAgain": [g["again"] for g in groups],
            "rollbacks": [g["n"] for g in groups],
        },
    }
