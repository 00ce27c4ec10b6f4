"""Operator actions as JSON endpoints for the dashboard's buttons: session login, CSRF (Django's
middleware: the page sends X-CSRFToken), operators only; bad input is a 400 with field errors."""

from __future__ import annotations

import json
import logging

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_POST

from controlplane import validation as v

from . import actions
from .permissions import is_operator

log = logging.getLogger(__name__)


def _body(request: HttpRequest) -> dict:
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError) as exc:
        raise actions.ActionError("the body must be a JSON object") from exc
    if not isinstance(data, dict):
        raise actions.ActionError("the body must be a JSON object")
    return data


_BROKER_ID = v.integer()


def _field(data: dict, name: str, check: v.Check, *, required: bool = True):
    value = data.get(name)
    if value is None and not required:
        return None
    if (message := check(value)) is not None:
        raise actions.ActionError("invalid input", {name: [message]})
    return value


def _int_field(data: dict, name: str, *, required: bool) -> int | None:
    return _field(data, name, _BROKER_ID, required=required)


def _bool_field(data: dict, name: str) -> bool:
    return _field(data, name, v.boolean)


def _operator_action(handler):
    @login_required
    def view(request: HttpRequest, *args, **kwargs):
        if not is_operator(request.user):
            return JsonResponse({"detail": "operators only"}, status=403)
        try:
            return JsonResponse(handler(request, *args, **kwargs))
        except actions.ActionError as exc:
            return JsonResponse({"detail": exc.detail, **({"fields": exc.fields} if exc.fields else {})}, status=exc.status)
        except Exception:  # e.g. the audit record could not be written: the action was rolled back with it
            log.exception("operator action %s on %s failed", handler.__name__, kwargs or args)
            return JsonResponse({"detail": "internal error, nothing was changed; see the server log"}, status=500)

    view.__name__ = handler.__name__
    return view


@require_GET
@ensure_csrf_cookie
@_operator_action
def elect_preview(request: HttpRequest, broker_name: str) -> dict:
    raw = request.GET.get("brokerId", "")
    number = raw.isascii() and raw.isdigit() and len(raw) <= 19
    broker_id = _field({"brokerId": int(raw) if number else raw}, "brokerId", _BROKER_ID) if raw else None
    return actions.preview_elect(broker_name, broker_id).as_dict()


@require_POST
@_operator_action
def elect(request: HttpRequest, broker_name: str) -> dict:
    data = _body(request)
    return actions.elect(request.user.get_username(), broker_name, _int_field(data, "brokerId", required=False))


@require_POST
@_operator_action
def isolate(request: HttpRequest, broker_name: str) -> dict:
    data = _body(request)
    broker_id = _int_field(data, "brokerId", required=True)
    return actions.isolate(request.user.get_username(), broker_name, broker_id, _bool_field(data, "isolated"))


@require_POST
@_operator_action
def write_perm(request: HttpRequest, broker_name: str) -> dict:
    return actions.set_write_perm(request.user.get_username(), broker_name, _bool_field(_body(request), "writable"))


@require_POST
@_operator_action
def migrate_static_topic(request: HttpRequest, topic: str) -> dict:
    return actions.migrate_static_topic(request.user.get_username(), topic, _body(request))
