"""The Celery application (``celery -A controlplane.celery worker``). Task modules live in
``celery_tasks``; the app names them, never imports them: the worker discovers them, everything else
enqueues by name (``app.send_task("controller.on_broker_inactive", ...)``).

The beat schedule: each scan ticks every half second; the task itself runs at most once per its
configured interval (scanNotActiveBrokerInterval of NamesrvConfig and of ControllerConfig,
scanInactiveMasterInterval), guarded by a Redis slot so that several beats or workers never scan twice
in one interval, and so that operators may change the intervals at run time.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["celery_tasks"], related_name="tasks")

BEAT_TICK_SECONDS = 0.5  # a scan configured at 500 ms (fast failover) runs on time


def _every_tick(task: str) -> dict:
    return {"task": task, "schedule": BEAT_TICK_SECONDS, "options": {"expires": 5}}


def _every(task: str, seconds: float) -> dict:
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


def beat_schedule() -> dict:
    """The periodic tasks, by name, for the roles this process serves (settings.CONTROLPLANE_ROLES)."""
    from django.conf import settings  # read once Celery is configured, not at import

    schedule = {}
    if "nameserver" in settings.CONTROLPLANE_ROLES:
        schedule["nameserver-scan-not-active-brokers"] = _every_tick("nameserver.scan_not_active_brokers")
    if "controller" in settings.CONTROLPLANE_ROLES:
        schedule["controller-scan-inactive-brokers"] = _every_tick("controller.scan_inactive_brokers")
        schedule["controller-scan-inactive-masters"] = _every_tick("controller.scan_inactive_masters")
    schedule["dashboards-sample-water-levels"] = _every_tick("dashboards.sample_water_levels")
    # Audits: append buffered offset events to the event store; the rollback audit (hourly).
    schedule["audits-flush-offset-events"] = _every("audits.flush_offset_events", settings.AUDIT_EVENTS_FLUSH_SECONDS)
    schedule["audits-offset-rollback-audit"] = _every("audits.run_scheduled_audit", settings.AUDIT_INTERVAL_SECONDS)
    return schedule


def _load_schedule(sender, **kwargs) -> None:
    sender.conf.beat_schedule = beat_schedule()


app.on_after_configure.connect(_load_schedule, weak=False)
