"""Audit tasks are enqueued by name: audits.services names them and never imports the task modules
(celery_tasks/audits.py imports the services, not the other way round); the worker registers every
name the services send and the beat schedule lists."""

from __future__ import annotations

import grimp
import pytest

from audits import services
from controlplane.celery import app, beat_schedule

pytestmark = pytest.mark.unit


def test_the_services_never_import_the_task_modules():
    graph = grimp.build_graph("audits", "celery_tasks", "controlplane", cache_dir=None)
    direct = {(m, i) for m in graph.find_children("audits") for i in graph.find_modules_directly_imported_by(m)}
    assert not {(m, i) for m, i in direct if i.startswith("celery_tasks")}
    for tasks in ("celery_tasks.audits", "celery_tasks.tasks"):
        assert not graph.find_shortest_chains(importer="audits", imported=tasks)


def test_every_name_sent_or_scheduled_is_a_registered_task():
    app.loader.import_default_modules()  # what a worker does at start: autodiscovery of celery_tasks.tasks
    sent = {services.FLUSH_TASK, services.SCHEDULED_RUN_TASK, services.RUN_TASK}
    scheduled = {entry["task"] for entry in beat_schedule().values()}
    assert sent <= set(app.tasks) and scheduled <= set(app.tasks)
    assert {services.FLUSH_TASK, services.SCHEDULED_RUN_TASK} <= scheduled
