"""The dashboard's pages: server-rendered, login required; reads come from ``dashboards.selectors``.

A viewer sees everything; operators (members of the Django group "operators", or superusers) also get
the action buttons, whose JSON endpoints live in ``action_views.py``. Live changes reach the pages over
the ``/ws/dashboard/`` websocket (``dashboards.live``), never by polling.
"""

from __future__ import annotations

from collections import Counter
from functools import wraps
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie

from controlplane.models import OperatorAction

from . import selectors
from .permissions import is_operator

HISTORY_MINUTES = 15
AUDIT_PAGE_SIZE = 50


def _page(request, template: str, context: dict):
    return render(request, template, {"is_operator": is_operator(request.user), **context})


def _group_url():
    """brokerName -> the group page's URL, reversed once: the overview links to 1,000 groups."""
    marker = "__broker_name__"
    pattern = reverse("dashboards:group", args=[marker])
    return lambda broker_name: pattern.replace(marker, quote(broker_name, safe=""))


def _json_login_required(view):
    """For the page's JSON reads: a 403 with a detail instead of a redirect to the login form."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return JsonResponse({"detail": "log in to read the dashboard"}, status=403)
        return view(request, *args, **kwargs)

    return wrapper


@login_required
def overview(request):
    clusters = selectors.overview()
    url = _group_url()
    health: Counter[str] = Counter()
    for cluster in clusters:
        for group in cluster["groups"]:
            group["url"] = url(group["brokerName"])
            health[group["health"]] += 1
    return _page(
        request,
        "dashboards/overview.html",
        {
            "clusters": clusters,
            "health": {"ok": health["ok"], "warn": health["warn"], "bad": health["bad"]},
            "group_count": sum(health.values()),
        },
    )


@login_required
def group(request, broker_name: str):
    detail = selectors.group_detail(broker_name)
    if detail is None:
        raise Http404(f"no replica group named {broker_name!r}")
    operator = is_operator(request.user)
    # What the page's script needs: where to read history and send actions, and the state it starts from.
    page = {
        "brokerName": broker_name,
        "controllerManaged": detail.get("controllerManaged", True),
        "historyUrl": reverse("dashboards:water-levels", args=[broker_name]),
        "historyMinutes": HISTORY_MINUTES,
        "state": {
            key: detail.get(key)
            for key in ("masterBrokerId", "masterAddress", "masterEpoch", "syncStateSet", "syncStateSetEpoch")
        },
        "epochs": [e["epoch"] for e in detail["epochs"]],
        "actions": {
            "electPreview": reverse("dashboards:elect-preview", args=[broker_name]),
            "elect": reverse("dashboards:elect", args=[broker_name]),
            "isolate": reverse("dashboards:isolate", args=[broker_name]),
            "writePerm": reverse("dashboards:write-perm", args=[broker_name]),
        }
        if operator
        else None,
    }
    return render(request, "dashboards/group.html", {"group": detail, "page": page, "is_operator": operator})


@_json_login_required
def water_levels(request, broker_name: str):
    """The chart's history; live points then come over the websocket."""
    return JsonResponse(
        {
            "brokerName": broker_name,
            "minutes": HISTORY_MINUTES,
            "samples": selectors.water_history(broker_name, minutes=HISTORY_MINUTES),
        }
    )


@login_required
def brokers(request):
    rows = selectors.brokers()
    url = _group_url()
    for row in rows:
        row["url"] = url(row["brokerName"])
    return _page(request, "dashboards/brokers.html", {"brokers": rows})


@login_required
def topics(request):
    topics = selectors.topics()
    for topic in topics:
        # One row per broker set with its queues: the template then never searches a list per row
        # (a topic spread over 1,000 sets would cost a million lookups).
        route = topic["route"]
        if route is not None:
            queues = {q["brokerName"]: q for q in route["queueDatas"]}
            topic["rows"] = [{"broker": b, "queue": queues.get(b["brokerName"])} for b in route["brokerDatas"]]
    return _page(request, "dashboards/topics.html", {"topics": topics})


@login_required
@ensure_csrf_cookie
def static_topics(request):
    """Static topics: each logical queue's segments; operators preview and apply moves, drains and
    scale-outs (the same service as REST, audited)."""
    return _page(request, "dashboards/static_topics.html", selectors.static_topics_view())


@login_required
def config(request):
    configs = selectors.configs()
    sections = [(name, sorted(configs.get(name, {}).items())) for name in ("controller", "nameserver")]
    return _page(request, "dashboards/config.html", {"sections": sections})


@login_required
def audit(request):
    search = {field: request.GET.get(field, "").replace("\x00", "").strip() for field in ("actor", "action", "broker")}
    actions = OperatorAction.objects.all()
    if search["actor"]:
        actions = actions.filter(actor__icontains=search["actor"])
    if search["action"]:
        actions = actions.filter(action=search["action"])
    if search["broker"]:
        actions = actions.filter(broker_name__icontains=search["broker"])
    page = Paginator(actions, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    query = "&".join(f"{k}={quote(v)}" for k, v in search.items() if v)
    return _page(
        request,
        "dashboards/audit.html",
        {
            "page": page,
            "search": search,
            "query": query,
            "known_actions": OperatorAction.objects.order_by("action").values_list("action", flat=True).distinct(),
        },
    )
