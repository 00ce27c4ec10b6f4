"""Real control-plane processes (uvicorn, Celery worker, Celery beat) for a test, from testkit.

They run against the test database that pytest-django created (so tests that use them need
``transaction=True``) and the test Redis key prefix, bind to 127.0.0.1, and are stopped by the
fixture that started them. Only the Django-aware part lives here: the environment of the test run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import dj_database_url
import httpx
from django.conf import settings
from django.db import connection

from testkit.controlplane import ControlPlane, running_web
from testkit.ports import free_port
from testkit.procs import ARTIFACTS, ROOT, Process

__all__ = ["ARTIFACTS", "ROOT", "celery_worker_and_beat", "child_env", "free_port", "uvicorn_server"]


def child_env(**extra: str) -> dict[str, str]:
    db = dict(dj_database_url.parse(settings.DATABASE_URL))
    db_url = settings.DATABASE_URL.rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
    if "?" in settings.DATABASE_URL.rsplit("/", 1)[1]:
        db_url += "?" + settings.DATABASE_URL.rsplit("?", 1)[1]
    assert db["NAME"] != connection.settings_dict["NAME"] or "test" in db["NAME"]
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        REDIS_URL=settings.REDIS_URL,
        DJANGO_SETTINGS_MODULE="controlplane.settings_test",
        TEST_REDIS_KEY_PREFIX=settings.REDIS_KEY_PREFIX,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextmanager
def uvicorn_server(**env_extra: str) -> Iterator[str]:
    """A real ASGI server (uvicorn + Channels) on a reserved port; yields its base URL."""
    with running_web(child_env(**env_extra), ARTIFACTS) as url:
        yield url


@contextmanager
def celery_worker_and_beat(**env_extra: str) -> Iterator[tuple[Process, Process]]:
    """A real Celery worker and a real Celery beat running the project's schedule."""
    cp = ControlPlane(child_env(**env_extra), ARTIFACTS, tag=f"-{os.getpid()}-{time.time_ns()}")
    try:
        cp.start_celery()
        yield cp.worker, cp.beat
    finally:
        cp.stop()


def create_topic(
    base: str, admin: dict[str, str], topic: str, queues: int, *, attributes: dict[str, str] | None = None, **where: object
) -> None:
    """Creates (or updates) ``topic`` with ``queues`` read and write queues over the control plane's REST
    API (``admin``: an admin token's headers), on ``clusterName=...`` or ``brokerNames=[...]``;
    ``attributes``: e.g. ``{"message.type": "DELAY"}`` (docs/api.md)."""
    json = {"topicName": topic, **where, "readQueueNums": queues, "writeQueueNums": queues}
    if attributes is not None:
        json["attributes"] = attributes
    r = httpx.post(f"{base}/api/v1/nameserver/topics", headers=admin, timeout=5, json=json)
    assert r.status_code == 200, r.text
