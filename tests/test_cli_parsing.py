"""The command line's own parts, without a server: mqadmin's time formats for resetOffsetByTime -s,
updateTopic's -a attributes, repeated and comma-separated names, the usage errors caught before any
request (the URL points nowhere: a request would fail with exit 1, not 2), and the tables of the verbs
whose answers come from brokers (brokerStatus, getBrokerConfig, updateBrokerConfig, consumerProgress,
resetOffsetByTime) rendered from answers shaped as the REST contract gives them."""

from __future__ import annotations

from datetime import datetime

import click
import pytest
from click.testing import CliRunner

from controlplane import cli
from controlplane.cli import brokers, client, consumers, operations, root, topics

pytestmark = pytest.mark.unit

NOWHERE = "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("now", 1_700_000_000_123),
        ("1700000000999", 1_700_000_000_999),
        ("2024-01-02#03:04:05:006", int(datetime(2024, 1, 2, 3, 4, 5).timestamp()) * 1000 + 6),
        ("2024-01-02#03:04:05:6", int(datetime(2024, 1, 2, 3, 4, 5).timestamp()) * 1000 + 6),  # SSS: milliseconds
        (" 2024-12-31#23:59:59:999 ", int(datetime(2024, 12, 31, 23, 59, 59).timestamp()) * 1000 + 999),
    ],
)
def test_reset_times_are_read_as_mqadmin_reads_them(text, ms):
    assert consumers.parse_timestamp(text, now_ms=1_700_000_000_123) == ms


@pytest.mark.parametrize(
    "text", ["yesterday", "2024-01-02 03:04:05", "2024-01-02#03:04:05", "2024-13-02#03:04:05:000", "-5", "1.5"]
)
def test_a_time_mqadmin_would_not_read_is_refused(text):
    with pytest.raises(click.BadParameter, match="now, epoch milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"):
        consumers.parse_timestamp(text)


def test_attributes_names_and_permissions():
    assert topics.parse_attributes(["+message.type=FIFO"]) == {"+message.type": "FIFO"}
    assert topics.parse_attributes(["message.type=DELAY,", "+other=x"]) == {"message.type": "DELAY", "+other": "x"}
    with pytest.raises(click.BadParameter, match="removing an attribute is not supported"):
        topics.parse_attributes(["-message.type"])
    with pytest.raises(click.BadParameter, match="write \\+key=value"):
        topics.parse_attributes(["message.type"])
    assert root.names(["a,b", "b", " c ,", "a"]) == ["a", "b", "c"]
    assert [topics._perm(p) for p in (6, 4, 2, 0)] == ["RW- (6)", "R-- (4)", "-W- (2)", "--- (0)"]
    assert client.seg("a%b|c") == "a%25b%7Cc"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["resetOffsetByTime", "-g", "G", "-t", "T"], "give exactly one of -s (a time) or -o (an offset)"),
        (["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now", "-o", "5"], "give exactly one of -s"),
        (["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "soon"], "'soon': give now, epoch milliseconds"),
        (["resetOffsetByTime", "-g", "G", "-t", "T", "-o", "-2"], "-2 is not in the range x>=-1"),
        (["--json", "resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now"], "with --json, give --preview or --yes"),
        (["updateBrokerConfig", "-b", "g1", "-k", "k", "-v", "v", "--json"], "with --json, give --preview or --yes"),
        (["updateTopic", "-t", "T"], "give exactly one of -c (a cluster) or -b (broker sets)"),
        (["updateTopic", "-t", "T", "-c", "c1", "-b", "g1"], "give exactly one of -c"),
        (["updateTopic", "-t", "T", "-c", "c1", "-p", "9"], "9 is not in the range 0<=x<=7"),
        (["updateTopic", "-t", "T", "-c", "c1", "-a", "-message.type"], "removing an attribute is not supported"),
        (["consumerProgress", "-t", "T"], "-t needs -g"),
        (["getSyncStateSet"], "give -b (broker sets) or -c (a cluster)"),
        (["electMaster", "-b", "2"], "Missing option '-bn' / '--brokerName'"),
        (["isolate", "-b", "g1"], "Missing option '-i' / '--brokerId'"),
    ],
)
def test_usage_errors_come_before_any_request(args, message):
    result = CliRunner().invoke(cli.main, ["--url", NOWHERE, *args], env={"RMQHA_TOKEN": "t"})
    assert result.exit_code == 2 and message in result.output, result.output


def test_help_needs_no_token():
    result = CliRunner().invoke(cli.main, ["resetOffsetByTime", "--help"], env={"RMQHA_TOKEN": ""})
    assert result.exit_code == 0 and "yyyy-MM-dd#HH:mm:ss:SSS" in result.output


BROKERS = {
    "brokers": [
        {
            "clusterName": "c1",
            "brokerName": "g1",
            "brokerId": 1,
            "brokerAddr": "10.0.0.1:10911",
            "alive": True,
            "stale": False,
            "reportedAtMs": 1_700_000_000_000,
            "ageMs": 1_500,
            "status": {"role": "SYNC_MASTER", "metaMode": "WRITER", "masterEpoch": 3, "writable": True, "uptimeMs": 65_000},
            "config": {"brokerName": "g1", "inSyncReplicas": "2", "flushDiskType": "ASYNC_FLUSH"},
            "dynamicKeys": ["inSyncReplicas"],
        },
        {
            "clusterName": "c1",
            "brokerName": "g1",
            "brokerId": 2,
            "brokerAddr": "10.0.0.2:10911",
            "alive": False,
            "stale": True,
            "reportedAtMs": 1_699_999_000_000,
            "ageMs": 61_000,
            "status": {"role": "SLAVE", "metaMode": "FOLLOWER", "masterEpoch": 3, "writable": False},
            "config": {},
            "dynamicKeys": [],
        },
    ]
}


def test_broker_status_and_config_as_mqadmin_lists_them():
    status = brokers.render_broker_status(BROKERS).splitlines()
    assert status[0] == "g1/1 at 10.0.0.1:10911 (cluster c1; alive, reported 1.5 s ago)"
    assert [line.split() for line in status[1:6]] == [
        ["role", "SYNC_MASTER"],
        ["metaMode", "WRITER"],
        ["masterEpoch", "3"],
        ["writable", "True"],
        ["uptimeMs", "65000", "(65.0", "s)"],
    ]
    assert "g1/2 at 10.0.0.2:10911 (cluster c1; not alive, stale, reported 61.0 s ago)" in status
    config = brokers.render_broker_config(BROKERS).splitlines()
    assert config[:4] == [
        "============ g1/1 at 10.0.0.1:10911 (cluster c1; alive, reported 1.5 s ago) ============",
        " brokerName      = g1",
        " flushDiskType   = ASYNC_FLUSH",
        "*inSyncReplicas  = 2",
    ]
    assert config[-1] == "(*: dynamic, rmqha updateBrokerConfig -k <key> -v <value> changes it)"


def test_a_config_change_shows_old_and_new_and_each_refusal():
    answer = {
        "preview": True,
        "brokers": [
            {"brokerName": "g1", "brokerId": 1, "brokerAddr": "a:1", "changed": {"inSyncReplicas": ["2", "1"]}},
            {"brokerName": "g1", "brokerId": 2, "brokerAddr": "a:2", "changed": {}},
            {
                "brokerName": "g1",
                "brokerId": 3,
                "brokerAddr": "a:3",
                "changed": {},
                "error": {"code": 29, "name": "INVALID_PARAMETER", "detail": "no"},
            },
        ],
    }
    text, changes = brokers.render_config_change(answer, True, "inSyncReplicas")
    assert changes and [line.split() for line in text.splitlines()] == [
        ["this", "would", "change:"],
        ["brokerName", "BID", "addr", "key", "old", "new"],
        ["g1", "1", "a:1", "inSyncReplicas", "2", "1"],
        ["g1", "2", "a:2", "inSyncReplicas", "already", "so"],
        ["g1", "3", "a:3", "inSyncReplicas", "refused:", "29", "INVALID_PARAMETER", "no"],
    ]
    nothing, changes = brokers.render_config_change({"brokers": answer["brokers"][1:2]}, False, "inSyncReplicas")
    assert not changes and nothing.startswith("nothing to change")


def test_consumer_progress_per_group_and_per_queue():
    groups = {
        "groups": [
            {
                "group": "G1",
                "topics": ["T1", "T2"],
                "queues": 8,
                "committedOffset": 90,
                "maxOffset": 100,
                "lag": 10,
                "stale": False,
            },
            {"group": "G2", "topics": ["T1"], "queues": 4, "committedOffset": 5, "maxOffset": 5, "lag": 0, "stale": True},
        ]
    }
    assert [line.split() for line in consumers.render_consumer_groups(groups).splitlines()] == [
        ["group", "topics", "queues", "committed", "max", "offset", "lag", "report"],
        ["G1", "T1,", "T2", "8", "90", "100", "10", "live"],
        ["G2", "T1", "4", "5", "5", "0", "stale"],
    ]
    one = {
        "group": "G1",
        "lag": 10,
        "queues": [
            {"topic": "T1", "brokerName": "g1", "queueId": 0, "committedOffset": 40, "maxOffset": 45, "lag": 5, "stale": False},
            {"topic": "T2", "brokerName": "g2", "queueId": 1, "committedOffset": 50, "maxOffset": 55, "lag": 5, "stale": True},
        ],
    }
    lines = consumers.render_consumer_progress(one).splitlines()
    assert lines[1].split() == ["T1", "g1", "0", "40", "45", "5", "live"] and lines[-1] == "Consume Diff Total: 10"
    only = consumers.render_consumer_progress(one, "T2").splitlines()
    assert (
        len(only) == 4 and only[1].split() == ["T2", "g2", "1", "50", "55", "5", "stale"] and only[-1] == "Consume Diff Total: 5"
    )


def test_a_reset_shows_each_queue_move_and_what_is_consumed_again_or_skipped():
    answer = {
        "group": "G1",
        "topic": "T1",
        "preview": True,
        "applied": False,
        "queues": [
            {
                "brokerName": "g1",
                "queueId": 0,
                "committedOffset": 40,
                "newOffset": 10,
                "maxOffset": 45,
                "reconsumed": 30,
                "skipped": 0,
            },
            {
                "brokerName": "g1",
                "queueId": 1,
                "committedOffset": None,
                "newOffset": 45,
                "maxOffset": 50,
                "reconsumed": 0,
                "skipped": 5,
            },
        ],
    }
    text, moves = consumers.render_reset(answer, True, "2024-01-02 03:04:05.006 (1704164645006)")
    lines = text.splitlines()
    assert moves and lines[0] == "G1 on T1: would reset 2 queue(s) to 2024-01-02 03:04:05.006 (1704164645006)"
    assert [line.split() for line in lines[2:4]] == [["g1", "0", "40", "10", "45", "30", "0"], ["g1", "1", "45", "50", "0", "5"]]
    assert lines[-1] == "messages consumed again: 30, skipped: 5"
    failed = {"brokerName": "g2", "error": "the broker has no websocket to this control plane"}
    done, _ = consumers.render_reset({**answer, "preview": False, "applied": False, "failed": [failed]}, False, "offset 0")
    assert done.startswith("G1 on T1: reset 2 queue(s) to offset 0")
    assert done.splitlines()[-1] == "not reset on g2: the broker has no websocket to this control plane"


def test_a_drill_as_it_ended_and_the_list_of_drills():
    drill = {
        "id": 7,
        "clusterName": "c1",
        "brokerName": "g1",
        "actor": "token:ops",
        "fromBrokerId": 1,
        "toBrokerId": 2,
        "oldEpoch": 3,
        "newEpoch": 4,
        "startedAt": "2026-01-02T03:04:05Z",
        "decidedAt": "2026-01-02T03:04:05.020000Z",
        "servingAt": "2026-01-02T03:04:06Z",
        "rtoMs": 812,
        "dataAtRiskBytes": 4096,
        "dataLostBytes": 0,
        "outcome": "ok",
        "detail": "",
        "figures": {"oldMasterAckedOffset": 10, "newMasterHeldOffset": 10, "from": "waterLevels"},
    }
    assert operations.render_drill(drill).splitlines() == [
        "drill 7 of g1: ok; master 1 -> 2, epoch 3 -> 4",
        "RTO 812 ms; data at risk before 4096 bytes, lost at the switch 0 bytes",
    ]
    failed = {
        **drill,
        "outcome": "failed",
        "newEpoch": None,
        "rtoMs": None,
        "dataLostBytes": None,
        "detail": "not serving in 15 s",
    }
    assert operations.render_drill(failed).splitlines() == [
        "drill 7 of g1: failed; master 1 -> 2, epoch 3, no new one",
        "RTO none (not serving); data at risk before 4096 bytes, lost at the switch unknown",
        "  not serving in 15 s",
    ]
    rows = [line.split() for line in operations.render_drills({"drills": [drill, failed]}).splitlines()]
    assert rows[1] == ["7", "g1", "1", "->", "2", "3", "->", "4", "812", "4096", "0", "ok", "2026-01-02T03:04:05Z", "token:ops"]
    assert rows[2] == ["7", "g1", "1", "->", "2", "3", "->", "4096", "failed", "2026-01-02T03:04:05Z", "token:ops"]
