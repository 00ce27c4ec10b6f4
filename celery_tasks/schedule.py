"""The Celery beat schedule.

The inactive-broker scan ticks every second; the task itself scans at most once per
``scanNotActiveBrokerInterval`` (a NamesrvConfig key operators may change at run time), guarded
by a Redis slot so that several beats or workers never scan twice in one interval.
"""

BEAT_TICK_SECONDS = 1.0


def beat_schedule() -> dict:
    return {
        "nameserver-scan-not-active-brokers": {
            "task": "nameserver.scan_not_active_brokers",
            "schedule": BEAT_TICK_SECONDS,
            "options": {"expires": 5},
        },
    }
