"""Offset-rollback audits: thin calls into ``audits.services`` (which names these tasks and enqueues them by name)."""

from celery import shared_task

from audits import services


@shared_task(name=services.FLUSH_TASK, ignore_result=True)
def flush_offset_events() -> int:
    """Append the buffered offset events to the Parquet event store (every AUDIT_EVENTS_FLUSH_SECONDS)."""
    return services.flush_offset_events().events


@shared_task(name=services.SCHEDULED_RUN_TASK, ignore_result=True)
def run_scheduled_audit() -> int | None:
    """Celery beat's hourly (AUDIT_INTERVAL_SECONDS) audit: once per interval however many beats run,
    and skipped while another run is active."""
    run = services.start_scheduled_run()
    return None if run is None else run.pk


# A worker lost mid-run leaves its run to the stale-run check (audits.services.fail_stale_runs)
# rather than running a possibly long job twice.
@shared_task(name=services.RUN_TASK, ignore_result=True)
def run_offset_audit(run_id: int) -> str:
    """Execute one queued run: flush the events, run the Spark job in its own process, wait."""
    return services.execute_run(run_id)
