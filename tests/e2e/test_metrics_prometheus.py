"""A real Prometheus (Debian's package) scraping a real control plane and three real controller-mode
brokers with the shipped rules (docs/monitoring/; ``for:`` shortened, scraped every second), the
brokers found through the control plane's HTTP service discovery (issue 38):

- the metrics agree with the REST API (epochs, consumer lag, water levels);
- every query of the shipped Grafana dashboard returns data, asked through Prometheus' HTTP API;
- RocketMQBrokerDown fires for a broker killed and kept down and resolves once it is back;
- ReplicaGroupNoWritableMaster fires when every in-sync replica is killed and resolves after the
  election that follows their return.
"""

from __future__ import annotations

import signal
import time
from operator import attrgetter
from pathlib import Path

import httpx
import pytest
import yaml
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb

from controlplane.launcher import prometheus
from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import in_sync_group
from tests.e2e.test_replication import send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

GROUP = "MetricsGroup"


def shortened_rules(path: Path) -> Path:
    """The shipped rules with every ``for:`` at 1 s (the scrape and evaluation interval)."""
    rules = yaml.safe_load(prometheus.RULES_PATH.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


class Prom:
    def __init__(self, url: str):
        self.url = url

    def query(self, expr: str) -> list[dict]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        assert r.status_code == 200, (expr, r.text)
        return r.json()["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def firing(self, alertname: str) -> list[dict]:
        alerts = httpx.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return [a["labels"] for a in alerts if a["labels"]["alertname"] == alertname and a["state"] == "firing"]


def consume(grpc_port: int, topic: str, count: int) -> int:
    """Receive and ack up to ``count`` messages with the official SimpleConsumer; the number acked."""
    consumer = SimpleConsumer(
        ClientConfiguration(f"127.0.0.1:{grpc_port}", Credentials()), GROUP, {topic: FilterExpression()}, await_duration=2
    )
    consumer.startup()
    acked = 0
    try:
        deadline = time.monotonic() + 30
        while acked < count and time.monotonic() < deadline:
            for message in consumer.receive(min(16, count - acked), 20) or []:
                consumer.ack(message)
                acked += 1
    finally:
        consumer.shutdown()
    return acked


def run_audit(base: str, admin: dict) -> None:
    """An offset audit through the REST API (Spark in the Celery worker), until it succeeded."""
    started = httpx.post(f"{base}/api/v1/audits/runs", headers=admin, timeout=10)
    assert started.status_code == 202, started.text
    url = f"{base}/api/v1/audits/runs/{started.json()['id']}"
    wait_for(lambda: httpx.get(url, headers=admin, timeout=5).json()["status"] in ("succeeded", "failed"), 240, "the audit run")
    run = httpx.get(url, headers=admin, timeout=5).json()
    assert run["status"] == "succeeded", run["error"]


def test_prometheus_scrapes_the_cluster_and_the_alerts_fire_and_resolve(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_EVENTS_URI", str(tmp_path / "offset-events"))
    monkeypatch.setenv("AUDIT_SPARK_MASTER", "local[2]")
    reader = ApiToken.issue("metrics-prometheus", "read")[1]
    multiproc = prometheus.fresh_multiproc_dir(tmp_path / "multiproc")
    env = {prometheus.MULTIPROC_ENV: str(multiproc)}
    with in_sync_group(tmp_path, "metrics", env=env, brokerStatusReportInterval=500) as group:
        base, admin, replicas, master, info, master_of = attrgetter("base", "admin", "replicas", "master", "info", "master_of")(
            group
        )
        prom_process = None
        try:
            assert send(master.grpc_port, 199, first=1) == {pb.Code.OK: 199}
            acked = consume(master.grpc_port, "Replicated", 40)
            assert acked == 40

            config = tmp_path / "prometheus.yml"
            prometheus.write_config(config, base, reader, shortened_rules(tmp_path / "rules.yml"), scrape_interval="1s")
            started = prometheus.start(config, tmp_path / "tsdb", tmp_path / "prometheus.log")
            prom_process = started.process
            prometheus.wait_ready(started)
            prom = Prom(started.url)
            wait_for(lambda: prom.value('sum(up{job="rocketmq-broker"})') == 3, 60, "Prometheus scraping the three brokers")
            wait_for(
                lambda: prom.value('sum(up{job="rocketmq-ha-controlplane"})') == 1, 30, "Prometheus scraping the control plane"
            )

            # --- the metrics agree with the REST API ---------------------------------------------
            master_addr = f"127.0.0.1:{master.listen_port}"

            def agrees() -> bool:
                state = info()
                epoch = state["masterEpoch"]
                levels = httpx.get(
                    f"{base}/api/v1/nameserver/water-levels",
                    params={"clusterName": "repl", "brokerName": "group-a"},
                    headers=admin,
                    timeout=5,
                ).json()["waterLevels"]
                own = next(w for w in levels if w["role"] != "SLAVE")
                progress = httpx.get(f"{base}/api/v1/nameserver/consumer-groups/{GROUP}", headers=admin, timeout=5).json()
                rest_lag = sum(
                    q["lag"] for q in progress["queues"] if q["brokerName"] == "group-a" and q["topic"] == "Replicated"
                )
                figures = {
                    "controller epoch": (prom.value('max(rmqha_replica_group_master_epoch{broker_name="group-a"})'), epoch),
                    "master's epoch": (prom.value(f'rmqha_broker_master_epoch{{broker_addr="{master_addr}"}}'), epoch),
                    "max offset": (prom.value(f'rmqha_broker_max_offset{{broker_addr="{master_addr}"}}'), own["maxOffset"]),
                    "confirm offset": (
                        prom.value(f'rmqha_broker_confirm_offset{{broker_addr="{master_addr}"}}'),
                        own["confirmOffset"],
                    ),
                    "slaves' lag": (
                        prom.value(f'sum(rmqha_replica_lag_bytes{{broker_addr="{master_addr}"}})'),
                        sum(s["lagBytes"] for s in own["slaves"]),
                    ),
                    "consumer lag": (
                        prom.value(
                            f'rocketmq_consumer_lag_messages{{broker_addr="{master_addr}",consumer_group="{GROUP}",topic="Replicated"}}'
                        ),
                        rest_lag,
                    ),
                }
                agrees.last = figures
                return all(metric == rest for metric, rest in figures.values()) and 0 < rest_lag < 200

            agrees.last = {}
            try:
                wait_for(agrees, 30, "the metrics agreeing with the REST API")
            finally:
                print("metrics vs REST:", agrees.last)

            # --- a drill: an election by an operator, and a drill RTO for the dashboard ------------
            drill = httpx.post(
                f"{base}/api/v1/operations/groups/group-a/drill", headers=admin, json={"preview": False}, timeout=60
            )
            assert drill.status_code == 200 and drill.json()["drill"]["outcome"] == "ok", drill.text
            wait_for(lambda: prom.value('max(rmqha_drill_rto_seconds{broker_name="group-a"})') is not None, 30, "the drill's RTO")

            # --- an offset audit: its figures for the dashboard ------------------------------------
            run_audit(base, admin)
            wait_for(lambda: prom.value("max(rmqha_audit_last_run_timestamp_seconds)") is not None, 30, "the audit's figures")

            # --- every dashboard query returns data ------------------------------------------------
            time.sleep(3)  # rates over [1m] need two samples of each counter
            empty = [e for e in prometheus.dashboard_expressions() if not prom.query(e)]
            assert empty == [], f"dashboard queries without data: {empty}"

            # --- a broker killed and kept down, then back ----------------------------------------
            state = info()
            master = master_of(state)
            victim = next(r for r in replicas if r is not master)
            victim_addr = f"127.0.0.1:{victim.listen_port}"
            victim.stop(signal.SIGKILL)
            wait_for(
                lambda: any(a.get("broker_addr") == victim_addr for a in prom.firing("RocketMQBrokerDown")),
                60,
                "RocketMQBrokerDown",
            )
            assert not prom.firing("ReplicaGroupNoWritableMaster")  # the master still serves
            victim.start()
            wait_for(lambda: not prom.firing("RocketMQBrokerDown"), 90, "RocketMQBrokerDown resolved")

            # --- every in-sync replica killed: no writable master, until they return ---------------
            wait_for(lambda: len(info().get("syncStateSet", [])) == 3, 60, "all three back in sync")
            for r in replicas:
                r.stop(signal.SIGKILL)
            wait_for(lambda: prom.firing("ReplicaGroupNoWritableMaster"), 60, "ReplicaGroupNoWritableMaster")
            for r in replicas:
                r.start()
            wait_for(lambda: master_of(info()) is not None, 90, "an election after the replicas' return")
            wait_for(lambda: not prom.firing("ReplicaGroupNoWritableMaster"), 60, "ReplicaGroupNoWritableMaster resolved")
        finally:
            if prom_process is not None:
                prom_process.stop()
