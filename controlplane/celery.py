"""The Celery application. Task modules live in ``celery_tasks``; the beat schedule too."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["celery_tasks"], related_name="tasks")


def _load_schedule() -> None:
    from celery_tasks.schedule import beat_schedule

    app.conf.beat_schedule = beat_schedule()


app.on_after_configure.connect(lambda sender, **kw: _load_schedule(), weak=False)
