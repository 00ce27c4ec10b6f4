"""mqadmin's verbs on the operator's command line (controlplane/cli/) against a real control plane
(uvicorn): the cluster and a topic's route as tables and as --json, a topic created with its message
type and deleted set by set, a controller-managed replica group's SyncStateSet, a designated election
and a metadata clean, isolation and its lift, the controller's metadata, audit runs listed and started,
and the errors an operator meets: a read token refused for a write with its code, a refusal of the
controller with its code, no token."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from controlplane.cli import main
from controlplane.models import ApiToken
from nameserver import broker_status
from nameserver.core.broker_status import parse_report
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body
from tests.nameserver.helpers import NS, register_body, register_over_rest
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SETS = {"adm-a": "127.0.0.1:10811", "adm-b": "127.0.0.1:10821"}


def controller_group(base: str, broker_token: str, name: str = "cg1", cluster: str = "adm") -> None:
    """A controller-managed group of three live replicas as brokers make it over REST: ids applied for,
    registered, beating; 1 elected master; {1, 2} in sync."""
    http = httpx.Client(base_url=f"{base}{CTL}", headers={"Authorization": f"Bearer {broker_token}"}, timeout=10)
    for i in (1, 2, 3):
        assert http.post("/brokers/apply-broker-id", json=apply_body(i, name, cluster)).status_code == 200
        body = {"clusterName": cluster, "brokerName": name, "brokerId": i, "brokerAddress": addr(i)}
        assert http.post("/brokers/register", json=body).status_code == 200
        assert http.post("/brokers/heartbeat", json=heartbeat_body(i, name, cluster, max_offset=1000)).status_code == 200
    elected = http.post("/elect-master", json={"clusterName": cluster, "brokerName": name, "brokerId": 1}).json()
    assert elected["masterBrokerId"] == 1, elected
    alter = {"brokerName": name, "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, 2], "syncStateSetEpoch": 1}
    assert http.post("/alter-sync-state-set", json=alter).status_code == 200


@pytest.fixture
def plane():
    broker = ApiToken.issue("adm-broker", "broker")[1]
    admin = ApiToken.issue("adm-admin", "admin")[1]
    viewer = ApiToken.issue("adm-viewer", "read")[1]
    with uvicorn_server() as base:
        register_over_rest(base, broker, SETS, "adm")
        controller_group(base, broker)
        yield base, admin, viewer


def rmqha(base: str, token: str | None, *args: str, stdin: str | None = None):
    env = {"RMQHA_TOKEN": token} if token else {"RMQHA_TOKEN": ""}
    return CliRunner().invoke(main, ["--url", base, *args], input=stdin, env=env, catch_exceptions=False)


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def test_cluster_topics_controller_isolation_and_audits_from_the_command_line(plane):
    base, admin, viewer = plane

    # The cluster: a table for people (a read token reads), the API's JSON for scripts, before or after the verb.
    listed = ok(rmqha(base, viewer, "clusterList"))
    assert listed.splitlines()[0].split() == [
        "cluster",
        "brokerName",
        "BID",
        "addr",
        "haAddr",
        "zone",
        "stateVersion",
        "live",
        "last",
        "heartbeat",
    ]
    assert any(line.split()[:4] == ["adm", "adm-a", "0", "127.0.0.1:10811"] and " yes " in line for line in listed.splitlines())
    scripted = json.loads(ok(rmqha(base, viewer, "--json", "clusterList")))
    assert scripted["clusterAddrTable"] == {"adm": ["adm-a", "adm-b"]}
    assert json.loads(ok(rmqha(base, viewer, "clusterList", "--json"))) == scripted
    assert "adm-a" not in ok(rmqha(base, viewer, "clusterList", "-c", "other"))

    # A topic: created with its message type, routed, listed, deleted from one set, then from the cluster.
    made = ok(rmqha(base, admin, "updateTopic", "-t", "Orders", "-c", "adm", "-r", "4", "-w", "4", "-a", "+message.type=FIFO"))
    assert made.strip() == "create or update topic Orders: OK on adm-a, adm-b"
    route = ok(rmqha(base, viewer, "topicRoute", "-t", "Orders"))
    assert [line.split() for line in route.splitlines()[:3]] == [
        ["brokerName", "read", "write", "perm", "sysFlag", "message.type"],
        ["adm-a", "4", "4", "RW-", "(6)", "0", "FIFO"],
        ["adm-b", "4", "4", "RW-", "(6)", "0", "FIFO"],
    ]
    assert ["adm", "adm-b", "0", "127.0.0.1:10821"] in [line.split()[:4] for line in route.splitlines()]
    routed = json.loads(ok(rmqha(base, viewer, "--json", "topicRoute", "-t", "Orders")))
    assert sorted(q["brokerName"] for q in routed["queueDatas"]) == ["adm-a", "adm-b"]
    assert ["Orders", "adm-a,", "adm-b", "8", "FIFO"] in [
        line.split() for line in ok(rmqha(base, viewer, "topicList")).splitlines()
    ]
    readonly = ok(rmqha(base, admin, "updateTopic", "-t", "Orders", "-b", "adm-b", "-p", "4", "-r", "4", "-w", "4"))
    assert readonly.strip() == "create or update topic Orders: OK on adm-b"
    rows = [line.split() for line in ok(rmqha(base, viewer, "topicRoute", "-t", "Orders")).splitlines()]
    assert ["adm-b", "4", "4", "R--", "(4)", "0", "FIFO"] in rows  # the message type kept: not named, not changed
    assert (
        ok(rmqha(base, admin, "deleteTopic", "-t", "Orders", "-b", "adm-a")).strip() == "delete topic Orders: OK, 1 broker set(s)"
    )
    assert [
        q["brokerName"] for q in json.loads(ok(rmqha(base, viewer, "--json", "topicRoute", "-t", "Orders")))["queueDatas"]
    ] == ["adm-b"]
    assert json.loads(ok(rmqha(base, admin, "--json", "deleteTopic", "-t", "Orders", "-c", "adm")))["deletedQueueDatas"] == 1
    gone = rmqha(base, viewer, "topicRoute", "-t", "Orders")
    assert gone.exit_code == 1 and "refused (HTTP 404 17 TOPIC_NOT_EXIST)" in gone.output

    # The controller: the SyncStateSet replica by replica, a designated election, a metadata clean.
    sets = ok(rmqha(base, viewer, "getSyncStateSet", "-b", "cg1"))
    assert "#brokerName cg1  #MasterBrokerId 1  #MasterAddr 127.0.0.1:10910  #MasterEpoch 1  #SyncStateSetEpoch 2" in sets
    assert [line.split() for line in sets.splitlines()[2:5]] == [
        ["1", addr(1), "master", "yes", "yes"],
        ["2", addr(2), "yes", "yes"],
        ["3", addr(3), "no", "yes"],
    ]
    by_cluster = json.loads(ok(rmqha(base, viewer, "--json", "getSyncStateSet", "-c", "adm")))
    assert "cg1" not in by_cluster["brokerReplicasInfo"]  # not registered with the nameserver: not in the cluster's sets
    elected = ok(rmqha(base, admin, "electMaster", "-bn", "cg1", "-b", "2"))
    assert elected.startswith(f"cg1: master 2 at {addr(2)}, master epoch 2, SyncStateSet {{2}}"), elected
    assert (
        json.loads(ok(rmqha(base, viewer, "--json", "getSyncStateSet", "-b", "cg1")))["brokerReplicasInfo"]["cg1"][
            "masterBrokerId"
        ]
        == 2
    )
    alive = rmqha(base, admin, "cleanBrokerMetadata", "-bn", "cg1", "-b", "3")
    assert alive.exit_code == 1 and "2009 CONTROLLER_INVALID_CLEAN_BROKER_METADATA" in alive.output

    # Isolation of one replica, said twice, then lifted.
    assert ok(rmqha(base, admin, "isolate", "-b", "cg1", "-i", "3")).strip() == f"cg1/3 at {addr(3)}: isolated"
    assert ok(rmqha(base, admin, "isolate", "-b", "cg1", "-i", "3")).strip() == f"cg1/3 at {addr(3)}: isolated (already)"
    assert ok(rmqha(base, admin, "unisolate", "-b", "cg1", "-i", "3")).strip() == f"cg1/3 at {addr(3)}: not isolated"
    no_such = rmqha(base, admin, "isolate", "-b", "cg1", "-i", "7")
    assert no_such.exit_code == 1 and "refused (HTTP 400 29 INVALID_PARAMETER)" in no_such.output

    cleaned = ok(rmqha(base, admin, "cleanBrokerMetadata", "-bn", "cg1", "-b", "3", "-l"))
    assert cleaned.startswith("clear broker cg1 metadata from controller: OK; now cg1: master 2"), cleaned
    left = json.loads(ok(rmqha(base, viewer, "--json", "getSyncStateSet", "-b", "cg1")))["brokerReplicasInfo"]["cg1"]
    assert 3 not in [r["brokerId"] for r in left["inSyncReplicas"] + left["notInSyncReplicas"]]
    assert "#ControllerGroup          postgres" in ok(rmqha(base, viewer, "getControllerMetaData"))

    # Audit runs: none, one started (no Celery worker here: it stays queued), a second refused while it is.
    assert ok(rmqha(base, viewer, "auditRuns")).split() == [
        "run",
        "status",
        "stage",
        "progress",
        "trigger",
        "by",
        "created",
        "rollbacks",
        "again",
        "error",
    ]
    started = ok(rmqha(base, admin, "auditRun"))
    run_id = json.loads(ok(rmqha(base, viewer, "--json", "auditRuns")))["runs"][0]["id"]
    assert started.strip() == f"audit run {run_id} queued (rmqha auditRuns follows it)"
    runs = ok(rmqha(base, viewer, "auditRuns"))
    assert runs.splitlines()[1].split()[:5] == [str(run_id), "queued", "queued", "0%", "api"] and f"active run: {run_id}" in runs
    busy = rmqha(base, admin, "auditRun")
    assert busy.exit_code == 1 and f"refused (HTTP 409 2 SYSTEM_BUSY): audit run {run_id} is already queued" in busy.output

    # What an operator meets: a read token refused for a write (with the code), the JSON of a refusal, no token.
    refused = rmqha(base, viewer, "updateTopic", "-t", "Orders", "-c", "adm")
    assert refused.exit_code == 1 and "refused (HTTP 403 16 NO_PERMISSION)" in refused.output
    assert json.loads(rmqha(base, viewer, "--json", "isolate", "-b", "cg1", "-i", "2").output)["code"] == 16
    missing = rmqha(base, None, "clusterList")
    assert missing.exit_code == 2 and missing.output.splitlines() == [
        "Error: no token: give --token-file or set RMQHA_TOKEN (an admin's or an operator's API token)"
    ]


def report(name: str, addr_: str, queues: list, offsets: list) -> dict:
    """A broker's status report as its broker_status frame carries it (docs/websocket.md)."""
    return {
        "clusterName": "adm",
        "brokerName": name,
        "brokerId": 0,
        "brokerAddr": addr_,
        "status": {"role": "SYNC_MASTER", "metaMode": "WRITER", "masterEpoch": 1, "writable": True, "uptimeMs": 65_000},
        "config": {"brokerName": name, "inSyncReplicas": "1", "controlPlaneToken": "never shown"},
        "dynamicKeys": ["inSyncReplicas"],
        "queues": queues,
        "offsets": offsets,
    }


def test_what_brokers_report_read_from_the_command_line(plane):
    """The verbs over brokers' status reports (stored as the broker_status frame's handler stores them):
    status, config, consumer progress, topic status; the changes a broker carries out reach the REST
    API in its shapes (no broker process here: refused with the code an operator would read)."""
    base, admin, viewer = plane
    broker_status.store(
        parse_report(
            report(
                "adm-a",
                SETS["adm-a"],
                [["Orders", 0, 0, 100], ["Orders", 1, 5, 50]],
                [["G1", "Orders", 0, 90], ["G1", "Orders", 1, 20]],
            )
        )
    )
    broker_status.store(
        parse_report(report("adm-b", SETS["adm-b"], [["Orders", 0, 0, 10]], [["G1", "Orders", 0, 10], ["G2", "Orders", 0, 3]]))
    )

    status = ok(rmqha(base, viewer, "brokerStatus", "-b", "adm-a")).splitlines()
    assert status[0].startswith(f"adm-a/0 at {SETS['adm-a']} (cluster adm; alive, reported ") and status[0].endswith(" s ago)")
    assert ["role", "SYNC_MASTER"] in [line.split() for line in status]
    assert (
        json.loads(ok(rmqha(base, viewer, "--json", "brokerStatus", "-b", "adm-a", "-i", "0")))["brokers"][0]["status"][
            "masterEpoch"
        ]
        == 1
    )
    none = rmqha(base, viewer, "brokerStatus", "-b", "adm-a", "-i", "5")
    assert none.exit_code == 1 and "refused (HTTP 404 211 BROKER_NOT_EXIST)" in none.output
    config = ok(rmqha(base, viewer, "getBrokerConfig", "-b", "adm-a"))
    assert "*inSyncReplicas  = 1" in config and " brokerName      = adm-a" in config and "controlPlaneToken" not in config

    assert [line.split() for line in ok(rmqha(base, viewer, "topicStatus", "-t", "Orders")).splitlines()] == [
        ["brokerName", "QID", "min", "offset", "max", "offset", "report"],
        ["adm-a", "0", "0", "100", "live"],
        ["adm-a", "1", "5", "50", "live"],
        ["adm-b", "0", "0", "10", "live"],
        ["messages", "held:", "155"],
    ]
    assert [line.split() for line in ok(rmqha(base, viewer, "consumerProgress")).splitlines()][1:] == [
        ["G1", "Orders", "3", "120", "160", "40", "live"],
        ["G2", "Orders", "1", "3", "10", "7", "live"],
    ]
    progress = ok(rmqha(base, viewer, "consumerProgress", "-g", "G1")).splitlines()
    assert [line.split() for line in progress[1:4]] == [
        ["Orders", "adm-a", "0", "90", "100", "10", "live"],
        ["Orders", "adm-a", "1", "20", "50", "30", "live"],
        ["Orders", "adm-b", "0", "10", "10", "0", "live"],
    ]
    assert progress[-1] == "Consume Diff Total: 40"
    unknown = rmqha(base, viewer, "consumerProgress", "-g", "nobody")
    assert unknown.exit_code == 1 and "refused (HTTP 404 26 SUBSCRIPTION_GROUP_NOT_EXIST)" in unknown.output

    # Changes a broker carries out: checked by the control plane first, then asked of the broker (none here).
    not_dynamic = rmqha(base, admin, "updateBrokerConfig", "-b", "adm-a", "-k", "noSuchKey", "-v", "1", "--preview")
    assert not_dynamic.exit_code == 1 and "refused (HTTP 400 29 INVALID_PARAMETER)" in not_dynamic.output
    assert "unknown broker.conf key" in not_dynamic.output
    silent = rmqha(base, admin, "updateBrokerConfig", "-b", "adm-a", "-k", "inSyncReplicas", "-v", "2", "--yes")
    assert silent.exit_code == 1 and "refused (HTTP 503 14" in silent.output and "nothing was changed" in silent.output
    no_route = rmqha(base, admin, "resetOffsetByTime", "-g", "G1", "-t", "Orders", "-s", "now", "--preview")
    assert no_route.exit_code == 1 and "refused (HTTP 404 17 TOPIC_NOT_EXIST): topic Orders has no route" in no_route.output
    ok(rmqha(base, admin, "updateTopic", "-t", "Orders", "-c", "adm"))
    reset = rmqha(base, admin, "resetOffsetByTime", "-g", "G1", "-t", "Orders", "-s", "2024-01-02#03:04:05:000", "--preview")
    assert reset.exit_code == 1 and "refused (HTTP 503 14" in reset.output, reset.output
    viewer_reset = rmqha(base, viewer, "resetOffsetByTime", "-g", "G1", "-t", "Orders", "-o", "0", "--yes")
    assert viewer_reset.exit_code == 1 and "refused (HTTP 403 16 NO_PERMISSION)" in viewer_reset.output

    # Ours: the replica group's headroom, and a failover drill's plan (its brokers registered with the
    # nameserver as controller-mode brokers do; a drill run needs brokers that take over: the lead's e2e).
    room = ok(rmqha(base, viewer, "headroom", "-b", "cg1")).splitlines()
    assert room[0] == "cg1 (cluster adm): 1 more replica loss before writes stop; writes taken"
    assert room[-1].endswith("(RocketMQ's defaults: no report from the master)")
    assert json.loads(ok(rmqha(base, viewer, "--json", "headroom", "-b", "cg1")))["losses"] == 1
    broker = ApiToken.issue("adm-broker-2", "broker")[1]
    for ns_id, controller_id in ((0, 1), (2, 2), (3, 3)):
        r = httpx.post(
            f"{base}{NS}/brokers/register",
            headers={"Authorization": f"Bearer {broker}"},
            json=register_body(ns_id, addr(controller_id), name="cg1", cluster="adm", topics={}),
            timeout=10,
        )
        assert r.status_code == 200, r.text
    plan = ok(rmqha(base, admin, "drill", "-b", "cg1", "--preview")).splitlines()
    assert plan[0] == f"cg1: master 1 ({addr(1)}) -> 2 ({addr(2)}) at master epoch 1, SyncStateSet {{1, 2}}", plan
    assert ok(rmqha(base, viewer, "drills")).split() == [
        "drill",
        "brokerName",
        "master",
        "epoch",
        "RTO",
        "ms",
        "at",
        "risk",
        "lost",
        "outcome",
        "started",
        "by",
    ]
    outside = rmqha(base, admin, "drill", "-b", "cg1", "-i", "3", "--preview")
    assert outside.exit_code == 1 and "refused (HTTP 409 2012" in outside.output, outside.output
