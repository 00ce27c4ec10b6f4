"""The shipped monitoring (issue 38; docs/metrics.md, docs/monitoring/): the alert rules pass ``promtool check
rules`` and their unit tests (``promtool test rules rules.test.yml``: every alert silent before its ``for:``,
firing after, resolved); each alert has its severity, annotations and a runbook in docs/metrics.md; every
metric the rules and the Grafana dashboard query is in docs/metrics.md's catalogue, with labels it has;
every dashboard query is PromQL; the demo's Prometheus configuration passes ``promtool check config``; and
``make doctor`` knows where promtool comes from.

promtool is Debian's ``prometheus`` package (``make doctor`` installs it): without it these tests fail
with that one line, never skip."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from controlplane import doctor
from controlplane.launcher import prometheus

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent.parent
METRICS_DOC = ROOT / "docs" / "metrics.md"
RULES = prometheus.RULES_PATH
RULE_TESTS = prometheus.MONITORING_DIR / "rules.test.yml"
DASHBOARD = prometheus.DASHBOARD_PATH
EXAMPLE_CONFIG = prometheus.MONITORING_DIR / "prometheus.yml"

ALERTS = {
    "RocketMQBrokerDown",
    "ReplicaGroupNoWritableMaster",
    "SyncStateSetBelowMinInSync",
    "HeadroomZero",
    "ReplicationLagHigh",
    "ConsumerLagGrowing",
    "DiskAboveWarning",
    "ControlPlaneBlind",
    "AuditFoundRollbacks",
    "NoScanRan",
    "ControlPlaneDown",
}
# Labels Prometheus puts on every scraped series, and what the brokers' discovery adds to theirs.
TARGET_LABELS = {"job", "instance"}
BROKER_TARGET_LABELS = {"cluster", "broker_name", "broker_id", "broker_addr"}
BROKER_COMMON_LABELS = {"cluster", "node_type", "node_id"}  # RocketMQ's, on every broker series
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool") or (str(doctor.PROMTOOL) if doctor.PROMTOOL.exists() else None)
    if found is None:
        pytest.fail("install Debian's prometheus package: make doctor", pytrace=False)
    return found


def run_promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)


# --- the catalogue (docs/metrics.md, between its markers) --------------------------------------------------


def catalogue() -> dict[str, set[str]]:
    """Each series name Prometheus shows (a histogram's _bucket/_sum/_count) -> the labels it may carry."""
    text = METRICS_DOC.read_text()
    block = text.split("<!-- catalogue:start -->", 1)[1].split("<!-- catalogue:end -->", 1)[0]
    series: dict[str, set[str]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        name, kind, source, labels = cells[0].strip("`"), cells[1], cells[2], set(re.findall(r"`(\w+)`", cells[3]))
        assert kind in ("counter", "gauge", "histogram"), line
        assert source in ("broker", "control plane", "prometheus"), line
        labels |= TARGET_LABELS
        if source == "broker":
            labels |= BROKER_COMMON_LABELS
        if name == "up":
            labels |= BROKER_TARGET_LABELS
        if kind == "histogram":
            series.update({name + "_bucket": labels | {"le"}, name + "_sum": labels, name + "_count": labels})
        else:
            series[name] = labels
    return series


def test_the_catalogue_table_parses():
    names = catalogue()
    assert len(names) > 50
    assert {"rmqha_replica_lag_bytes", "rocketmq_rpc_latency_milliseconds_bucket", "rmqha_elections_total", "up"} <= set(names)
    assert "rocketmq_message_size" not in names  # a histogram is its three series
    assert all(re.fullmatch(r"[a-z_:][a-z0-9_:]*", name) for name in names)


# --- PromQL: the selectors an expression uses ------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "atan2",
    "inf", "nan", "Inf", "NaN",
}  # fmt: skip


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched) of every vector selector in ``expr``. Function and aggregation
    names (followed by ``(``), keywords, grouping label lists, ranges and string values are not metrics."""
    text = _RANGE.sub("", _GROUPING.sub(" ", _STRING.sub('""', expr)))
    braces = [(b.start(), b.end()) for b in re.finditer(r"\{[^}]*\}", text)]
    found = []
    for match in _IDENT.finditer(text):
        name, rest = match.group(), text[match.end() :].lstrip()
        if any(start < match.start() < end for start, end in braces) or name in _KEYWORDS or rest.startswith("("):
            continue
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", rest[1 : rest.index("}")])) if rest.startswith("{") else set()
        found.append((name, labels))
    return found


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("up == 0", [("up", set())]),
        ('up{job="rocketmq-broker"} == 0', [("up", {"job"})]),
        (
            'max by (cluster, broker_name) (rmqha_replica_group_headroom{cluster=~"x"}) == 0',
            [("rmqha_replica_group_headroom", {"cluster"})],
        ),
        ("a >= on (job, instance) group_left b", [("a", set()), ("b", set())]),
        ("deriv((sum(x))[10m:1m]) > 0 and x offset 5m > 1e3", [("x", set()), ("x", set())]),
        ('histogram_quantile(0.99, sum by (le) (rate(h_bucket{a!~"b, c"}[$__rate_interval])))', [("h_bucket", {"a"})]),
        ("time() - max(ts) > 300 or vector(0)", [("ts", set())]),
    ],
    ids=["bare", "matcher", "grouping", "vector-matching", "subquery-offset-number", "histogram", "functions"],
)
def test_the_selectors_of_an_expression(expr, expected):
    assert selectors(expr) == expected


def assert_in_catalogue(where: str, exprs: list[str]) -> None:
    known = catalogue()
    unknown = [f"{where}: {name} in {expr!r}" for expr in exprs for name, _ in selectors(expr) if name not in known]
    assert unknown == [], "not in docs/metrics.md's catalogue"
    strange = [
        f"{where}: {name} has no label {label} ({expr!r})"
        for expr in exprs
        for name, labels in selectors(expr)
        for label in sorted(labels - known.get(name, labels))
    ]
    assert strange == []


# --- the rules ---------------------------------------------------------------------------------------------


def rules() -> list[dict]:
    (group,) = yaml.safe_load(RULES.read_text())["groups"]
    return group["rules"]


def test_promtool_checks_the_rules(promtool):
    done = run_promtool(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_the_rules_pass_their_unit_tests(promtool):
    done = run_promtool(promtool, "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_there_with_its_severity_annotations_and_runbook():
    doc = METRICS_DOC.read_text()
    alerts = rules()
    assert {r.get("alert") for r in alerts} == ALERTS
    for rule in alerts:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        assert rule["annotations"]["runbook_url"] == f"docs/metrics.md#{name.lower()}"
        assert f"\n### {name}\n" in doc, f"docs/metrics.md has no runbook heading for {name}"
        # the end-to-end tests shorten `for:` by rewriting it: a plain duration field, when there is one
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", "0s"))), name


def test_every_alert_is_tested_firing_and_silent():
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    firing, silent = set(), set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert firing == ALERTS
    assert silent == ALERTS


def test_the_rules_query_only_catalogued_metrics():
    assert_in_catalogue("rule", [r["expr"] for r in rules()])


# --- the Grafana dashboard ---------------------------------------------------------------------------------


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_the_dashboard_takes_its_data_source_and_groups_from_variables():
    board = dashboard()
    assert board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for name in ("cluster", "broker_name"):
        assert variables[name]["type"] == "query" and variables[name]["query"]["query"].startswith("label_values(")
    panels = [p for p in prometheus.flat_panels(board["panels"]) if p["type"] != "row"]
    assert len({p["id"] for p in prometheus.flat_panels(board["panels"])}) == len(prometheus.flat_panels(board["panels"]))
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in panel["targets"]), panel["title"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Cluster overview", "Replica group $broker_name: HA state and lag", "Consumer groups", "Control plane"]


def test_the_dashboard_queries_only_catalogued_metrics():
    board = dashboard()
    variable_queries = [
        re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["query"]["query"])
        for v in board["templating"]["list"]
        if v["type"] == "query"
    ]
    assert_in_catalogue("dashboard", prometheus.dashboard_expressions() + variable_queries)


def test_the_dashboard_queries_are_promql(promtool, tmp_path):
    """Each query, its variables replaced (``dashboard_expressions``), as a recording rule: promtool parses it."""
    exprs = prometheus.dashboard_expressions()
    assert len(exprs) == sum(len(p.get("targets", [])) for p in prometheus.flat_panels(dashboard()["panels"]))
    assert not any("$" in e for e in exprs), [e for e in exprs if "$" in e]
    records = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    done = run_promtool(promtool, "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_expressions_match_every_value_of_a_variable(tmp_path):
    board = {
        "panels": [
            {
                "type": "row",
                "panels": [{"targets": [{"expr": 'rate(x{cluster="$cluster", node_id=~"${broker_name}"}[$__rate_interval])'}]}],
            },
            {"targets": [{"expr": 'up{job="j"}'}, {"refId": "B"}]},
        ]
    }
    path = tmp_path / "board.json"
    path.write_text(json.dumps(board))
    assert prometheus.dashboard_expressions(path, rate_interval="30s") == [
        'rate(x{cluster=~".*", node_id=~".*"}[30s])',
        'up{job="j"}',
    ]


# --- the Prometheus configurations ---------------------------------------------------------------------------


def test_the_demo_configuration_passes_promtool(promtool, tmp_path):
    token = tmp_path / "prometheus.token"
    token.write_text("a-read-token\n")
    discovered, static = tmp_path / "discovered.yml", tmp_path / "static.yml"
    prometheus.write_config(discovered, "http://127.0.0.1:8000", None, token_file=token)
    prometheus.write_config(static, "http://127.0.0.1:8000/", "a-read-token", RULES, "1s", broker_targets=["127.0.0.1:5557"])
    for path in (discovered, static):
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
        done = run_promtool(promtool, "check", "config", str(path))
        assert done.returncode == 0, done.stdout + done.stderr

    body = yaml.safe_load(discovered.read_text())
    assert body["global"]["scrape_interval"] == body["global"]["evaluation_interval"] == "5s"
    assert body["rule_files"] == [str(RULES)]
    controlplane, brokers = body["scrape_configs"]
    bearer = {"type": "Bearer", "credentials_file": str(token)}
    assert controlplane["job_name"] == "rocketmq-ha-controlplane" and controlplane["metrics_path"] == "/metrics"
    assert controlplane["authorization"] == bearer
    assert controlplane["static_configs"] == [{"targets": ["127.0.0.1:8000"]}]
    assert brokers["job_name"] == "rocketmq-broker" and brokers["honor_labels"] is True
    assert "authorization" not in brokers  # the token goes to the discovery, never to the brokers
    (sd,) = brokers["http_sd_configs"]
    assert sd["url"] == "http://127.0.0.1:8000/api/v1/operations/metrics/targets" and sd["authorization"] == bearer

    body = yaml.safe_load(static.read_text())
    brokers = body["scrape_configs"][1]
    assert body["scrape_configs"][0]["authorization"] == {"type": "Bearer", "credentials": "a-read-token"}
    assert brokers["static_configs"] == [{"targets": ["127.0.0.1:5557"]}] and "http_sd_configs" not in brokers


def test_a_configuration_needs_exactly_one_token(tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        prometheus.write_config(tmp_path / "p.yml", "http://127.0.0.1:8000", None)
    with pytest.raises(ValueError, match="exactly one"):
        prometheus.write_config(tmp_path / "p.yml", "http://127.0.0.1:8000", "t", token_file=tmp_path / "t")
    with pytest.raises(ValueError, match="http"):
        prometheus.write_config(tmp_path / "p.yml", "127.0.0.1:8000", "t")


def test_the_example_configuration_passes_promtool(promtool, tmp_path):
    """docs/monitoring/prometheus.yml, its token file and rules where it expects them."""
    shutil.copy(RULES, tmp_path / RULES.name)
    (tmp_path / "rmqha.token").write_text("a-read-token\n")
    text = EXAMPLE_CONFIG.read_text().replace("/etc/prometheus/rmqha.token", str(tmp_path / "rmqha.token"))
    (tmp_path / "prometheus.yml").write_text(text)
    done = run_promtool(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_multiproc_folder_starts_empty(tmp_path):
    folder = tmp_path / "multiproc"
    folder.mkdir()
    (folder / "counter_123.db").write_bytes(b"left by an earlier run")
    assert prometheus.fresh_multiproc_dir(folder) == folder
    assert list(folder.iterdir()) == []
    assert prometheus.fresh_multiproc_dir(tmp_path / "new").is_dir()


# --- make doctor ---------------------------------------------------------------------------------------------


def test_make_doctor_installs_prometheus_for_the_tests_and_the_demo_as_it_does_chromium(monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "PROMETHEUS", tmp_path / "prometheus")
    (requirement,) = [r for r in doctor.REQUIREMENTS if r.check is doctor.check_prometheus]
    assert requirement.needed_for == frozenset({"demo", "test"}) and requirement.optional_for == frozenset({"demo"})
    assert doctor.check_prometheus() == (False, f"{tmp_path / 'prometheus'} does not exist")

    asked = []
    monkeypatch.setattr(doctor, "install_debian_package", lambda package: asked.append(package) or (False, "not root"))
    monkeypatch.setattr(doctor, "REQUIREMENTS", (requirement,))
    (for_tests,) = doctor.examine("test", install=True)
    assert for_tests.status is doctor.Status.MISSING
    assert for_tests.detail == (
        f"{tmp_path / 'prometheus'} does not exist; cannot install here: not root -> install Debian's prometheus package "
        "(apt-get install prometheus, giving /usr/bin/prometheus and /usr/bin/promtool), then run again"
    )
    (for_demo,) = doctor.examine("demo", install=True)  # the demo runs without it
    assert for_demo.status is doctor.Status.OPTIONAL_MISSING
    assert asked == ["prometheus", "prometheus"]
