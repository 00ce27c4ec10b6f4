"""``/readyz``: whether this web process can do its work now, for a load balancer or an orchestrator's
readiness probe: Postgres answers a ``SELECT 1``, the configured Redis a PING, and at least one Celery
worker a ping. Each check is django-health-check's, with a budget of ``CHECK_TIMEOUT`` (and a second
the library grants on top); they run at once. 200 ``{"status": "ok", "checks": {...}}``, or 503 with
``"status": "unavailable"`` and each failed check's error. ``/healthz`` stays the liveness probe: it
answers while the process serves, whatever its dependencies do."""

from __future__ import annotations

import asyncio
import datetime

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from health_check.base import HealthCheck
from health_check.checks import Database
from health_check.contrib.celery import Ping
from health_check.contrib.redis import Redis
from redis.asyncio import Redis as AsyncRedis

from .celery import app as celery_app

CHECK_TIMEOUT = datetime.timedelta(seconds=1)


class _Postgres(Database):
    timeout = CHECK_TIMEOUT


def _redis_client() -> AsyncRedis:
    seconds = CHECK_TIMEOUT.total_seconds()
    return AsyncRedis.from_url(settings.REDIS_URL, socket_connect_timeout=seconds, socket_timeout=seconds)


def checks() -> dict[str, HealthCheck]:
    redis = Redis(client_factory=_redis_client)
    redis.timeout = CHECK_TIMEOUT
    # The project's app (its broker); limit=1: the first worker's answer is enough (a ping otherwise
    # waits out its whole timeout).
    return {"postgres": _Postgres(), "redis": redis, "celery": Ping(app=celery_app, timeout=CHECK_TIMEOUT, limit=1)}


async def readyz(request: HttpRequest) -> JsonResponse:
    named = checks()
    results = await asyncio.gather(*(check.get_result() for check in named.values()))
    report = {name: ("ok" if r.error is None else str(r.error)) for name, r in zip(named, results, strict=True)}
    failed = [name for name, r in zip(named, results, strict=True) if r.error is not None]
    body = {"status": "unavailable" if failed else "ok", "checks": report}
    if failed:
        body["failed"] = failed
    return JsonResponse(body, status=503 if failed else 200)
