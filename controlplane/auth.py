"""Token authentication for brokers and tools (``Authorization: Bearer <token>``), who counts as
an operator (``is_operator``: the one definition, used by REST, the dashboard and the audits page),
and a token's cluster binding (``Caller.check``: the one definition, used by every REST endpoint and
websocket frame that names a cluster or a broker set).

Valid tokens are cached in-process for a few seconds so that 1 Hz heartbeats from hundreds of
brokers do not each cost a Postgres read; a revoked token stops working within TOKEN_CACHE_SECONDS.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

from rest_framework import authentication, exceptions, permissions, status

from mqrules.codes import ResponseCode

from . import throttling
from .errors import ApiError
from .models import ApiToken, TokenScope, hash_token
from .validation_drf import checked_param

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

    @property
    def caller(self) -> Caller:
        return Caller(f"token:{self.name}", self.cluster_name)


# --- the cluster binding ---------------------------------------------------------------------------
# A token may be bound to one cluster (ApiToken.cluster_name, docs/api.md): it then acts on and reads
# that cluster only. A request reaches another cluster when it names another clusterName, names a broker
# set the control plane knows in another cluster (the set's stored cluster counts, not the one the
# request claims), or targets every cluster (no cluster or set named where that means "all").

BrokerSetReader = Callable[[list[str]], Iterable[tuple[str, str]]]
_broker_set_readers: list[BrokerSetReader] = []


def register_broker_set_reader(reader: BrokerSetReader) -> None:
    """Where a sibling keeps broker sets: ``reader(names)`` yields (brokerName, clusterName) for those of
    ``names`` it knows. The nameserver and the controller register theirs when their app is ready (this
    floor may not import them), as they register their websocket frames."""
    if reader not in _broker_set_readers:
        _broker_set_readers.append(reader)


def broker_set_clusters(broker_names: Iterable[str]) -> dict[str, frozenset[str]]:
    """The clusters the control plane (nameserver and controller) knows each of ``broker_names`` in;
    a name known nowhere is absent. Blocking: the readers use the ORM."""
    names = sorted(set(broker_names))
    found: dict[str, set[str]] = {}
    for reader in _broker_set_readers:
        for name, cluster in reader(names):
            found.setdefault(name, set()).add(cluster)
    return {name: frozenset(clusters) for name, clusters in found.items()}


def binding_refusal(
    bound_cluster: str,
    clusters: Iterable[str | None] = (),
    known: Mapping[str, Collection[str]] | None = None,
    *,
    every_cluster: bool = False,
) -> str | None:
    """Why a token bound to ``bound_cluster`` may not make a request, or None when it may. ``clusters``:
    the clusterNames the request names (None or "" for none); ``known``: the clusters each broker set
    it names is known in (``broker_set_clusters``); ``every_cluster``: it targets every cluster."""
    if not bound_cluster:
        return None
    if every_cluster:
        return f"this token is bound to cluster {bound_cluster}: name that cluster or its broker sets"
    for cluster in clusters:
        if cluster and cluster != bound_cluster:
            return f"this token may not act on cluster {cluster}"
    for name, where in sorted((known or {}).items()):
        if any(cluster != bound_cluster for cluster in where):
            return f"this token may not act on broker set {name}: it belongs to another cluster"
    return None


@dataclass(frozen=True)
class Caller:
    """Who makes a request, as the operations shared by REST and the websocket see it: the name history
    rows and logs give it, and the cluster its token is bound to ("" for an unbound token or a
    dashboard login: both may act on every cluster). A listing that names no cluster shows a bound
    caller ``bound_cluster``'s entries only."""

    name: str
    bound_cluster: str = ""

    def check(
        self, *, clusters: Iterable[str | None] = (), broker_sets: Iterable[str | None] = (), every_cluster: bool = False
    ) -> frozenset[str]:
        """Refuse a request that reaches another cluster than the token's (``binding_refusal``) with
        ApiError 403 + 16 NO_PERMISSION; call it before anything changes. Returns the named broker sets
        the control plane knows (all in the token's cluster then). Looks nothing up for an unbound
        caller, nor when a named cluster is already refused; blocking otherwise (the ORM)."""
        if not self.bound_cluster:
            return frozenset()
        refusal = binding_refusal(self.bound_cluster, clusters, every_cluster=every_cluster)
        names = [n for n in broker_sets if n]
        known = broker_set_clusters(names) if refusal is None and names else {}
        refusal = refusal or binding_refusal(self.bound_cluster, known=known)
        if refusal is not None:
            raise ApiError(ResponseCode.NO_PERMISSION, refusal, status.HTTP_403_FORBIDDEN)
        return frozenset(known)


_cache: dict[str, tuple[float, TokenPrincipal | None]] = {}
_cache_lock = Lock()


def principal_for(raw_token: str) -> TokenPrincipal | None:
    """The principal a raw token stands for, or None (unknown or revoked). Blocking: uses the ORM."""
    digest = hash_token(raw_token)
    now = time.monotonic()
    hit = _cached(digest, now)
    return hit[0] if hit is not None else _load_principal(digest, now)


def _cached(digest: str, now: float) -> tuple[TokenPrincipal | None, float] | None:
    """The cached principal of a token's digest with the time its entry lapses, while it has not."""
    with _cache_lock:
        hit = _cache.get(digest)
    return (hit[1], hit[0]) if hit is not None and hit[0] > now else None


def _load_principal(digest: str, now: float) -> TokenPrincipal | None:
    token = ApiToken.objects.filter(key_hash=digest, revoked_at__isnull=True).first()
    principal = TokenPrincipal(token.name, token.scope, token.cluster_name) if token else None
    with _cache_lock:
        if len(_cache) > 10_000:
            _cache.clear()
        _cache[digest] = (now + TOKEN_CACHE_SECONDS, principal)
    return principal


def cached_principal(raw_token: str) -> tuple[TokenPrincipal | None, float] | None:
    """What ``principal_for`` would answer from this process's cache, with the monotonic time its
    entry expires, or None when it would have to ask the database (never blocks on it)."""
    return _cached(hash_token(raw_token), time.monotonic())


def refresh_principal(raw_token: str) -> None:
    """Read ``raw_token``'s principal from the database again (blocking), replacing the cached one."""
    _load_principal(hash_token(raw_token), time.monotonic())


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
            if not getattr(getattr(request._request, "user", None), "is_authenticated", False):
                throttling.refuse_anonymous(request)  # before the permission check's 401, or floods never count
            return None
        raw = bearer_token(header)
        if raw is None:
            throttling.refuse_failed_authentication(request)
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        principal = principal_for(raw)
        if principal is None:
            throttling.refuse_failed_authentication(request)  # guessing tokens: 429 past the address's rate
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
    return caller_of(request).name


def caller_of(request) -> Caller:
    """The token (with its cluster binding) or the session user behind a REST request."""
    if isinstance(request.auth, TokenPrincipal):
        return request.auth.caller
    return Caller(f"user:{request.user.get_username()}" if getattr(request, "user", None) else "anonymous")


def path_cluster(request, cluster: str) -> str:
    """A cluster named in a request's path: a name (else 400), and one the caller's token may reach
    (else 403 + 16, ``Caller.check``)."""
    checked_param("cluster", cluster)
    caller_of(request).check(clusters=[cluster])
    return cluster


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


def write_secret(path: Path, secret: str) -> None:
    """Write ``secret`` readable by the owner only: the mode is set at creation, never world-readable
    (an older file's mode is corrected). Secrets go to files like this one, never to stdout or logs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    path.chmod(0o600)
