"""Operator actions as JSON endpoints for the dashboard's buttons: session login, CSRF (Django's
middleware: the page sends X-CSRFToken), operators only; bad input is a 400 with field errors."""

from __future__ import annotations

import json
import logging

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_POST

from controlplane.operations import broker_admin, drill
from controlplane.operations.refused import Refused
from mqrules import validation as v

from . import acl_admin, actions, topic_admin
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


def _preview(data: dict) -> bool:
    """The ``preview`` flag of an action that can show what it would do first (absent: false)."""
    return data.get("preview") is not None and _bool_field(data, "preview")


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


@require_POST
@_operator_action
def change_static_topic(request: HttpRequest, topic: str) -> dict:
    return actions.change_static_topic(request.user.get_username(), topic, _body(request))


@require_POST
@_operator_action
def make_static(request: HttpRequest) -> dict:
    return actions.make_static(request.user.get_username(), _body(request))


MAX_CLEAN_IDS = 64


def _broker_ids(data: dict) -> frozenset[int] | None:
    raw = data.get("brokerIds")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_CLEAN_IDS or any(_BROKER_ID(i) is not None for i in raw):
        raise actions.ActionError("invalid input", {"brokerIds": [f"a list of at most {MAX_CLEAN_IDS} broker ids"]})
    return frozenset(raw)


@require_POST
@_operator_action
def clean(request: HttpRequest, broker_name: str) -> dict:
    """Clean broker metadata (the controller's cleanBrokerData): ``brokerIds`` (none: the whole set);
    ``preview``: what would be removed, or why the controller refuses."""
    data = _body(request)
    broker_ids = _broker_ids(data)
    if _preview(data):
        return actions.preview_clean(broker_name, broker_ids)
    return actions.clean(request.user.get_username(), broker_name, broker_ids)


@require_POST
@_operator_action
def update_topic(request: HttpRequest) -> dict:
    """Create or update a topic (REST's updateAndCreateTopic body); ``preview``: old -> new per broker set."""
    return topic_admin.update_topic(request.user.get_username(), _body(request))


@require_POST
@_operator_action
def delete_topic(request: HttpRequest, topic: str) -> dict:
    """Delete a topic everywhere or on ``brokerNames``; ``preview``: its queues, messages and consumer groups."""
    return topic_admin.delete_topic(request.user.get_username(), topic, _body(request))


def _acl_change(request: HttpRequest, cluster: str, change) -> dict:
    """An ACL change of ``cluster`` (dashboards/acl_admin.py); ``preview``: the service's dry run, the lockouts."""
    data = _body(request)
    return change(request.user.get_username(), cluster, data, _preview(data))


@require_POST
@_operator_action
def acl_create_user(request: HttpRequest, cluster: str) -> dict:
    return _acl_change(request, cluster, acl_admin.create_user)


@require_POST
@_operator_action
def acl_update_user(request: HttpRequest, cluster: str) -> dict:
    return _acl_change(request, cluster, acl_admin.update_user)


@require_POST
@_operator_action
def acl_delete_user(request: HttpRequest, cluster: str) -> dict:
    return _acl_change(request, cluster, acl_admin.delete_user)


@require_POST
@_operator_action
def acl_put_policy(request: HttpRequest, cluster: str) -> dict:
    return _acl_change(request, cluster, acl_admin.put_policy)


@require_POST
@_operator_action
def acl_delete_policy(request: HttpRequest, cluster: str) -> dict:
    return _acl_change(request, cluster, acl_admin.delete_policy)


def _operation(call):
    """An operation that writes and commits its own audit record (a change brokers carry out, a drill:
    it runs outside any transaction); its refusals as the dashboard's."""
    try:
        return call()
    except Refused as exc:
        raise actions.ActionError(exc.detail, exc.fields, exc.status) from exc


@require_POST
@_operator_action
def reset_offset(request: HttpRequest, group: str) -> dict:
    """Reset ``group``'s offsets on ``topic`` to ``timestampMs`` or ``offset`` (-1: the end); ``preview``:
    per queue, committed -> new and the messages re-consumed or skipped."""
    data = _body(request)
    preview = _preview(data)
    return _operation(
        lambda: broker_admin.reset_offset(
            request.user.get_username(),
            group,
            data.get("topic"),
            timestamp_ms=data.get("timestampMs"),
            offset=data.get("offset"),
            preview=preview,
        )
    )


@require_POST
@_operator_action
def broker_config(request: HttpRequest, broker_name: str, broker_id: int) -> dict:
    """Change dynamic keys of one broker (``updates``: key -> broker.conf text); ``preview``: old -> new."""
    data = _body(request)
    preview = _preview(data)
    return _operation(
        lambda: broker_admin.update_config(
            request.user.get_username(), broker_name, broker_id, data.get("updates"), preview=preview
        )
    )


@require_POST
@_operator_action
def drill_run(request: HttpRequest, broker_name: str) -> dict:
    """A failover drill of the set to ``brokerId`` (none: the best in-sync slave); ``preview``: who takes
    over and the data at risk. Run, it answers once the new master serves, with the measured RTO."""
    data = _body(request)
    broker_id = _int_field(data, "brokerId", required=False)
    if _preview(data):
        return _operation(lambda: drill.preview(broker_name, broker_id))
    done = _operation(lambda: drill.run(request.user.get_username(), broker_name, broker_id))
    return {**done, "ok": done["outcome"] == "ok"}
