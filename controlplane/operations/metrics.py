"""The control plane's Prometheus endpoints (docs/metrics.md): ``GET /metrics`` and the brokers' scrape
targets (``GET /api/v1/operations/metrics/targets``, Prometheus HTTP service discovery).

``/metrics`` serves two kinds of series:

- counters and histograms the processes count as they work (``rmqha_elections_total``,
  ``rmqha_election_duration_seconds``, ``rmqha_heartbeats_received_total``). With
  ``PROMETHEUS_MULTIPROC_DIR`` set in the environment of every web process and Celery worker before
  they start (the launcher sets it; an empty folder of their own, one per host), each process writes
  its values to that folder and every scrape sums them all (prometheus_client's multiprocess mode,
  ``MultiProcessCollector``); without it, a scrape shows the answering process's own;
- the cluster's state, computed at scrape time from Postgres and Redis, the same whichever process
  answers (``ClusterState``): each source is read once for every set (a few queries and Redis round
  trips, whatever the number of sets), the headroom by its rule (``headroom.of_states``). A thousand
  sets are some 14,000 series: the view writes them in the text format itself (``Gauge.text``), as
  prometheus_client's ``generate_latest`` writes gauge families (the tests hold the two equal), whose
  per-sample formatting alone took 70 ms of a scrape (bench/metrics_controlplane.py).

Who may read them: a valid API token of scope ``read`` or ``admin`` that is bound to no cluster (the
series span every cluster). Without a token (or with an unknown or revoked one) 401; a broker token or
a cluster-bound one is refused with 403. Dashboard logins are not accepted: Prometheus has a token.
Both take ``Authorization: Bearer <token>`` and, for Prometheus's ``http_sd_configs``, which send
``Authorization: <token>`` unless the config says ``type: Bearer`` (prometheus/docs#2377), the bare
token too.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from django.http import HttpRequest, HttpResponse, JsonResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from rest_framework import exceptions, permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.auth import ApiTokenAuthentication, TokenPrincipal, bearer_token, binding_refusal, principal_for
from controlplane.celery import app as celery_app
from controlplane.controller import liveness as ctl_liveness
from controlplane.controller import selectors as ctl_selectors
from controlplane.errors import error_body
from controlplane.isolation import isolated_addrs
from controlplane.models import TokenScope
from controlplane.openapi import AUTH, errors
from controlplane.redis import slot_stamps, sync_client
from mqrules import textformat
from mqrules.codes import ResponseCode
from nameserver import broker_status
from nameserver import liveness as ns_liveness
from nameserver import selectors as ns_selectors

from . import drill, headroom

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MONITOR_SCOPES = frozenset({TokenScope.READ, TokenScope.ADMIN})


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


# --- who may read ------------------------------------------------------------------------------------


def monitor_token(header: str | None) -> str | None:
    """The token of an Authorization header: ``Bearer <token>``, or a bare token (see above)."""
    if not header:
        return None
    bare = header.strip()
    return bearer_token(header) or (bare if bare and " " not in bare else None)


class MonitorTokenAuthentication(ApiTokenAuthentication):
    """``ApiTokenAuthentication`` that also takes a bare token (``monitor_token``)."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        raw = monitor_token(header)
        principal = principal_for(raw) if raw is not None else None
        if principal is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked token.")
        return principal, principal


class MonitorTokenScheme(OpenApiAuthenticationExtension):
    """``MonitorTokenAuthentication`` in the OpenAPI schema."""

    target_class = "controlplane.operations.metrics.MonitorTokenAuthentication"
    name = "monitorToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A read or admin API token: `Bearer <token>`, or the bare token (Prometheus's http_sd_configs)",
        }


def monitor_refusal(principal: TokenPrincipal) -> str | None:
    """Why a token may not read the metrics or the targets, or None when it may."""
    if principal.scope not in MONITOR_SCOPES:
        return "the metrics need a read or admin token"
    return binding_refusal(principal.cluster_name, every_cluster=True)


class IsMonitor(permissions.BasePermission):
    """A read or admin token bound to no cluster (``monitor_refusal``)."""

    message = "the metrics need a read or admin token"

    def has_permission(self, request, view) -> bool:
        if not isinstance(request.auth, TokenPrincipal):
            return False
        refusal = monitor_refusal(request.auth)
        if refusal is not None:
            self.message = refusal
        return refusal is None


def _refused(request: HttpRequest) -> HttpResponse | None:
    """The answer to a request that may not read the metrics, or None (the rule of ``IsMonitor``, for
    the plain Django view: Prometheus's Accept header is no JSON, so /metrics is not a DRF view)."""
    raw = monitor_token(request.META.get("HTTP_AUTHORIZATION"))
    principal = principal_for(raw) if raw is not None else None
    if principal is None:
        detail = "Unknown or revoked token." if raw is not None else "Authorization: Bearer <token> is required."
        response = JsonResponse(error_body(ResponseCode.NO_PERMISSION, detail), status=401)
        response["WWW-Authenticate"] = 'Bearer realm="api"'
        return response
    refusal = monitor_refusal(principal)
    return JsonResponse(error_body(ResponseCode.NO_PERMISSION, refusal), status=403) if refusal else None


# --- the cluster's state -----------------------------------------------------------------------------


class Gauge:
    """One gauge family of the cluster state: what ``GaugeMetricFamily`` holds (``family``), and its
    text as ``generate_latest`` writes it (``text``), written directly."""

    def __init__(self, name: str, documentation: str, labels: Iterable[str] = ()) -> None:
        self.name, self.documentation, self.labels = name, documentation, tuple(labels)
        self.samples: list[tuple[tuple[str, ...], float]] = []

    def add_metric(self, labels: Iterable[str], value: float) -> None:
        self.samples.append((tuple(labels), value))

    def family(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for labels, value in self.samples:
            family.add_metric(labels, value)
        return family

    def text(self) -> str:
        """The family as generate_latest writes it (mqrules.textformat)."""
        names = self.labels
        rows = ((textformat.label_text(names, values) if names else "", value) for values, value in self.samples)
        return textformat.gauge_text(self.name, self.documentation, rows)


_SET = ("cluster", "broker_name")
_REPLICA = ("cluster", "broker_name", "broker_id", "broker_addr")


def _controller_families() -> Iterator[Gauge]:
    """The replica groups as the controller holds them: epochs, SyncStateSets, writability, headroom,
    and each replica's liveness and membership."""
    epoch = Gauge("rmqha_replica_group_master_epoch", "The controller's master epoch of the replica group", _SET)
    sss = Gauge("rmqha_replica_group_sync_state_set_size", "Members of the group's SyncStateSet (the controller's)", _SET)
    min_isr = Gauge(
        "rmqha_replica_group_min_in_sync_replicas",
        "minInSyncReplicas from the master's status report (1 when unknown)",
        _SET,
    )
    writable = Gauge("rmqha_replica_group_writable_master", "1 when a master is elected, alive and not isolated, else 0", _SET)
    room = Gauge("rmqha_replica_group_headroom", "Replica losses the group can take before writes stop", _SET)
    alive = Gauge("rmqha_replica_alive", "1 when the controller hears the replica's heartbeats, else 0", _REPLICA)
    in_sync = Gauge("rmqha_replica_in_sync", "1 when the replica is in the SyncStateSet, else 0", _REPLICA)
    for judged in headroom.of_states(ctl_selectors.states()):
        s = judged.state
        group = [s.cluster_name, s.broker_name]
        epoch.add_metric(group, s.master_epoch)
        sss.add_metric(group, len(s.sync_state_set))
        min_isr.add_metric(group, judged.settings.min_in_sync_replicas)
        writable.add_metric(group, int(s.master_broker_id is not None and s.master_broker_id in judged.alive))
        room.add_metric(group, judged.headroom.losses)
        for r in s.replicas:
            replica = [*group, str(r.broker_id), r.broker_address]
            alive.add_metric(replica, int(r.broker_id in judged.heard))
            in_sync.add_metric(replica, int(r.broker_id in s.sync_state_set))
    yield from (epoch, sss, min_isr, writable, room, alive, in_sync)


def _registry_families() -> Iterator[Gauge]:
    """The nameserver's registry: each broker's heartbeat age and the brokers counted by state (each
    once: isolated by an operator, else alive or expired as the scan judges, blind time not counted);
    and how long the control plane has been blind (the nameserver's or the controller's hearing, the
    longer)."""
    hearing = ns_liveness.hearing()
    now = hearing.now
    brokers = ns_selectors.registered_brokers()
    members = [ns_liveness.member(cluster, addr) for cluster, _, addr in brokers]
    beats = ns_liveness.last_heartbeats(members)
    expired = set(ns_liveness.expired_members(now))
    isolated = isolated_addrs()
    age = Gauge(
        "rmqha_broker_heartbeat_age_seconds",
        "Seconds since the broker's last heartbeat to the nameserver",
        ("cluster", "broker_name", "broker_addr"),
    )
    counts = {"alive": 0, "expired": 0, "isolated": 0}
    for (cluster, name, addr), member in zip(brokers, members, strict=True):
        beat = beats.get(member)
        if beat is not None:
            age.add_metric([cluster, name, addr], max(0, now - beat[0]) / 1000)
        if (cluster, addr) in isolated:
            counts["isolated"] += 1
        else:
            counts["expired" if beat is None or member in expired else "alive"] += 1
    by_state = Gauge("rmqha_brokers", "Brokers in the nameserver's registry, by state", ("state",))
    for state, n in counts.items():
        by_state.add_metric([state], n)
    blind_ms = max(hearing.blind_for_millis, ctl_liveness.hearing().blind_for_millis)
    blind = Gauge("rmqha_controlplane_blind_seconds", "Seconds the blindness guard has counted as blind (0: hearing)")
    blind.add_metric([], blind_ms / 1000)
    yield from (age, by_state, blind)


def celery_queues() -> list[str]:
    """The queues the Celery app routes tasks to: its default queue, its declared queues, and those
    its routes name."""
    conf = celery_app.conf
    names = {conf.task_default_queue}
    names.update(q.name for q in conf.task_queues or ())
    routes = conf.task_routes
    for route in routes.values() if isinstance(routes, dict) else ():
        if isinstance(route, dict) and route.get("queue"):
            names.add(route["queue"])
    return sorted(names)


def _work_families() -> Iterator[Gauge]:
    """The housekeeping: the last dead-broker scan, the Celery queues' lengths, the latest drills' RTO."""
    stamps = [s for s in slot_stamps([ns_liveness.scan_stamp_key(), ctl_liveness.slot_stamp_key("scan-brokers")]) if s]
    scan = Gauge(
        "rmqha_scan_last_run_timestamp_seconds", "When the latest dead-broker scan ran (nameserver's or controller's), Unix time"
    )
    if stamps:
        scan.add_metric([], max(stamps) / 1000)
    queues = celery_queues()
    prefix = celery_app.conf.broker_transport_options.get("global_keyprefix", "")
    pipe = sync_client().pipeline(transaction=False)
    for q in queues:
        pipe.llen(prefix + q)
    length = Gauge("rmqha_celery_queue_length", "Tasks waiting in the Celery queue (Redis LLEN)", ("queue",))
    for q, n in zip(queues, pipe.execute(), strict=True):
        length.add_metric([q], n)
    rto = Gauge("rmqha_drill_rto_seconds", "RTO of the group's latest failover drill that measured one", _SET)
    for cluster, name, rto_ms in drill.latest_rtos():
        rto.add_metric([cluster, name], rto_ms / 1000)
    yield from (scan, length, rto)


class ClusterState:
    """The cluster-state gauges, computed at each scrape: a prometheus_client custom collector
    (``collect``), and the same families as text (``text``: what /metrics serves)."""

    def gauges(self) -> list[Gauge]:
        return [*_controller_families(), *_registry_families(), *_work_families()]

    def collect(self) -> Iterator[Metric]:
        return (g.family() for g in self.gauges())

    def text(self, gauges: list[Gauge] | None = None) -> bytes:
        return "".join(g.text() for g in (self.gauges() if gauges is None else gauges)).encode()


class _Registry:
    """A scrape's collectors, as ``generate_latest`` reads them."""

    def __init__(self, collectors: Iterable[Collector]) -> None:
        self.collectors = list(collectors)

    def collect(self) -> Iterator[Metric]:
        for c in self.collectors:
            yield from c.collect()


def process_counters() -> Collector:
    """The counters and histograms: every process's on this host (multiprocess mode), else this one's."""
    if not os.environ.get(MULTIPROC_ENV):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # reads the folder afresh at each collect
    return registry


@contextmanager
def _without_gc() -> Iterator[None]:
    """A scrape of a thousand sets makes some 100,000 short-lived objects that live until its end: with
    the collector on, they set off full collections of the whole process's heap, which made half the
    scrapes twice as slow (bench/metrics_controlplane.py). Refcounting frees them at the end anyway."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def metrics_view(*extra: Collector) -> Callable[[HttpRequest], HttpResponse]:
    """The ``/metrics`` view: the process counters, the cluster state and ``extra`` collectors (the
    composition root adds the upper floors' own, e.g. the audits')."""
    cluster_state = ClusterState()

    def metrics(request: HttpRequest) -> HttpResponse:
        refused = _refused(request)
        if refused is not None:
            return refused
        with _without_gc():
            body = generate_latest(_Registry([process_counters(), *extra])) + cluster_state.text()
        return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)

    return metrics


# --- the brokers' scrape targets -----------------------------------------------------------------------


def scrape_targets() -> list[dict]:
    """Prometheus HTTP SD target groups: one per broker that reported a metrics address, dead ones too
    (so that ``up`` shows them down) while the registry or the controller knows them; the addresses
    of brokers neither knows any more are forgotten."""
    targets = broker_status.metrics_targets()
    if not targets:
        return []
    known = {(cluster, addr) for cluster, _, addr in ns_selectors.registered_brokers()} | ctl_selectors.replica_addrs()
    broker_status.forget_metrics_targets([b for b in targets if b not in known])
    return [
        {
            "targets": [t["metricsAddr"]],
            "labels": {
                "cluster": cluster,
                "broker_name": t["brokerName"],
                "broker_id": str(t["brokerId"]),
                "broker_addr": addr,
            },
        }
        for (cluster, addr), t in sorted(targets.items())
        if (cluster, addr) in known
    ]


class _TargetLabels(serializers.Serializer):
    cluster = serializers.CharField()
    broker_name = serializers.CharField()
    broker_id = serializers.CharField()
    broker_addr = serializers.CharField()


class TargetGroupSerializer(serializers.Serializer):
    targets = serializers.ListField(child=serializers.CharField(), help_text='["host:port"] of the broker\'s exporter')
    labels = _TargetLabels()


class TargetsView(APIView):
    authentication_classes = [MonitorTokenAuthentication]
    permission_classes = [IsMonitor]

    @extend_schema(
        operation_id="metricsTargets",
        responses={200: TargetGroupSerializer(many=True), **errors(*AUTH)},
        description="The brokers' Prometheus exporters as HTTP service discovery target groups (a read or "
        "admin token bound to no cluster): every broker whose status report named a metricsAddr, while the "
        "registry or the controller knows it (a dead one too: `up` shows it down).",
    )
    def get(self, request):
        return Response(scrape_targets())
