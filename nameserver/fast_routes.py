"""The REST route's fast path: ``GET /api/v1/nameserver/routes/<topic>`` answered on the event loop.

Through Django, every REST request crosses into the process's one thread for synchronous code (a
sync-only middleware, DRF), the thread the brokers' websocket heartbeats use for the database too:
under thousands of heartbeats a second a route waited its turn there (p99 over 200 ms against 14 ms on
the remoting endpoint, bench/heartbeats.py). Clients poll routes every 30 s each, and almost every
answer is bytes this process already rendered at the registry's current version.

So this ASGI wrapper answers a route itself when everything it needs is at hand without blocking: a
bearer token this process verified within TOKEN_CACHE_SECONDS (controlplane/auth.py), a topic name
the REST rules accept, and the route's JSON rendered at the version Redis holds (one async GET,
nameserver/route_cache.py). It answers with the headers Django's own answer carried (learnt from the
last route Django answered with 200), so both paths answer alike byte for byte but for ``date``.
Anything else (no or unknown token, a session login, a bad name, a route not rendered yet, an error)
goes to Django unchanged. A token whose cache entry is about to lapse is read again in the background
(on a worker thread), so a steady client does not fall back to Django every few seconds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host
from django.urls import NoReverseMatch, reverse

from controlplane import auth
from mqrules import validation

from . import route_cache, selectors

log = logging.getLogger(__name__)

REFRESH_AHEAD_S = 2.0  # a cached token this close to lapsing is read again in the background
_SKIPPED_HEADERS = frozenset({b"content-length", b"date", b"server", b"set-cookie"})


class FastRoutes:
    """Wraps the HTTP ASGI app (Django)."""

    def __init__(self, app):
        self.app = app
        self.headers: list[tuple[bytes, bytes]] | None = None  # Django's answer to a route, but its length
        self._refreshing: set[str] = set()
        self._tasks: set[asyncio.Task] = set()

    async def __call__(self, scope, receive, send):
        topic = route_topic(scope.get("path", "")) if scope["type"] == "http" and scope["method"] == "GET" else None
        if topic is None:
            return await self.app(scope, receive, send)
        body = None
        if self.headers is not None:
            try:
                body = await self._cached_body(scope, topic)
            except Exception:  # noqa: BLE001 (Redis down, say: Django answers, and says why)
                log.debug("route fast path not taken", exc_info=True)
        if body is None:
            bearer = auth.bearer_token(_header(scope, b"authorization")) is not None  # (a session's answer varies)
            return await self.app(scope, receive, self._learning(send) if bearer else send)
        await send(
            {"type": "http.response.start", "status": 200, "headers": [*self.headers, (b"content-length", b"%d" % len(body))]}
        )
        await send({"type": "http.response.body", "body": body})

    async def _cached_body(self, scope, topic: str) -> bytes | None:
        raw = auth.bearer_token(_header(scope, b"authorization"))
        if raw is None or validation.name(topic) is not None or not _allowed_host(_header(scope, b"host")):
            return None
        hit = auth.cached_principal(raw)
        if hit is None or hit[0] is None:
            return None
        if hit[1] - time.monotonic() < REFRESH_AHEAD_S:
            self._refresh_soon(raw)
        version = await route_cache.current_version_async()
        return None if version is None else selectors.cached_route_json(topic, version)

    def _refresh_soon(self, raw: str) -> None:
        if raw in self._refreshing:
            return
        self._refreshing.add(raw)
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(_refresh, raw))
        self._tasks.add(task)
        task.add_done_callback(lambda t: (self._tasks.discard(t), self._refreshing.discard(raw)))

    def _learning(self, send):
        async def learn(message):
            if message["type"] == "http.response.start" and message["status"] == 200:
                self.headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in _SKIPPED_HEADERS]
            await send(message)

        return learn


@functools.cache
def _route_prefix() -> str | None:
    """Where the URLconf serves routes (nameserver/urls.py), up to the topic; None without the
    nameserver role."""
    try:
        return reverse("nameserver:route", kwargs={"topic": "T"})[:-1]
    except NoReverseMatch:
        return None


def route_topic(path: str) -> str | None:
    """The topic of a route's path, as the URLconf's ``<str:topic>`` takes it; None for another path."""
    prefix = _route_prefix()
    if prefix is None or not path.startswith(prefix):
        return None
    topic = path[len(prefix) :]
    return topic if topic and "/" not in topic else None


def _refresh(raw: str) -> None:
    try:
        auth.refresh_principal(raw)
    finally:
        close_old_connections()


def _allowed_host(host: str | None) -> bool:
    """Django's ALLOWED_HOSTS check (HttpRequest.get_host): a request it would refuse goes to it."""
    if not host:
        return False
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None
