"""Token authentication for brokers and tools (``Authorization: Bearer <token>``), and who counts as
an operator (``is_operator``: the one definition, used by REST, the dashboard and the audits page).

Valid tokens are cached in-process for a few seconds so that 1 Hz heartbeats from hundreds of
brokers do not each cost a Postgres read; a revoked token stops working within TOKEN_CACHE_SECONDS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from threading import Lock

from rest_framework import authentication, exceptions, permissions

from .models import ApiToken, TokenScope, hash_token

TOKEN_CACHE_SECONDS = 5.0
OPERATORS_GROUP = "operators"


@dataclass(frozen=True)
class TokenPrincipal:
    name: str
    scope: str
    cluster_name: str = ""
    is_authenticated: bool = True
    is_staff: bool = False

    @property
    def can_act_as_broker(self) -> bool:
        return self.scope in (TokenScope.BROKER, TokenScope.ADMIN)

    @property
    def is_admin(self) -> bool:
        return self.scope == TokenScope.ADMIN

    def allows_cluster(self, cluster_name: str) -> bool:
        return not self.cluster_name or self.cluster_name == cluster_name


_cache: dict[str, tuple[float, TokenPrincipal | None]] = {}
_cache_lock = Lock()


def principal_for(raw_token: str) -> TokenPrincipal | None:
    """The principal a raw token stands for, or None (unknown or revoked). Blocking: uses the ORM."""
    digest = hash_token(raw_token)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(digest)
    if hit is not None and hit[0] > now:
        return hit[1]
    token = ApiToken.objects.filter(key_hash=digest, revoked_at__isnull=True).first()
    principal = TokenPrincipal(token.name, token.scope, token.cluster_name) if token else None
    with _cache_lock:
        if len(_cache) > 10_000:
            _cache.clear()
        _cache[digest] = (now + TOKEN_CACHE_SECONDS, principal)
    return principal


def forget_cached_tokens() -> None:
    with _cache_lock:
        _cache.clear()


def bearer_token(header_value: str | None) -> str | None:
    if not header_value:
        return None
    scheme, _, value = header_value.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        raw = bearer_token(header)
        if raw is None:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        principal = principal_for(raw)
        if principal is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked token.")
        return principal, principal

    def authenticate_header(self, request) -> str:
        return self.keyword


def is_operator(principal) -> bool:
    """An operator may act (elect, isolate, administer topics and configs, start audits): an admin
    token, or a logged-in user who is a superuser or a member of the "operators" group."""
    if isinstance(principal, TokenPrincipal):
        return principal.is_admin
    if not getattr(principal, "is_authenticated", False):
        return False
    return bool(principal.is_superuser) or principal.groups.filter(name=OPERATORS_GROUP).exists()


def request_is_operator(request) -> bool:
    """``is_operator`` for the token or the session user behind a request."""
    return is_operator(request.auth if isinstance(request.auth, TokenPrincipal) else getattr(request, "user", None))


def who(request) -> str:
    """How the audit log and the controller's history name the caller of a request."""
    if isinstance(request.auth, TokenPrincipal):
        return f"token:{request.auth.name}"
    return f"user:{request.user.get_username()}" if getattr(request, "user", None) else "anonymous"


def _session_user(request):
    user = getattr(request, "user", None)
    if isinstance(user, TokenPrincipal):
        return None
    return user if user is not None and user.is_authenticated else None


class HasReadAccess(permissions.BasePermission):
    """Any valid token, or a logged-in dashboard user."""

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, TokenPrincipal) or _session_user(request) is not None


class IsBroker(permissions.BasePermission):
    """A broker (or admin) token: register, heartbeat, unregister."""

    message = "This call needs a broker or admin token."

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, TokenPrincipal) and request.auth.can_act_as_broker


class IsAdmin(permissions.BasePermission):
    """An operator (``is_operator``): topic administration, config updates, cleaning, audits."""

    message = "This call needs an admin token or an operator login."

    def has_permission(self, request, view) -> bool:
        return request_is_operator(request)


try:  # describe the bearer scheme in the OpenAPI schema
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class ApiTokenScheme(OpenApiAuthenticationExtension):
        target_class = "controlplane.auth.ApiTokenAuthentication"
        name = "bearerToken"

        def get_security_definition(self, auto_schema):
            return {"type": "http", "scheme": "bearer", "description": "API token (manage.py create_api_token)"}
except ImportError:  # pragma: no cover
    pass
