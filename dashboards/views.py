"""The dashboard's pages: server-rendered, login required; reads come from ``dashboards.selectors``.

A viewer sees everything; operators (members of the Django group "operators", or superusers) also get
the action buttons, whose JSON endpoints live in ``action_views.py``. Live changes of the controller
state and water levels reach the pages over the ``/ws/dashboard/`` websocket (``dashboards.live``),
never by polling; only a consumer group's lag chart polls (``consumer_progress``): brokers report
their offsets on a timer, and the page asks at that pace.
"""

from __future__ import annotations

import time
from collections import Counter
from functools import wraps
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import ensure_csrf_cookie

from controlplane.controller import selectors as ctl_selectors
from controlplane.models import OperatorAction
from mqrules.topic_attributes import TOPIC_MESSAGE_TYPES
from nameserver.acl_serializers import ACTIONS, DECISIONS, USER_STATUSES, USER_TYPES
from nameserver.core.perm import Perm

from . import selectors
from .permissions import is_operator

HISTORY_MINUTES = 15
AUDIT_PAGE_SIZE = 50
CONSUMERS_PAGE_SIZE = 1000
PROGRESS_POLL_MS = 2000  # the lag chart asks for the group's progress this often
PERM_CHOICES = [
    (int(Perm.READ | Perm.WRITE), "rw (read and write)"),
    (int(Perm.READ), "r- (read only)"),
    (int(Perm.WRITE), "-w (write only)"),
    (0, "-- (neither)"),
]


def _page(request, template: str, context: dict):
    return render(request, template, {"is_operator": is_operator(request.user), **context})


def _group_url():
    """brokerName -> the group page's URL, reversed once: the overview links to 1,000 groups."""
    marker = "__broker_name__"
    pattern = reverse("dashboards:group", args=[marker])
    return lambda broker_name: pattern.replace(marker, quote(broker_name, safe=""))


def _broker_url():
    """(brokerName, brokerId) -> the broker page's URL, reversed once."""
    marker = "__broker_name__"
    head = reverse("dashboards:broker", args=[marker, 0]).removesuffix("0/")
    return lambda broker_name, broker_id: head.replace(marker, quote(broker_name, safe="")) + f"{int(broker_id)}/"


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
            for key in ("masterBrokerId", "masterAddress", "masterEpoch", "syncStateSet", "syncStateSetEpoch", "actingMaster")
        },
        "epochs": [e["epoch"] for e in detail["epochs"]],
        "actions": {
            "electPreview": reverse("dashboards:elect-preview", args=[broker_name]),
            "elect": reverse("dashboards:elect", args=[broker_name]),
            "isolate": reverse("dashboards:isolate", args=[broker_name]),
            "writePerm": reverse("dashboards:write-perm", args=[broker_name]),
            "clean": reverse("dashboards:clean", args=[broker_name]),
            "drill": reverse("dashboards:drill", args=[broker_name]),
        }
        if operator
        else None,
    }
    managed = detail.get("controllerManaged", True)
    return render(
        request,
        "dashboards/group.html",
        {
            "group": detail,
            "page": page,
            "is_operator": operator,
            "headroom": selectors.headroom(broker_name) if managed else None,
            "drills": selectors.drills(broker_name) if managed else [],
        },
    )


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
    url, status_url = _group_url(), _broker_url()
    for row in rows:
        row["url"] = url(row["brokerName"])
        # A broker reports its status under the id it registers with at the nameserver.
        if row["nameserverId"] is not None:
            row["statusUrl"] = status_url(row["brokerName"], row["nameserverId"])
    return _page(request, "dashboards/brokers.html", {"brokers": rows})


def _route_rows(route: dict | None) -> list[dict] | None:
    # One row per broker set with its queues: the template then never searches a list per row
    # (a topic spread over 1,000 sets would cost a million lookups).
    if route is None:
        return None
    queues = {q["brokerName"]: q for q in route["queueDatas"]}
    return [{"broker": b, "queue": queues.get(b["brokerName"])} for b in route["brokerDatas"]]


def _topic_admin_context(request) -> dict:
    """What the create/update form offers operators: clusters, broker sets, message types."""
    if not is_operator(request.user):
        return {}
    return {"targets": selectors.topic_targets(), "message_types": TOPIC_MESSAGE_TYPES, "perm_choices": PERM_CHOICES}


@login_required
@ensure_csrf_cookie
def topics(request):
    topics = selectors.topics()
    url = _topic_url()
    for topic in topics:
        topic["rows"] = _route_rows(topic["route"])
        topic["url"] = url(topic["topic"])
    return _page(request, "dashboards/topics.html", {"topics": topics, **_topic_admin_context(request)})


def _topic_url():
    marker = "__topic__"
    pattern = reverse("dashboards:topic", args=[marker])
    return lambda topic: pattern.replace(marker, quote(topic, safe=""))


@login_required
@ensure_csrf_cookie
def topic(request, topic: str):
    """One topic: its route, its queue data per broker set, each queue's min and max offset as the
    brokers report them, the consumer groups reading it; operators edit or delete it from here."""
    detail = selectors.topic_detail(topic)
    if detail is None:
        raise Http404(f"no topic named {topic!r}")
    detail["rows"] = _route_rows(detail["route"])
    consumer_url = _consumer_url()
    for g in detail["consumerGroups"]:
        g["url"] = consumer_url(g["group"])
    return _page(request, "dashboards/topic.html", {"t": detail, **_topic_admin_context(request)})


@login_required
def controller(request):
    """What ``controller/metadata`` answers, and every controller-managed replica group's master,
    epochs and SyncStateSet."""
    groups = selectors.controller_groups()
    url = _group_url()
    for g in groups:
        g["url"] = url(g["brokerName"])
        g["aliveCount"] = sum(1 for m in g["members"] if m["alive"])
    return _page(
        request,
        "dashboards/controller.html",
        {"metadata": ctl_selectors.metadata(request.get_host()), "groups": groups},
    )


@login_required
@ensure_csrf_cookie
def static_topics(request):
    """Static topics: each logical queue's segments; operators preview and apply moves, drains and
    scale-outs (the same service as REST, audited)."""
    return _page(request, "dashboards/static_topics.html", selectors.static_topics_view())


def _consumer_url():
    marker = "__group__"
    pattern = reverse("dashboards:consumer-group", args=[marker])
    return lambda group: pattern.replace(marker, quote(group, safe=""))


@login_required
def consumers(request):
    """Every consumer group the brokers report: topics, queues, total lag; searchable, sortable. One
    read of the reports and rows built in Python (1,000 groups in well under 300 ms)."""
    search = request.GET.get("q", "").replace("\x00", "").strip()[:255]
    sort = request.GET.get("sort", "group")
    if sort not in selectors.CONSUMER_SORTS:
        sort = "group"
    groups = selectors.consumer_groups(search, sort)
    page = Paginator(groups, CONSUMERS_PAGE_SIZE).get_page(request.GET.get("page"))
    query = "&".join(f"{k}={quote(v)}" for k, v in (("q", search), ("sort", sort)) if v and (k, v) != ("sort", "group"))
    return _page(
        request,
        "dashboards/consumers.html",
        {
            "page": page,
            "search": search,
            "sort": sort,
            "query": query,
            "prefix": reverse("dashboards:consumers"),
            "total_lag": sum(g["lag"] for g in groups),
            "stale": sum(1 for g in groups if g["stale"]),
        },
    )


@login_required
@ensure_csrf_cookie
def consumer_group(request, group: str):
    """One consumer group: per queue committed offset, max offset and lag, a live lag chart (the page
    polls ``progress.json``), and for operators the offset reset (a preview first)."""
    detail = selectors.consumer_group(group)
    if detail is None:
        raise Http404(f"no broker reports a consumer group named {group!r}")
    page = {
        "group": group,
        "progressUrl": reverse("dashboards:consumer-progress", args=[group]),
        "pollMs": PROGRESS_POLL_MS,
        "lag": detail["lag"],
        "topics": [t["topic"] for t in detail["topics"]],
        "actions": {"reset": reverse("dashboards:reset-offset", args=[group])} if is_operator(request.user) else None,
    }
    topic_url = _topic_url()
    for t in detail["topics"]:
        t["url"] = topic_url(t["topic"])
    return _page(request, "dashboards/consumer_group.html", {"c": detail, "page": page})


@_json_login_required
def consumer_progress(request, group: str):
    """The lag chart's points: the group's progress as the brokers last reported it."""
    detail = selectors.consumer_group(group)
    if detail is None:
        return JsonResponse({"detail": f"no broker reports a consumer group named {group}"}, status=404)
    return JsonResponse({**detail, "atMs": int(time.time() * 1000)})


@login_required
@ensure_csrf_cookie
def broker(request, broker_name: str, broker_id: int):
    """One broker's status and configuration as it last reported them; operators change its dynamic
    keys (a preview of old -> new first, then the broker applies them and keeps them in broker.conf)."""
    reports = selectors.broker_reports(broker_name, broker_id)
    if not reports:
        raise Http404(f"no status report from broker {broker_name} id {broker_id}")
    report = max(reports, key=lambda r: r["reportedAtMs"])
    dynamic = set(report["dynamicKeys"])
    operator = is_operator(request.user)
    page = {
        "brokerName": broker_name,
        "brokerId": broker_id,
        "actions": {"config": reverse("dashboards:broker-config", args=[broker_name, broker_id])} if operator else None,
    }
    return _page(
        request,
        "dashboards/broker.html",
        {
            "b": report,
            "others": [r for r in reports if r is not report],
            "config": [(key, value, key in dynamic) for key, value in sorted(report["config"].items())],
            "horizons": selectors.topic_horizons(broker_name),
            "group_url": _group_url()(broker_name),
            "page": page,
        },
    )


@login_required
def config(request):
    configs = selectors.configs()
    sections = [(name, configs.get(name, [])) for name in ("controller", "nameserver")]
    return _page(request, "dashboards/config.html", {"sections": sections})


@login_required
@ensure_csrf_cookie
def acl(request):
    """A cluster's ACL 2.0 users (never their secret keys) and their policies' entries, with the version
    (``?cluster=``; by default the first known); operators change them, each change previewed first with
    the clients it would lock out (dashboards/acl_admin.py)."""
    clusters = selectors.acl_clusters()
    cluster = request.GET.get("cluster") or (clusters[0] if clusters else None)
    if cluster is not None and cluster not in clusters:
        raise Http404(f"no cluster named {cluster!r}")
    operator = is_operator(request.user)
    actions = (
        {
            name: reverse(f"dashboards:acl-{name.replace('_', '-')}", args=[cluster])
            for name in ("create_user", "update_user", "delete_user", "put_policy", "delete_policy")
        }
        if operator and cluster is not None
        else None
    )
    return _page(
        request,
        "dashboards/acl.html",
        {
            "clusters": clusters,
            "cluster": cluster,
            "acl": selectors.acl_view(cluster) if cluster is not None else None,
            "actions": actions,
            "choices": {"types": USER_TYPES, "statuses": USER_STATUSES, "actions": ACTIONS, "decisions": DECISIONS},
        },
    )


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
