"""The Celery beat schedule.

Each scan ticks every half second; the task itself runs at most once per its configured interval
(scanNotActiveBrokerInterval of NamesrvConfig and of ControllerConfig, scanInactiveMasterInterval),
guarded by a Redis slot so that several beats or workers never scan twice in one interval, and so
that operators may change the intervals at run time.
"""

from django.conf import settings

BEAT_TICK_SECONDS = 0.5  # a scan configured at 500 ms (fast failover) runs on time


def _every_tick(task: str) -> dict:
    return {"task": task, "schedule": BEAT_TICK_SECONDS, "options": {"expires": 5}}


def beat_schedule() -> dict:
    schedule = {}
    if "nameserver" in settings.CONTROLPLANE_ROLES:
        schedule["nameserver-scan-not-active-brokers"] = _every_tick("nameserver.scan_not_active_brokers")
    if "controller" in settings.CONTROLPLANE_ROLES:
        schedule["controller-scan-inactive-brokers"] = _every_tick("controller.scan_inactive_brokers")
        schedule["controller-scan-inactive-masters"] = _every_tick("controller.scan_inactive_masters")
    schedule["dashboards-sample-water-levels"] = _every_tick("dashboards.sample_water_levels")
    # audits (issue #8): append buffered offset events to the event store; the rollback audit (hourly)
    schedule["audits-flush-offset-events"] = {"task": "audits.flush_offset_events",
                                              "schedule": settings.AUDIT_EVENTS_FLUSH_SECONDS,
                                              "options": {"expires": settings.AUDIT_EVENTS_FLUSH_SECONDS}}
    schedule["audits-offset-rollback-audit"] = {"task": "audits.run_scheduled_audit",
                                                "schedule": settings.AUDIT_INTERVAL_SECONDS,
                                                "options": {"expires": settings.AUDIT_INTERVAL_SECONDS}}
    return schedule
