"""``/readyz`` (controlplane/readiness.py): ready only while Postgres, Redis and a Celery worker answer,
each failure named with its error; quick either way. ``/healthz`` stays the liveness probe."""

from __future__ import annotations

import time

import pytest
from django.test import Client, override_settings

from tests.procs import celery_worker_and_beat

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def readyz():
    started = time.monotonic()
    r = Client().get("/readyz")
    return r, time.monotonic() - started


def test_ready_with_postgres_redis_and_a_celery_worker():
    with celery_worker_and_beat():
        r, took = readyz()
    assert r.status_code == 200, r.content
    assert r.json() == {"status": "ok", "checks": {"postgres": "ok", "redis": "ok", "celery": "ok"}}
    assert took < 3


def test_not_ready_without_a_celery_worker():
    r, took = readyz()
    assert r.status_code == 503
    body = r.json()
    assert body["failed"] == ["celery"] and "Celery workers unavailable" in body["checks"]["celery"]
    assert body["checks"]["postgres"] == body["checks"]["redis"] == "ok"
    assert took < 4


@override_settings(REDIS_URL="redis://127.0.0.1:1/0")
def test_not_ready_when_redis_is_gone_and_healthz_does_not_care():
    r, took = readyz()
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable" and "redis" in body["failed"]
    assert "Unable to connect to Redis" in body["checks"]["redis"]
    assert body["checks"]["postgres"] == "ok"
    assert took < 4
    assert Client().get("/healthz").json() == {"status": "ok"}
