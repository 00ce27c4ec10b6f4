"""The control plane's /metrics and the brokers' scrape targets (controlplane/operations/metrics.py)
against real Postgres and Redis: a controller-managed group g1 of three replicas made through the
brokers' REST calls, then the values an operator reads off the exposition (parsed with
prometheus_client's own parser), the auth rule, the multiprocess switch and the HTTP SD listing."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from audits.models import AuditRun, RunStatus
from controlplane import hearing
from controlplane.celery import app as celery_app
from controlplane.controller import liveness as ctl_liveness
from controlplane.controller import services as ctl_services
from controlplane.controller.core.state import Trigger
from controlplane.models import ApiToken, Drill, DrillOutcome
from controlplane.operations.isolation import isolate
from controlplane.operations.metrics import ClusterState, Gauge
from mqrules import validation as v
from nameserver import broker_status
from nameserver import services as ns_services
from nameserver.core.broker_status import parse_report
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body
from tests.nameserver.helpers import NS, register_body
from tests.procs import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGETS = "/api/v1/operations/metrics/targets"
G1 = {"cluster": "c1", "broker_name": "g1"}


_issued = itertools.count()


def token(scope: str, cluster: str = "") -> str:
    return ApiToken.issue(f"{scope}-metrics-{next(_issued)}", scope, cluster)[1]


def scrape(tok: str | None = None) -> dict[tuple[str, frozenset], float]:
    """sample name and labels -> value, from GET /metrics with a read token (or ``tok``)."""
    r = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {tok or token('read')}")
    assert r.status_code == 200, r.content
    assert r["Content-Type"] == CONTENT_TYPE_LATEST
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.content.decode())
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def replica(i: int) -> dict[str, str]:
    return {**G1, "broker_id": str(i), "broker_addr": addr(i)}


@pytest.fixture
def g1() -> APIClient:
    """Group g1 of cluster c1: replicas 1 (master, epoch 1), 2 and 3, alive, all in the SyncStateSet,
    registered with the nameserver (the master as id 0). Returns the broker-token client."""
    b = APIClient()
    b.credentials(HTTP_AUTHORIZATION=f"Bearer {token('broker')}")
    for i in (1, 2, 3):
        assert b.post(f"{CTL}/brokers/apply-broker-id", apply_body(i), format="json").status_code == 200
        assert b.post(f"{CTL}/brokers/heartbeat", heartbeat_body(i, "g1", epoch=1), format="json").status_code == 200
    elected = b.post(f"{CTL}/elect-master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1}, format="json").json()
    assert (elected["masterBrokerId"], elected["masterEpoch"]) == (1, 1)
    body = {"brokerName": "g1", "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, 2, 3]}
    altered = b.post(f"{CTL}/alter-sync-state-set", {**body, "syncStateSetEpoch": elected["syncStateSetEpoch"]}, format="json")
    assert altered.status_code == 200, altered.content
    for i in (1, 2, 3):
        r = b.post(
            f"{NS}/brokers/register",
            register_body(0 if i == 1 else i, addr(i), name="g1", state=1, timeout=60_000),
            format="json",
        )
        assert r.status_code == 200
    return b


def status_report(broker_id: int, addr_: str, *, name: str = "g1", metrics_addr: object = "absent", **config: str) -> None:
    status: dict = {"role": "SYNC_MASTER" if broker_id == 0 else "SLAVE", "metaMode": "WRITER", "masterEpoch": 1}
    if metrics_addr != "absent":
        status["metricsAddr"] = metrics_addr
    report = {
        "clusterName": "c1",
        "brokerName": name,
        "brokerId": broker_id,
        "brokerAddr": addr_,
        "status": status,
        "config": config,
        "dynamicKeys": [],
        "queues": [],
        "offsets": [],
    }
    broker_status.store(parse_report(report))


# --- who may read ----------------------------------------------------------------------------------------


def test_metrics_need_a_read_or_admin_token_bound_to_no_cluster(db):
    assert Client().get("/metrics").status_code == 401
    r = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert r.status_code == 401 and r.json()["name"] == "NO_PERMISSION" and r["WWW-Authenticate"].startswith("Bearer")
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token('broker')}").status_code == 403
    bound = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token('read', 'c1')}")
    assert bound.status_code == 403 and "bound to cluster c1" in bound.json()["detail"]
    for scope in ("read", "admin"):
        assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token(scope)}").status_code == 200

    api = APIClient()
    assert api.get(TARGETS).status_code == 401
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token('broker')}")
    assert api.get(TARGETS).status_code == 403
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token('read')}")
    assert api.get(TARGETS).status_code == 200 and api.get(TARGETS).json() == []
    # Prometheus's http_sd_configs send the bare token unless told `type: Bearer` (prometheus/docs#2377).
    api.credentials(HTTP_AUTHORIZATION=token("read"))
    assert api.get(TARGETS).status_code == 200
    api.credentials(HTTP_AUTHORIZATION="nope")
    assert api.get(TARGETS).status_code == 401


# --- the cluster's state -----------------------------------------------------------------------------------


def test_replica_group_gauges_follow_the_controller(g1):
    s = scrape()
    assert value(s, "rmqha_replica_group_master_epoch", **G1) == 1
    assert value(s, "rmqha_replica_group_sync_state_set_size", **G1) == 3
    assert value(s, "rmqha_replica_group_writable_master", **G1) == 1
    assert value(s, "rmqha_replica_group_min_in_sync_replicas", **G1) == 1  # no report yet: RocketMQ's default
    assert value(s, "rmqha_replica_group_headroom", **G1) == 2  # 3 alive in the set, 1 needed
    for i in (1, 2, 3):
        assert value(s, "rmqha_replica_alive", **replica(i)) == 1
        assert value(s, "rmqha_replica_in_sync", **replica(i)) == 1

    # The master's own config sets the floor; a slave's report does not count.
    status_report(0, addr(1), minInSyncReplicas="2")
    status_report(2, addr(2), minInSyncReplicas="3")
    # Replica 3 falls silent: dead for the controller, still in the set until the master drops it.
    ctl_liveness.forget([ctl_liveness.member("c1", "g1", 3)])
    s = scrape()
    assert value(s, "rmqha_replica_group_min_in_sync_replicas", **G1) == 2
    assert value(s, "rmqha_replica_alive", **replica(3)) == 0 and value(s, "rmqha_replica_in_sync", **replica(3)) == 1
    assert value(s, "rmqha_replica_group_headroom", **G1) == 0  # 2 alive in the set, 2 needed

    # The master isolated: no writable master, and the registry counts it as isolated.
    isolate("g1", 1, True, by="test")
    s = scrape()
    assert value(s, "rmqha_replica_group_writable_master", **G1) == 0
    assert value(s, "rmqha_replica_alive", **replica(1)) == 1  # heard: isolation is not death
    assert (value(s, "rmqha_brokers", state="isolated"), value(s, "rmqha_brokers", state="alive")) == (1, 2)
    assert value(s, "rmqha_brokers", state="expired") == 0


def test_an_election_is_counted_by_trigger_and_result_and_timed(g1):
    before = scrape()
    ok = ctl_services.elect_master("g1", broker_id=2, designate=True, trigger=Trigger.OPERATOR, requested_by="test")
    refused = ctl_services.elect_master("g1", broker_id=9, trigger=Trigger.BROKER, requested_by="test")
    assert ok.ok and not refused.ok
    after = scrape()

    def delta(name: str, **labels: str) -> float:
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    assert delta("rmqha_elections_total", trigger="operator", result="SUCCESS") == 1
    refused_name = ctl_services.metrics.code_name(refused.code)
    assert refused_name.startswith("CONTROLLER_") and delta("rmqha_elections_total", trigger="broker", result=refused_name) == 1
    assert delta("rmqha_election_duration_seconds_count", trigger="operator") == 1
    assert 0 < delta("rmqha_election_duration_seconds_sum", trigger="operator") < 5
    assert value(after, "rmqha_replica_group_master_epoch", **G1) == 2  # the switch is in the state too
    assert value(after, "rmqha_replica_group_writable_master", **G1) == 1


def test_heartbeats_are_counted_by_the_table_they_refresh(g1):
    before = scrape()
    for _ in range(3):
        assert g1.post(f"{CTL}/brokers/heartbeat", heartbeat_body(2, "g1", epoch=1), format="json").status_code == 200
    beat = {"clusterName": "c1", "brokerAddr": addr(2), "brokerName": "g1"}
    assert g1.post(f"{NS}/brokers/heartbeat", beat, format="json").status_code == 200
    after = scrape()
    for kind, n in (("controller", 3), ("nameserver", 1)):
        name = "rmqha_heartbeats_received_total"
        assert (value(after, name, kind=kind) or 0) - (value(before, name, kind=kind) or 0) == n


def test_registry_liveness_blindness_and_housekeeping(g1):
    s = scrape()
    assert (value(s, "rmqha_brokers", state="alive"), value(s, "rmqha_brokers", state="expired")) == (3, 0)
    age = value(s, "rmqha_broker_heartbeat_age_seconds", cluster="c1", broker_name="g1", broker_addr=addr(2))
    assert age is not None and 0 <= age < 5
    assert value(s, "rmqha_controlplane_blind_seconds") == 0
    assert ("rmqha_scan_last_run_timestamp_seconds", frozenset()) not in s  # no scan has run yet
    assert value(s, "rmqha_celery_queue_length", queue="celery") == 0

    ns_services.scan_not_active_brokers()
    celery_app.send_task("nameserver.scan_not_active_brokers")  # no worker here: it waits in the queue
    # The web tier's last stamp 10 s ago: blind since its grace (1 s) ran out.
    hearing.stamp_web(now_ms=hearing.stamp_web() - 10_000)
    s = scrape()
    assert abs(value(s, "rmqha_scan_last_run_timestamp_seconds") - time.time()) < 5
    assert value(s, "rmqha_celery_queue_length", queue="celery") == 1
    assert 8.5 <= value(s, "rmqha_controlplane_blind_seconds") <= 10


def test_drill_rto_and_audit_figures_are_the_latest(db):
    now = timezone.now()
    common = {"cluster_name": "c1", "broker_name": "g1", "actor": "t", "from_broker_id": 1, "to_broker_id": 2, "old_epoch": 1}
    older = Drill.objects.create(**common, outcome=DrillOutcome.OK, rto_ms=900)
    newer = Drill.objects.create(**common, outcome=DrillOutcome.OK, rto_ms=1234)
    failed = Drill.objects.create(**common, outcome=DrillOutcome.FAILED)  # measured nothing
    for d, ago in ((older, 30), (newer, 20), (failed, 10)):
        Drill.objects.filter(pk=d.pk).update(started_at=now - timedelta(seconds=ago))
    s = scrape()
    assert value(s, "rmqha_drill_rto_seconds", **G1) == 1.234
    assert ("rmqha_audit_rollbacks", frozenset()) not in s  # no audit yet

    finished = now - timedelta(minutes=5)
    kw = {"trigger": "api", "active": None, "finished_at": finished}
    AuditRun.objects.create(**kw, status=RunStatus.SUCCEEDED, rollbacks=3, messages_again=17)
    AuditRun.objects.create(**kw, status=RunStatus.FAILED, rollbacks=99, messages_again=99)  # not a result
    s = scrape()
    assert (value(s, "rmqha_audit_rollbacks"), value(s, "rmqha_audit_messages_reconsumed")) == (3, 17)
    assert value(s, "rmqha_audit_last_run_timestamp_seconds") == pytest.approx(finished.timestamp())


class _Families:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def test_the_cluster_state_is_written_as_prometheus_client_writes_it(g1):
    """/metrics writes the cluster-state families itself (their thousands of series): byte for byte
    what generate_latest makes of the same families, escapes included."""
    isolate("g1", 1, True, by="test")
    ctl_liveness.forget([ctl_liveness.member("c1", "g1", 3)])
    odd = Gauge("rmqha_test_odd", 'help with \\ and a\nnew line and "quotes"', ("b", "a"))
    odd.add_metric(['x"y', "back\\slash\nline"], 0.25)
    odd.add_metric(["", "plain"], 3)
    gauges = [*ClusterState().gauges(), odd, Gauge("rmqha_test_empty", "no samples")]
    assert sum(len(g.samples) for g in gauges) > 20
    assert ClusterState().text(gauges) == generate_latest(_Families([g.family() for g in gauges]))


# --- multiprocess mode ---------------------------------------------------------------------------------------

_COUNT = """
import sys
from controlplane.metrics import heartbeats_received
heartbeats_received.labels(kind="nameserver").inc(int(sys.argv[1]))
"""


def test_with_a_multiprocess_folder_every_process_counters_are_summed(db, tmp_path, monkeypatch):
    """Two other processes count heartbeats into the folder; a scrape shows their sum."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n in (2, 5):
        subprocess.run([sys.executable, "-c", _COUNT, str(n)], cwd=ROOT, env=env, check=True, timeout=60)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    s = scrape()
    assert value(s, "rmqha_heartbeats_received_total", kind="nameserver") == 7
    assert ("rmqha_brokers", frozenset({("state", "alive")})) in s  # the cluster state beside them


# --- the brokers' scrape targets -------------------------------------------------------------------------------


def test_targets_list_every_known_broker_that_reported_a_metrics_address(g1):
    status_report(0, addr(1), metrics_addr="127.0.0.1:5557")
    status_report(2, addr(2), metrics_addr="127.0.0.1:5558")
    status_report(3, addr(3), metrics_addr=None)  # metricsExporterType=DISABLE
    status_report(0, "10.9.9.9:10911", name="ghost", metrics_addr="10.9.9.9:5557")  # neither registry nor controller
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token('read')}")
    listed = api.get(TARGETS).json()
    assert listed == [
        {"targets": ["127.0.0.1:5557"], "labels": {**G1, "broker_id": "0", "broker_addr": addr(1)}},
        {"targets": ["127.0.0.1:5558"], "labels": {**G1, "broker_id": "2", "broker_addr": addr(2)}},
    ]
    assert ("c1", "10.9.9.9:10911") not in broker_status.metrics_targets()  # forgotten

    # Broker 2 dies and leaves the registry: the controller still knows it, so Prometheus keeps
    # scraping it (up == 0). A report without the field leaves the address as it was.
    assert ns_services.unregister_broker("c1", addr(2)) is not None
    status_report(0, addr(1))
    assert [t["targets"] for t in api.get(TARGETS).json()] == [["127.0.0.1:5557"], ["127.0.0.1:5558"]]
    # Disabled later: gone.
    status_report(0, addr(1), metrics_addr=None)
    assert [t["targets"] for t in api.get(TARGETS).json()] == [["127.0.0.1:5558"]]


def test_a_metrics_address_must_be_host_and_port():
    with pytest.raises(v.Invalid) as refused:
        status_report(0, addr(1), metrics_addr="not an address")
    assert list(refused.value.fields["status"]) == ["metricsAddr"]
