"""REST throttling: doors shut to guessing and flooding (issue 39; docs/acl.md "Threat model").

DRF's throttle classes, counted in Redis so that every web process shares one count per caller (DRF's
own ``SimpleRateThrottle`` keeps a list of timestamps in Django's cache: one process's memory here, and
a list as long as the rate). A fixed window per caller: one pipelined INCR and EXPIRE per request.

- ``anon``: requests with neither a token nor a session, by client address (counted by
  ``ApiTokenAuthentication``: DRF checks permissions before throttles);
- ``token``: API tokens, by token name; broker tokens are exempt, and so is every broker call
  (registration, heartbeats, unregistration: views that take ``IsBroker``), whoever makes it, since a
  throttled heartbeat would make a live broker look dead;
- ``operator``: logged-in dashboard users, by username;
- ``auth_failure``: a wrong or revoked token, by client address (counted by ``ApiTokenAuthentication``
  before it answers 401, so that tokens cannot be guessed at the API's speed).

Rates are ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` (env ``RMQHA_THROTTLE_<SCOPE>``, e.g. ``600/min``).
A throttled caller gets 429 with ``Retry-After``.
"""

from __future__ import annotations

import time

from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from . import redis as shared_redis

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """``"600/min"`` -> (600, 60); ValueError otherwise."""
    count, _, period = rate.partition("/")
    if not count.strip().isdigit() or not period or period.strip()[0] not in _PERIODS:
        raise ValueError(f"{rate!r}: a rate is <count>/<s|min|h|day>")
    return int(count), _PERIODS[period.strip()[0]]


def _rate(scope: str) -> tuple[int, int]:
    return parse_rate(api_settings.DEFAULT_THROTTLE_RATES[scope])


def count_and_check(scope: str, ident: str) -> float | None:
    """Count one request of ``ident`` in ``scope``'s current window: None if it may go on, else the
    seconds until the window ends."""
    limit, period = _rate(scope)
    now = time.time()
    window = int(now // period)
    key = shared_redis.key("throttle", scope, ident, str(window))
    pipe = shared_redis.sync_client().pipeline(transaction=False)
    pipe.incr(key)
    pipe.expire(key, period + 1)
    count, _ = pipe.execute()
    if count <= limit:
        return None
    return max(1.0, (window + 1) * period - now)


def client_address(request) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


class _WindowThrottle(BaseThrottle):
    scope = ""

    def __init__(self) -> None:
        self._wait: float | None = None

    def ident(self, request, view) -> str | None:
        """Who is counted; None: this throttle does not apply."""
        raise NotImplementedError

    def allow_request(self, request, view) -> bool:
        ident = self.ident(request, view)
        if ident is None:
            return True
        self._wait = count_and_check(self.scope, ident)
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait


def _token(request):
    from .auth import TokenPrincipal  # auth imports this module's failure counter

    return request.auth if isinstance(request.auth, TokenPrincipal) else None


def _broker_call(request, view) -> bool:
    from .auth import IsBroker
    from .models import TokenScope

    token = _token(request)
    if token is not None and token.scope == TokenScope.BROKER:
        return True
    return IsBroker in getattr(view, "permission_classes", ())


class TokenThrottle(_WindowThrottle):
    scope = "token"

    def ident(self, request, view) -> str | None:
        token = _token(request)
        if token is None or _broker_call(request, view):
            return None
        return token.name


class OperatorThrottle(_WindowThrottle):
    scope = "operator"

    def ident(self, request, view) -> str | None:
        if _token(request) is not None:
            return None
        user = getattr(request, "user", None)
        return user.get_username() if getattr(user, "is_authenticated", False) else None


def refuse_anonymous(request) -> None:
    """Count a request with neither a token nor a session from the request's address; raise Throttled
    (429) once the address is over its rate. Called by ``ApiTokenAuthentication``: DRF checks
    permissions before throttles, so a throttle class would never see an anonymous call refused 401."""
    wait = count_and_check("anon", client_address(request))
    if wait is not None:
        raise exceptions.Throttled(wait, "Too many anonymous requests from this address.")


def refuse_failed_authentication(request) -> None:
    """Count a failed token authentication from the request's address; raise Throttled (429) once the
    address is over its rate."""
    wait = count_and_check("auth_failure", client_address(request))
    if wait is not None:
        raise exceptions.Throttled(wait, "Too many failed authentications from this address.")


def check_rates() -> None:
    """At start (controlplane.apps): every configured rate parses, or the process stops with one line."""
    for scope, rate in api_settings.DEFAULT_THROTTLE_RATES.items():
        try:
            parse_rate(rate)
        except ValueError as exc:
            raise ImproperlyConfigured(f"throttle rate of {scope!r} (RMQHA_THROTTLE_{scope.upper()}): {exc}") from None
