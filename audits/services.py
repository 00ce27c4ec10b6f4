"""Writes of the audits app: reporting offset events, starting and executing audit runs. Views,
websocket handlers, Celery tasks and dashboard actions call these; nothing else writes runs."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from psycopg.conninfo import make_conninfo

from controlplane import audit as operator_audit
from controlplane.celery import app as celery_app
from controlplane.redis import acquire_slot, key

from . import event_store
from .events import OffsetEventBatch
from .models import AuditRun, RunStatus, RunTrigger

OPERATOR_ACTION = "start_offset_audit"
# Celery task names (celery_tasks/audits.py registers them; tasks are enqueued by name, so this
# module never imports the task modules that call it).
FLUSH_TASK = "audits.flush_offset_events"
SCHEDULED_RUN_TASK = "audits.run_scheduled_audit"
RUN_TASK = "audits.run_offset_audit"


def report_offset_events(batch: OffsetEventBatch) -> int:
    """Buffer a broker's batch for the event store; the number of events accepted."""
    event_store.append([batch])
    return len(batch.events)


def flush_offset_events() -> event_store.FlushReport:
    return event_store.flush()


def fail_stale_runs() -> int:
    """Runs whose job stopped reporting (worker killed, machine lost) or that no worker ever picked
    up: failed, so that they no longer hold the one-active-run slot."""
    now = timezone.now()
    lost = AuditRun.objects.filter(
        status=RunStatus.RUNNING, heartbeat_at__lt=now - timedelta(seconds=settings.AUDIT_STALE_RUN_SECONDS)
    )
    never = AuditRun.objects.filter(
        status=RunStatus.QUEUED, created_at__lt=now - timedelta(seconds=settings.AUDIT_RUN_TIMEOUT_SECONDS)
    )
    n = lost.update(
        status=RunStatus.FAILED,
        active=None,
        finished_at=now,
        stage="failed",
        error="the job stopped reporting progress (worker or machine lost)",
    )
    return n + never.update(
        status=RunStatus.FAILED, active=None, finished_at=now, stage="failed", error="no Celery worker started the run"
    )


def start_scheduled_run(actor: str = "celery-beat") -> AuditRun | None:
    """Beat's scheduled audit: at most one per AUDIT_INTERVAL_SECONDS however many beats run (a Redis
    slot, as the scans have); None when another beat took this interval's."""
    if not acquire_slot(key("audits", "schedule-slot"), int(settings.AUDIT_INTERVAL_SECONDS * 1000)):
        return None
    return start_run(RunTrigger.SCHEDULE, actor)[0]


def start_run(trigger: RunTrigger, actor: str) -> tuple[AuditRun, bool]:
    """Queue an audit run unless one is queued or running: (the run, whether it is new). Operator
    and API starts are written to the operator audit log, refused ones too."""
    with transaction.atomic():
        fail_stale_runs()
        run, created = None, False
        while run is None:
            try:
                with transaction.atomic():
                    run = AuditRun.objects.create(
                        trigger=trigger,
                        requested_by=actor[:150],
                        stage="queued",
                        spark_master=settings.AUDIT_SPARK_MASTER,
                        events_uri=settings.AUDIT_EVENTS_URI,
                        lookback_days=settings.AUDIT_LOOKBACK_DAYS or None,
                    )
                created = True
            except IntegrityError:  # the unique ``active``: another run holds the slot (unless it just ended)
                run = AuditRun.objects.filter(active=True).first()
        if trigger != RunTrigger.SCHEDULE:
            operator_audit.record(
                actor,
                OPERATOR_ACTION,
                params={"trigger": trigger},
                after={"runId": run.pk, "status": run.status},
                result="ok" if created else "already_running",
                detail="" if created else f"audit run {run.pk} is {run.status}",
            )
        if created:
            transaction.on_commit(lambda: celery_app.send_task(RUN_TASK, args=[run.pk]))
    return run, created


def job_environment() -> dict[str, str]:
    """The job's environment: this process's database (the test database under pytest) as a libpq
    connection string in DATABASE_URL, so no password shows in the process list."""
    db = connection.settings_dict
    conninfo = make_conninfo(
        dbname=db["NAME"],
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=str(db["PORT"]) if db.get("PORT") else None,
    )
    return {**os.environ, "DATABASE_URL": conninfo, "PYTHONUNBUFFERED": "1"}


def job_command(run_id: int) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "spark_jobs.offset_audit",
        "--run-id",
        str(run_id),
        "--events-uri",
        settings.AUDIT_EVENTS_URI,
        "--master",
        settings.AUDIT_SPARK_MASTER,
        "--lookback-days",
        str(settings.AUDIT_LOOKBACK_DAYS),
    ]
    if settings.AUDIT_SPARK_REMOTE:
        cmd += ["--remote", settings.AUDIT_SPARK_REMOTE, "--token-file", settings.AUDIT_SPARK_TOKEN_FILE]
    for conf in settings.AUDIT_SPARK_CONF:
        cmd += ["--conf", conf]
    return cmd


def execute_run(run_id: int) -> str:
    """Flush the buffered events, then run the Spark job for ``run_id`` in a process of its own (its
    JVM never lives in a Celery worker) and wait for it; the job writes its progress, findings and
    summary itself. Returns the run's final status."""
    flush_offset_events()
    log_dir = settings.DATA_DIR / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"offset-audit-{connection.settings_dict['NAME']}-{run_id}.log"  # test databases apart
    # The job stays in the worker's process group, so whoever stops the worker's group stops it too;
    # its JVM exits by itself when the job's Python process dies (PySpark's gateway watches its stdin).
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            job_command(run_id),
            cwd=settings.BASE_DIR,
            env=job_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            code = proc.wait(timeout=settings.AUDIT_RUN_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        except BaseException:  # the worker is shutting down: do not leave the job behind
            proc.kill()
            raise
    if code != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        why = "timed out" if code is None else f"exited with code {code}"
        AuditRun.objects.filter(pk=run_id, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).update(
            status=RunStatus.FAILED,
            active=None,
            finished_at=timezone.now(),
            stage="failed",
            error=f"the audit job {why} (log: {log_path})\n{tail}",
        )
    return AuditRun.objects.values_list("status", flat=True).get(pk=run_id)
