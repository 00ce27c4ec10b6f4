"""The Messages, Dead letters and Clients pages (issue 40; docs/messages.md): a message found by topic and
key, unique key or id, its detail (properties, body preview, its trace per consumer group), a group's dead
letters resent after a preview, and the clients connected now. Every read and the resend go through the
services REST uses (controlplane/operations/messages.py, dlq.py; nameserver/broker_status.py), with their
checks: a refusal is shown with its field errors, never a 500. The resend is an operator's action (login,
CSRF, audited by dlq.resend before the brokers are asked)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_POST

from controlplane.operations import dlq, messages
from mqrules import validation as v
from nameserver import broker_status

from . import actions, selectors
from .action_views import _body, _operation, _operator_action
from .permissions import is_operator

SEARCH_FIELDS = ("topic", "key", "uniqueKey", "msgId")


def _clusters(request) -> tuple[list[str], str | None]:
    clusters = selectors.acl_clusters()
    cluster = request.GET.get("cluster") or (clusters[0] if clusters else None)
    if cluster is not None and cluster not in clusters:
        raise Http404(f"no cluster named {cluster!r}")
    return clusters, cluster


def _refusal(exc: messages.MessageError) -> dict:
    return {"status": exc.status, "detail": exc.detail, "fields": exc.fields or {}}


def _page(request, template: str, context: dict):
    return render(request, template, {"is_operator": is_operator(request.user), **context})


@login_required
def messages_page(request):
    """Search a cluster's messages by topic and key, topic and unique key, or message id (an offset id; with
    a topic, the client's message id too)."""
    clusters, cluster = _clusters(request)
    search = {f: request.GET.get(f, "").strip() for f in SEARCH_FIELDS}
    found, error = None, None
    if cluster is not None and any(search.values()):
        try:
            if search["msgId"]:
                view = messages.find(cluster, search["msgId"], 0, search["topic"] or None).view
                found = {"messages": [view], "truncated": False}
            else:
                plan = messages.plan(search["topic"], search["key"] or None, search["uniqueKey"] or None, None, None, None)
                found = messages.query(cluster, plan)
        except messages.MessageError as exc:
            error = _refusal(exc)
    return _page(
        request,
        "dashboards/messages.html",
        {"clusters": clusters, "cluster": cluster, "search": search, "found": found, "error": error},
    )


@login_required
def message_page(request, cluster: str, msg_id: str):
    """One message: its fields, properties, body preview, and what each consumer group did with it."""
    if v.name(cluster) is not None:
        raise Http404("no such cluster")
    detail, trace, error = None, None, None
    try:
        detail = messages.detailed(messages.find_by_id(cluster, msg_id))
        trace = messages.trace(cluster, msg_id)
    except messages.MessageError as exc:
        error = _refusal(exc)
    body_url = reverse("messages:body", args=[cluster, msg_id])
    groups = sorted((trace or {}).get("groups", {}).items())
    context = {"cluster": cluster, "msg_id": msg_id, "m": detail, "groups": groups, "error": error, "body_url": body_url}
    return _page(request, "dashboards/message.html", context)


def _int_param(request, name: str, default: int, high: int) -> int:
    raw = request.GET.get(name, "")
    value = v.query_integer(raw) if raw else default
    return value if value is not None and 0 <= value <= high else default


@login_required
@ensure_csrf_cookie
def dead_letters_page(request):
    """A consumer group's dead letters, per broker set; operators select and resend them after a preview."""
    clusters, cluster = _clusters(request)
    group = request.GET.get("group", "").strip()
    listed, error = None, None
    if cluster is not None and group:
        try:
            listed = dlq.dead_letters(
                cluster, group, _int_param(request, "offset", 0, v.MAX_ID), _int_param(request, "limit", 100, 500)
            )
        except messages.MessageError as exc:
            error = _refusal(exc)
    operator = is_operator(request.user)
    context = {
        "clusters": clusters,
        "cluster": cluster,
        "group": group,
        "listed": listed,
        "error": error,
        "resend_url": reverse("dashboards:dlq-resend", args=[cluster, group]) if operator and listed else None,
        "export_url": reverse("dashboards:dlq-export", args=[cluster, group]) if listed else None,
    }
    return _page(request, "dashboards/dlq.html", context)


@login_required
def dead_letters_export(request, cluster: str, group: str):
    try:
        lines = dlq.export_lines(cluster, group)
    except messages.MessageError as exc:
        return HttpResponse(exc.detail, status=exc.status, content_type="text/plain")
    response = HttpResponse("".join(lines).encode(), content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="dlq-{cluster}-{group}.jsonl"'
    return response


@require_POST
@_operator_action
def dlq_resend(request: HttpRequest, cluster: str, group: str) -> dict:
    """``{"msgIds": [...] | "all": true, "requestId", "preview"}``: the preview is dlq.resend's dry run."""
    data = _body(request)
    preview = data.get("preview") is True
    msg_ids = data.get("msgIds")
    if msg_ids is not None and (not isinstance(msg_ids, list) or not all(isinstance(i, str) for i in msg_ids)):
        raise actions.ActionError("invalid input", {"msgIds": ["a list of message ids"]})
    request_id = data.get("requestId")
    if request_id is not None and v.matching(r"^[0-9A-Fa-f]{32}$", "32 hex digits", 32)(request_id) is not None:
        raise actions.ActionError("invalid input", {"requestId": ["32 hex digits"]})
    answer = _operation(
        lambda: dlq.resend(
            request.user.get_username(),
            cluster,
            group,
            msg_ids,
            every=data.get("all") is True,
            request_id=request_id,
            dry_run=preview,
        )
    )
    return {"ok": True, "result": "preview" if preview else "ok", **answer}


@login_required
def clients_page(request):
    """The producers and consumers connected now (of a group, of a topic), from the brokers' reports."""
    clusters, cluster = _clusters(request)
    group = request.GET.get("group", "").strip() or None
    topic = request.GET.get("topic", "").strip() or None
    bad = {k: [p] for k, val in (("group", group), ("topic", topic)) if val is not None and (p := v.name(val)) is not None}
    rows = broker_status.connected_clients(cluster, group, topic) if cluster is not None and not bad else None
    context = {"clusters": clusters, "cluster": cluster, "group": group or "", "topic": topic or "", "rows": rows, "bad": bad}
    return _page(request, "dashboards/clients.html", context)
