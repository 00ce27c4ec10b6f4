"""Celery beat runs the audit on its schedule (here every 3 s instead of hourly): a real beat, a real
worker, the real job in its own process (real Spark), the progress visible while it runs."""

from __future__ import annotations

import time

import pytest

from audits.models import AuditRun, Finding, RunStatus
from tests.procs import celery_worker_and_beat

from .helpers import batch, now_ms, store

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_celery_beat_runs_the_audit_and_its_progress_shows_while_it_runs(tmp_path, monkeypatch):
    uri = str(tmp_path / "offset-events")
    t0 = now_ms()
    store(
        uri,
        batch(
            "rg-s", 0, "SYNC_MASTER", 5, [("g", "t", 0, 50, "client_commit", t0), ("g", "t", 0, 20, "client_commit", t0 + 1000)]
        ),
    )
    monkeypatch.setenv("AUDIT_EVENTS_URI", uri)
    monkeypatch.setenv("AUDIT_INTERVAL_SECONDS", "3")
    monkeypatch.setenv("AUDIT_SPARK_MASTER", "local[2]")
    seen: list[tuple[str, str, float]] = []
    with celery_worker_and_beat() as (worker, _beat):
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            run = AuditRun.objects.order_by("id").first()
            if run is not None:
                seen.append((run.status, run.stage, run.progress))
                if not run.is_active:
                    break
            time.sleep(0.2)
        else:
            pytest.fail(f"no audit run finished within 240 s; worker log:\n{worker.log_tail()}")
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (run.trigger, run.requested_by) == ("schedule", "celery-beat")
    running = [s for s in seen if s[0] == RunStatus.RUNNING]
    assert running, seen
    assert any(stage not in ("queued", "") for _, stage, _ in running), running
    progress = [p for _, _, p in seen]
    assert progress == sorted(progress) and progress[-1] == 1.0  # it only moves forward
    finding = Finding.objects.get(run=run)
    assert (finding.cause, finding.messages_again, finding.master_epoch) == ("unknown", 30, 5)
    assert AuditRun.objects.filter(active=True).count() <= 1
