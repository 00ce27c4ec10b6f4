"""The served OpenAPI schema holds against the real server: schemathesis (issue 14) fuzzes every
operation of /api/schema/ on a real uvicorn process, with every check it has, once per kind of caller
(an admin token, a broker token, a broker token bound to one cluster).

What it asserts, in the words of the issue: no server error, no response outside what the schema
declares (status, content type, headers, body), invalid input refused and valid input accepted as the
schema describes it. Before the run the cluster is given realistic state through the same REST calls
brokers and operators make (two broker sets registered in two clusters, a controller-managed set with
an elected master and a two-member SyncStateSet, topics, offset events, an audit run), and the fuzzer
draws names and ids from that state half of the time, so operations reach their real code paths and
not only their 404s.

Deterministic: a fixed seed, a bounded number of examples per operation, one worker, no example
database or cache carried between runs. Every check runs everywhere; the one configured is
positive_data_acceptance, which also accepts 400 on the few operations whose documented rules the
schema cannot state (``RULES_OUTSIDE_THE_SCHEMA``). A failure reads as the counts per check, then
per failing case its operation, checks, status and a reproducing curl; the whole schemathesis output,
its configuration and its JSON report are kept under test-artifacts/schemathesis-<caller>/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from controlplane.models import ApiToken, TokenScope
from testkit.controlplane import running_web
from testkit.procs import python
from tests.procs import ARTIFACTS, child_env, free_port

# reset_sequences: the seeded rows get the same ids every run, so the fuzzer draws the same values.
pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, reset_sequences=True)]

SEED = 14  # the issue's number: any fixed value makes a run repeatable
MAX_EXAMPLES = 10  # per operation in the fuzzing phase (the coverage phase enumerates its own cases)
RUN_TIMEOUT_S = 240.0  # a hung run fails the test, readably, before pytest-timeout (300 s) would
REQUEST_TIMEOUT_S = 10.0
CURL_CHARS = 600  # a generated body can be 100 kB; the summary shows its start
SERVER_LOG_LINES = 40

CLUSTER, OTHER_CLUSTER = "fuzz-cluster", "fuzz-other"
BROKER_SET, OTHER_SET = "fuzz-broker-a", "fuzz-broker-c"
TOPIC, CREATED_TOPIC, OTHER_TOPIC = "FuzzOrders", "FuzzPayments", "FuzzOther"
ACL_USER = "fuzz-alice"
HEARTBEAT_TIMEOUT_MS = 3_600_000  # the seeded brokers stay alive for the whole run


def broker_addr(set_name: str, broker_id: int) -> str:
    return f"127.0.0.1:{30911 + 100 * (set_name == OTHER_SET) + 10 * broker_id}"


ALL_PHASES = "examples,coverage,fuzzing,stateful"
# The coverage phase walks every schema's boundary and negative values (and unexpected methods): the
# input checks, which are the same whoever calls and which the admin token reaches on every operation.
# The other callers are fuzzed and driven through the stateful links, where what they may do differs.
CALLER_PHASES = "examples,fuzzing,stateful"


@dataclass(frozen=True)
class Principal:
    label: str
    scope: str
    cluster: str = ""
    phases: str = CALLER_PHASES


PRINCIPALS = [
    Principal("admin", TokenScope.ADMIN, phases=ALL_PHASES),
    Principal("broker", TokenScope.BROKER),
    # A broker of one cluster: every call about the other cluster must be refused (403), not served.
    Principal("cluster-bound-broker", TokenScope.BROKER, CLUSTER),
]


# --- realistic state, made through the API ------------------------------------------------------------


def _ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, f"seeding {response.request.method} {response.request.url}: {response.text}"
    return response.json()


def seed_cluster(base: str, admin_token: str, broker_token: str) -> dict[str, list]:
    """What brokers and an operator do on a fresh cluster; returns the names and ids the fuzzer may draw."""
    ns, ctl = f"{base}/api/v1/nameserver", f"{base}/api/v1/controller"
    with (
        httpx.Client(headers={"Authorization": f"Bearer {broker_token}"}, timeout=REQUEST_TIMEOUT_S) as broker,
        httpx.Client(headers={"Authorization": f"Bearer {admin_token}"}, timeout=REQUEST_TIMEOUT_S) as admin,
    ):
        for cluster, name, topic, ids in ((CLUSTER, BROKER_SET, TOPIC, (0, 1)), (OTHER_CLUSTER, OTHER_SET, OTHER_TOPIC, (0,))):
            for broker_id in ids:
                _ok(
                    broker.post(
                        f"{ns}/brokers/register",
                        json={
                            "clusterName": cluster,
                            "brokerName": name,
                            "brokerAddr": broker_addr(name, broker_id),
                            "haServerAddr": broker_addr(name, broker_id).replace(":309", ":319"),
                            "brokerId": broker_id,
                            "heartbeatTimeoutMillis": HEARTBEAT_TIMEOUT_MS,
                            "enableActingMaster": True,
                            "topicConfigWrapper": {
                                "dataVersion": {"stateVersion": 1, "counter": 1, "timestamp": 1},
                                "topicConfigTable": {
                                    topic: {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
                                    "%RETRY%fuzz-consumers": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
                                },
                            },
                        },
                    )
                )
        _ok(
            broker.post(
                f"{ns}/brokers/heartbeat",
                json={
                    "clusterName": CLUSTER,
                    "brokerName": BROKER_SET,
                    "brokerAddr": broker_addr(BROKER_SET, 0),
                    "brokerId": 0,
                    "waterLevels": {
                        "brokerName": BROKER_SET,
                        "brokerId": 0,
                        "role": "SYNC_MASTER",
                        "masterEpoch": 1,
                        "maxOffset": 4096,
                        "confirmOffset": 4096,
                        "minOffset": 0,
                        "slaves": [
                            {
                                "brokerId": 1,
                                "addr": broker_addr(BROKER_SET, 1),
                                "ackOffset": 4096,
                                "lagBytes": 0,
                                "lastCaughtUpMs": 1,
                                "transferBytesPerS": 0,
                                "inSyncStateSet": True,
                            }
                        ],
                    },
                },
            )
        )
        # The controller's view of the same set (controller ids start at 1): apply, register, beat,
        # elect, then the master takes its slave into the SyncStateSet.
        for broker_id in (1, 2):
            addr = broker_addr(BROKER_SET, broker_id - 1)
            _ok(
                broker.post(
                    f"{ctl}/brokers/apply-broker-id",
                    json={
                        "clusterName": CLUSTER,
                        "brokerName": BROKER_SET,
                        "appliedBrokerId": broker_id,
                        "registerCheckCode": f"{addr};1",
                    },
                )
            )
            _ok(
                broker.post(
                    f"{ctl}/brokers/register",
                    json={"clusterName": CLUSTER, "brokerName": BROKER_SET, "brokerId": broker_id, "brokerAddress": addr},
                )
            )
            _ok(
                broker.post(
                    f"{ctl}/brokers/heartbeat",
                    json={
                        "clusterName": CLUSTER,
                        "brokerName": BROKER_SET,
                        "brokerAddr": addr,
                        "brokerId": broker_id,
                        "epoch": 0,
                        "maxOffset": 4096,
                        "confirmOffset": 4096,
                        "heartbeatTimeoutMillis": HEARTBEAT_TIMEOUT_MS,
                    },
                )
            )
        elected = _ok(broker.post(f"{ctl}/elect-master", json={"clusterName": CLUSTER, "brokerName": BROKER_SET, "brokerId": 1}))
        _ok(
            broker.post(
                f"{ctl}/alter-sync-state-set",
                json={
                    "brokerName": BROKER_SET,
                    "masterBrokerId": 1,
                    "masterEpoch": elected["masterEpoch"],
                    "syncStateSet": [1, 2],
                    "syncStateSetEpoch": elected["syncStateSetEpoch"],
                },
            )
        )
        _ok(admin.post(f"{ns}/topics", json={"topicName": CREATED_TOPIC, "clusterName": CLUSTER, "readQueueNums": 2}))
        _ok(
            broker.post(
                f"{base}/api/v1/audits/offset-events",
                json={
                    "clusterName": CLUSTER,
                    "brokerName": BROKER_SET,
                    "brokerId": 0,
                    "role": "SYNC_MASTER",
                    "masterEpoch": elected["masterEpoch"],
                    "events": [
                        {
                            "consumerGroup": "fuzz-consumers",
                            "topic": TOPIC,
                            "queueId": 0,
                            "offset": 128,
                            "source": "client_commit",
                            "timestampMs": 1_700_000_000_000,
                        }
                    ],
                },
            ),
            202,
        )
        run = _ok(admin.post(f"{base}/api/v1/audits/runs"), 202)  # no Celery worker here: it stays queued
        # An ACL user with a policy (docs/acl.md), for the users' and policies' operations to find.
        acl = f"{base}/api/v1/clusters/{CLUSTER}/acl"
        _ok(admin.post(f"{acl}/users", json={"username": ACL_USER, "password": "fuzz-secret"}))
        _ok(
            admin.post(
                f"{acl}/policies", json={"subject": ACL_USER, "entries": [{"resources": [f"Topic:{TOPIC}"], "actions": ["Pub"]}]}
            )
        )
    return {
        "clusters": [CLUSTER, OTHER_CLUSTER],
        "broker_names": [BROKER_SET, OTHER_SET],
        "broker_addrs": [broker_addr(BROKER_SET, 0), broker_addr(BROKER_SET, 1), broker_addr(OTHER_SET, 0)],
        "broker_ids": [0, 1, 2],
        "topics": [TOPIC, CREATED_TOPIC, OTHER_TOPIC],
        "run_ids": [run["id"]],
        "run_refs": [str(run["id"]), "latest"],
        "acl_users": [ACL_USER],
        "acl_subjects": [ACL_USER, f"User:{ACL_USER}"],
    }


# --- the schemathesis run -------------------------------------------------------------------------------

# Which request values are drawn from the seeded state (half of the time; the other half is generated).
BINDINGS = {
    "clusters": ["query.clusterName", "body.clusterName", "path.cluster"],
    "broker_names": ["path.broker_name", "query.brokerName", "body.brokerName", "body.brokerNames[*]"],
    "broker_addrs": ["body.brokerAddr", "body.brokerAddress"],
    "broker_ids": ["body.brokerId", "body.masterBrokerId", "body.appliedBrokerId"],
    "topics": ["path.topic", "body.topicName"],
    "run_ids": ["path.run_id"],
    "run_refs": ["query.run"],
    "acl_users": ["path.username", "body.username"],
    "acl_subjects": ["body.subject"],
}


# positive_data_acceptance holds every operation to "a request the schema allows is not refused as
# invalid". Where the API refuses schema-valid input by a documented rule that OpenAPI 3.0 cannot state,
# because it relates two values, depends on stored state or on who calls, 400 is a right answer to
# valid-looking input. For those operations only (and callers), and for that status only, the check
# accepts it:
RULES_OUTSIDE_THE_SCHEMA = {
    "isolateBroker": "a brokerId that is not in the named set: 400 + 29 (docs/api.md, Operations)",
    "unisolateBroker": "a brokerId that is not in the named set: 400 + 29 (docs/api.md, Operations)",
    "runFailoverDrill": "a brokerId that is no replica of the named set, or is its master: 400 + 29 (docs/failover.md)",
    "brokerHeartbeat": "waterLevels.brokerName is the heartbeat's brokerName; slave brokerIds are unique (docs/websocket.md)",
    "registerBroker": "topicConfigTable's keys are topic names (OpenAPI 3.0 lacks propertyNames), each entry's topicName its key",
    "updateStaticTopic": "each broker set once: 400 + 29 (docs/static-topics.md)",
    "remappingStaticTopic": "a logical queue beyond the topic's, one already on its target, one named twice, "
    "a drain into itself: 400 + 29 (docs/static-topics.md)",
    "createAcl": "at most 256 entries once one per resource, with the policy's own; an IPv6-looking source IP "
    "that is none: 400 + 29 (docs/acl.md)",
    "updateAcl": "at most 256 entries once one per resource, with the policy's own; an IPv6-looking source IP "
    "that is none: 400 + 29 (docs/acl.md)",
    "queryMsgByKey": "key and uniqueKey exclude each other; begin..end at most 7 days: 400 + 29 (docs/messages.md §5)",
    "queryMsgById": "an id whose port is beyond 65535: 400 + 29 (docs/messages.md §5)",
    "downloadMessageBody": "an id whose port is beyond 65535: 400 + 29 (docs/messages.md §5)",
    "queryMsgTraceById": "an id whose port is beyond 65535: 400 + 29 (docs/messages.md §5)",
    "resendDeadLetters": "msgIds and all exclude each other; an id of no broker of the cluster: 400 + 29 (docs/messages.md §5)",
}
# The message operations ask the brokers over their websockets; the seeded brokers have none, so a set is
# unreachable: 503 + 14 SERVICE_NOT_AVAILABLE (docs/messages.md §5), the documented answer.
BROKERS_ASKED = [
    "queryMsgByKey",
    "queryMsgById",
    "queryMsgByOffset",
    "downloadMessageBody",
    "queryMsgTraceById",
    "listDeadLetters",
    "exportDeadLetters",
    "resendDeadLetters",
]
UNREACHABLE_IS_503 = 'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]'
# One schema serves every caller, but a broker token elects only itself, so its election names its
# brokerId, which an operator's automatic election leaves out (docs/api.md, Controller).
BROKER_RULES_OUTSIDE_THE_SCHEMA = {
    "electMaster": "a broker's election without its brokerId: 400 + 2005 CONTROLLER_INVALID_REQUEST"
}
POSITIVE_DATA_ACCEPTANCE = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]  # schemathesis' own default


def _toml(value) -> str:
    return json.dumps(value)  # a JSON string, number or list of them is a TOML value too


def schemathesis_config(state: dict[str, list], rules_outside_the_schema: dict[str, str]) -> str:
    lines = [
        "# Written by tests/test_api_schema_fuzz.py for one run.",
        f"seed = {SEED}",
        f"request-timeout = {REQUEST_TIMEOUT_S}",
        "workers = 1  # one request at a time: the server's state evolves the same way every run",
        "",
        "[cache]",
        "enabled = false  # no state kept between runs (the probes' and observed requests' cache) either",
        "",
        "[generation]",
        'database = "none"  # nothing carried over from earlier runs: the seed alone decides',
        f"max-examples = {MAX_EXAMPLES}",
        "",
        "[checks]",
        "enabled = true  # every check schemathesis has; none is switched off",
        "",
    ]
    for dictionary, values in state.items():
        lines += [f"[dictionaries.{dictionary}]", f"values = {_toml(values)}", ""]
    lines.append("[parameters]")
    for dictionary, keys in BINDINGS.items():
        lines += [f'"{key}" = {{ dictionary = "{dictionary}", probability = 0.5 }}' for key in keys]
    for operation_id, rule in rules_outside_the_schema.items():
        lines += [
            "",
            "[[operations]]",
            f'include-operation-id = "{operation_id}"',
            f"# {rule}",
            f"checks.positive_data_acceptance.expected-statuses = {_toml([*POSITIVE_DATA_ACCEPTANCE, '400'])}",
            *([UNREACHABLE_IS_503] if operation_id in BROKERS_ASKED else []),
        ]
    for operation_id in (op for op in BROKERS_ASKED if op not in rules_outside_the_schema):
        lines += ["", "[[operations]]", f'include-operation-id = "{operation_id}"', UNREACHABLE_IS_503]
    return "\n".join(lines) + "\n"


def run_schemathesis(base: str, token: str, phases: str, config: Path, out_dir: Path) -> subprocess.CompletedProcess:
    argv = python(
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "--no-color",
        "run",
        f"{base}/api/schema/?format=json",
        "--checks",
        "all",
        "--phases",
        phases,
        "--header",
        f"Authorization: Bearer {token}",
        "--report",
        "json",
        "--report-dir",
        str(out_dir),
        "--report-json-path",
        str(out_dir / "report.json"),
    )
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, cwd=out_dir)
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"schemathesis did not finish within {RUN_TIMEOUT_S:g} s; its output so far:\n{partial[-6000:]}")


# --- a readable verdict -----------------------------------------------------------------------------------

_OPERATION = re.compile(r"^_{3,} (?P<operation>[A-Z]+ \S+) _{3,}$", re.M)
_CASE = re.compile(r"^\d+\. Test Case ID: \S+$", re.M)


def failing_cases(output: str) -> list[str]:
    """One line per failing case of schemathesis' FAILURES section: operation, checks, status, curl."""
    section = output.partition("= FAILURES =")[2].partition("= WARNINGS =")[0].partition("= SUMMARY =")[0]
    lines = []
    heads = list(_OPERATION.finditer(section))
    for i, head in enumerate(heads):
        block = section[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(section)]
        for case in _CASE.split(block)[1:]:
            checks = "; ".join(re.findall(r"^- (ST\d+ .+)$", case, re.M)) or "?"
            status = re.search(r"^\[(\d{3})\]", case, re.M)
            curl = re.search(r"^ {4}(curl .+)$", case, re.M)
            command = curl.group(1) if curl else "(no reproduction printed)"
            if len(command) > CURL_CHARS:
                command = command[:CURL_CHARS] + f"... ({len(command)} chars)"
            lines.append(f"{head['operation']}\n    {checks} -> {status.group(1) if status else 'no response'}\n    {command}")
    return lines


def verdict(label: str, result: subprocess.CompletedProcess, report: dict | None, artifacts: Path, server_log: Path) -> str:
    """What a reader needs first: the counts per check, then each failing case, then where the rest is."""
    head = [f"schemathesis with the {label} token exited with {result.returncode}"]
    if report:
        cases = report["test_cases"]
        head.append(
            f"{report['operations']['tested']} operations, {cases['generated']} test cases, "
            f"{cases['unique_failures']} unique failures in {cases['with_failures']} cases, {cases['errored']} errored"
        )
        head += [f"  {f['code']} {f['title']}: {f['count']} ({', '.join(f['operations'])})" for f in report["failures"]]
        head += [f"  error: {e}" for e in report.get("errors") or []]
    cases_text = failing_cases(result.stdout)
    body = cases_text or ([] if result.returncode == 0 else [result.stdout[-6000:], result.stderr[-3000:]])
    if report and any(f["code"] == "ST101" for f in report["failures"]) and server_log.exists():
        body += [
            "",
            "the server log's end (server errors):",
            *server_log.read_text(errors="replace").splitlines()[-SERVER_LOG_LINES:],
        ]
    tail = [f"full output and JSON report: {artifacts}; server log: {server_log}"]
    return "\n".join([*head, "", *body, "", *tail])


@pytest.mark.parametrize("principal", PRINCIPALS, ids=lambda p: p.label)
def test_the_served_schema_holds_under_schemathesis(principal: Principal):
    seed_admin = ApiToken.issue("fuzz-seed-admin", TokenScope.ADMIN)[1]
    seed_broker = ApiToken.issue("fuzz-seed-broker", TokenScope.BROKER)[1]
    token = ApiToken.issue(f"fuzz-{principal.label}", principal.scope, principal.cluster)[1]
    artifacts = ARTIFACTS / f"schemathesis-{principal.label}"
    artifacts.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server_log = ARTIFACTS / f"uvicorn-{port}-{os.getpid()}.log"  # where running_web writes it
    report_path = artifacts / "report.json"
    report_path.unlink(missing_ok=True)
    with running_web(child_env(), ARTIFACTS, port=port) as base:
        state = seed_cluster(base, seed_admin, seed_broker)
        config = artifacts / "schemathesis.toml"
        rules = RULES_OUTSIDE_THE_SCHEMA | (BROKER_RULES_OUTSIDE_THE_SCHEMA if principal.scope == TokenScope.BROKER else {})
        config.write_text(schemathesis_config(state, rules))
        result = run_schemathesis(base, token, principal.phases, config, artifacts)
    (artifacts / "output.txt").write_text(result.stdout + result.stderr)
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    summary = verdict(principal.label, result, report, artifacts, server_log)
    print(summary)
    assert result.returncode == 0 and report is not None and report["operations"]["tested"] > 0, summary
