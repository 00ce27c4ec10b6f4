"""Writing the operator audit log (controlplane.models.OperatorAction). One way in: every operator
action (dashboard, admin REST, Celery on an operator's behalf) calls ``record``, inside the
transaction that makes the change, so that the action and its record commit together or not at all.

What an operator asked can be anything a client sends (NUL characters, lone UTF-16 surrogates, NaN,
megabytes): ``record`` stores a faithful, bounded rendering of it (``storable``, ``text``), never
fails on content, and the admin REST calls go through ``AuditMiddleware``, which runs the view and
the record in one transaction."""

from __future__ import annotations

import json
import logging
import math

from django.db import transaction
from django.http import JsonResponse
from django.urls import Resolver404, resolve

from mqrules import validation
from mqrules.codes import ResponseCode
from mqrules.validation import escaped

from .auth import TokenPrincipal, bearer_token, is_operator, principal_for
from .errors import error_body
from .models import OperatorAction

log = logging.getLogger(__name__)

MAX_PARAMS_CHARS = 4000  # a rendering of what was asked, at most this many characters of JSON
MAX_PATH_CHARS = 2000
_FIELD_LIMITS = {f.name: f.max_length for f in OperatorAction._meta.get_fields() if getattr(f, "max_length", None)}


def text(value: object, limit: int | None = None) -> str:
    """``value`` as text Postgres can store (``validation.escaped``), cut to ``limit`` characters
    with a trailing ``…`` when longer."""
    s = escaped(value if isinstance(value, str) else str(value))
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


def storable(value: object, limit: int = MAX_PARAMS_CHARS) -> bool:
    """Whether a JSON value can go into a jsonb column as it is: finite numbers, strings without NUL
    or lone surrogates, and at most ``limit`` characters of JSON."""
    try:
        if not _clean(value):
            return False
        return len(json.dumps(value, allow_nan=False, ensure_ascii=False)) <= limit
    except (ValueError, TypeError, RecursionError):
        return False


def _clean(value: object) -> bool:
    if isinstance(value, str):
        return validation.storable(value) is None
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_clean(k) and _clean(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_clean(v) for v in value)
    return True


def _params(value: dict | None) -> dict:
    if not value:
        return {}
    if storable(value, 4 * MAX_PARAMS_CHARS):  # room for request_params' own bounded parts
        return value
    return {"rendered": text(_render(value), MAX_PARAMS_CHARS)}


def _render(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, RecursionError):
        return repr(value)


def record(
    actor: str,
    action: str,
    *,
    cluster_name: str = "",
    broker_name: str = "",
    broker_id: int | None = None,
    params: dict | None = None,
    before: dict | None = None,
    after: dict | None = None,
    result: str = "ok",
    detail: str = "",
) -> OperatorAction:
    """One audit record. Call it inside the transaction that makes the change (the admin REST
    middleware and the dashboard's actions do); the strings are bounded to their columns."""
    return OperatorAction.objects.create(
        actor=text(actor, _FIELD_LIMITS["actor"]),
        action=text(action, _FIELD_LIMITS["action"]),
        cluster_name=text(cluster_name, _FIELD_LIMITS["cluster_name"]),
        broker_name=text(broker_name, _FIELD_LIMITS["broker_name"]),
        broker_id=broker_id if broker_id is None or abs(broker_id) < 2**63 else None,
        params=_params(params),
        before=_params(before),
        after=_params(after),
        result=text(result, _FIELD_LIMITS["result"]),
        detail=text(detail, MAX_PARAMS_CHARS),
    )


def outside_transactions(what: str) -> None:
    """Refuse to start ``what`` inside a transaction: an operation whose record must commit before it
    acts (brokers carry it out, or it commits changes of its own meanwhile) cannot share one."""
    if transaction.get_connection().in_atomic_block:
        raise RuntimeError(f"{what} must not run inside a transaction: its audit record commits first")


def complete(record_id: int, *, result: str, after: dict | None = None, detail: str = "") -> None:
    """Write the outcome into a record committed before a change that brokers carry out (it cannot
    share their transaction: controlplane/operations/broker_admin.py)."""
    OperatorAction.objects.filter(pk=record_id).update(
        result=text(result, _FIELD_LIMITS["result"]), after=_params(after), detail=text(detail, MAX_PARAMS_CHARS)
    )


# The broker protocol (brokers' own calls, also allowed to admin tokens) is not an operator action.
BROKER_PROTOCOL_SUFFIXES = (
    "/register",
    "/unregister",
    "/heartbeat",
    "/apply-broker-id",
    "/alter-sync-state-set",
    "/offset-events",
)
WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")


# Fields whose values are secrets (an ACL user's secret key: ``password`` as RocketMQ's REST names it,
# ``secretKey`` as the snapshot does): never stored in the audit log, at any depth, in a body or a query.
SECRET_FIELDS = frozenset({"password", "secretkey", "secret_key", "accesssecret"})
REDACTED = "<redacted>"


def redacted(value: object) -> object:
    """``value`` with the value of every secret field (``SECRET_FIELDS``, any case) replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and k.lower() in SECRET_FIELDS else redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


def _names_a_secret(text_: str) -> bool:
    lowered = text_.lower()
    return any(name in lowered for name in SECRET_FIELDS)


def request_params(body: bytes, query: dict[str, list[str]], path: str, path_shown: str) -> dict:
    """What an admin REST call asked, as the audit log keeps it: the JSON body's object as sent when
    it can be stored as it is; otherwise the body's text (escaped, cut at MAX_PARAMS_CHARS, with its
    size); the query parameters under ``query``; the whole path when the action shows it cut."""
    params: dict = {}
    try:
        parsed = json.loads(body) if body else {}
    except (ValueError, RecursionError):
        parsed = None
    parsed = redacted(parsed)
    if isinstance(parsed, dict) and storable(parsed):
        params.update(parsed)
    elif parsed is not None and not isinstance(parsed, dict) and storable(parsed):
        params["body"] = parsed
    elif body:
        shown = text(body.decode("utf-8", "backslashreplace"), MAX_PARAMS_CHARS)
        if _names_a_secret(shown):  # a body that is no JSON object may still carry a secret: not kept
            shown = REDACTED
        params.update(raw=shown, bytes=len(body), truncated=len(body) > len(shown) or shown.endswith("…"))
    if query:
        query = {k: [REDACTED] * len(vs) if k.lower() in SECRET_FIELDS else vs for k, vs in query.items()}
        rendered = {text(k, 200): [text(v, 500) for v in vs] for k, vs in query.items()}
        params["query"] = rendered if storable(rendered) else {"rendered": text(_render(rendered), MAX_PARAMS_CHARS)}
    if path_shown != path:
        params["path"] = text(path, MAX_PATH_CHARS)
    return params


def operator_of(request) -> str | None:
    """How the audit log names the operator behind a state-changing /api/ call (an admin token or a
    logged-in operator), or None when the call is no operator action (a broker's, a read, anonymous)."""
    if request.method not in WRITE_METHODS or not request.path.startswith("/api/"):
        return None
    if request.path.rstrip("/").endswith(BROKER_PROTOCOL_SUFFIXES):
        return None
    raw = bearer_token(request.META.get("HTTP_AUTHORIZATION"))
    if raw is not None:
        principal = principal_for(raw)
        return f"token:{principal.name}" if isinstance(principal, TokenPrincipal) and principal.is_admin else None
    if request.META.get("HTTP_AUTHORIZATION"):
        return None  # a malformed header: authentication refuses the call
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "is_authenticated", False) and is_operator(user):
        return f"user:{user.get_username()}"
    return None


def _self_audited(request) -> bool:
    """A view that records its own audit entry (``self_audited = True``): a change carried out by
    brokers, whose record must commit before they are asked, outside any transaction of ours."""
    try:
        func = resolve(request.path_info).func
    except Resolver404:
        return False
    view_class = getattr(func, "cls", None) or getattr(func, "view_class", None)
    return bool(getattr(view_class, "self_audited", False))


class AuditMiddleware:
    """Runs every state-changing REST call of an operator (an admin token or an operator's login) and
    its audit record in one transaction: who, what (method and path), what was asked (body and query,
    ``request_params``), the HTTP status. The record is written before the transaction commits, so
    an answer is only ever sent for a change that is recorded; if the record cannot be written the
    change is rolled back and the caller gets a 500 that says nothing changed. A view that answers
    5xx has its changes rolled back as well (the record of that failure is written on its own).
    Dashboard actions record themselves the same way (dashboards/actions.py)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        actor = operator_of(request)
        if actor is None or _self_audited(request):
            return self.get_response(request)
        body = request.body  # read before the view consumes the stream (too large: Django's 400 handler)
        action = text(f"{request.method} {request.path}", _FIELD_LIMITS["action"])
        params = request_params(body, dict(request.GET.lists()), request.path, action.partition(" ")[2])
        failed = None
        try:
            with transaction.atomic():
                response = self.get_response(request)
                if response.status_code >= 500:
                    transaction.set_rollback(True)
                    failed = response
                else:
                    self._record(request, actor, action, params, response)
        except Exception:
            log.exception("the audit record of %s %s could not be written; the change was rolled back", actor, action)
            detail = "The operator audit log could not be written, so nothing was changed; see the server log."
            return JsonResponse(error_body(ResponseCode.SYSTEM_ERROR, detail), status=500)
        if failed is not None:
            try:
                self._record(request, actor, action, params, failed)
            except Exception:
                log.exception("the audit record of the failed call %s %s could not be written", actor, action)
        return response

    @staticmethod
    def _record(request, actor: str, action: str, params: dict, response) -> None:
        kwargs = getattr(request, "resolver_match", None)
        kwargs = kwargs.kwargs if kwargs is not None else {}
        status = response.status_code
        record(
            actor,
            action,
            params=params,
            broker_name=str(kwargs.get("broker_name") or params.get("brokerName") or ""),
            cluster_name=str(params.get("clusterName") or ""),
            result="ok" if status < 400 else f"http {status}",
            detail=response.content[:500].decode(errors="replace") if status >= 400 and not response.streaming else "",
        )
