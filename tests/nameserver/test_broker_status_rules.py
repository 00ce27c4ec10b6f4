"""The broker status report's rules (nameserver/core/broker_status.py): what is accepted, what is never
kept (secrets), which report speaks for a set, and consumer progress / topic status computed from it."""

from __future__ import annotations

import pytest

from mqrules import validation as v
from nameserver.core import broker_status as core

pytestmark = pytest.mark.unit


def report(**over) -> dict:
    base = {
        "clusterName": "c",
        "brokerName": "a",
        "brokerId": 0,
        "brokerAddr": "127.0.0.1:10911",
        "status": {"metaMode": "WRITER", "masterEpoch": 2, "writable": True},
        "config": {"retryMaxTimes": "16", "peerToken": "x", "controlPlaneToken": "y"},
        "dynamicKeys": ["retryMaxTimes", "peerToken"],
        "queues": [["T", 0, 0, 10], ["T", 1, 3, 7], ["U", 0, 0, 4]],
        "offsets": [["g", "T", 0, 4], ["g", "T", 1, 7], ["h", "U", 0, 9]],
    }
    return {**base, **over}


def test_a_report_is_kept_without_its_secrets():
    r = core.parse_report(report())
    assert r["config"] == {"retryMaxTimes": "16"} and r["dynamicKeys"] == ["retryMaxTimes"]
    assert r["status"] == {"metaMode": "WRITER", "masterEpoch": 2, "writable": True}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"brokerAddr": "nohost"}, "brokerAddr", id="address without a port"),
        pytest.param({"brokerId": -1}, "brokerId", id="negative id"),
        pytest.param({"status": {"masterEpoch": "2"}}, "status", id="epoch as text"),
        pytest.param({"status": {"writable": 1}}, "status", id="writable as a number"),
        pytest.param({"config": {"k": 5}}, "config", id="config value not text"),
        pytest.param({"config": {"bad key": "1"}}, "config", id="config key not a key name"),
        pytest.param({"queues": [["T", 0, 5]]}, "queues", id="queue row too short"),
        pytest.param({"queues": [["T/x", 0, 0, 1]]}, "queues", id="topic with a slash"),
        pytest.param({"queues": [["T", 0, 0, 1, "x"]]}, "queues", id="horizon as text"),
        pytest.param({"queues": [["T", 0, 0, 1, 5, 6]]}, "queues", id="queue row too long"),
        pytest.param({"offsets": [["g", "T", 0, 4, None]]}, "offsets", id="offset row too long"),
        pytest.param({"offsets": [["g", "T", 0, -4]]}, "offsets", id="negative offset"),
        pytest.param({"offsets": [[["g"], "T", 0, 4]]}, "offsets", id="a group that is a list"),
        pytest.param({"offsets": [["g", {"T": 1}, 0, 4]]}, "offsets", id="a topic that is an object"),
        pytest.param({"offsets": [["g", "T", True, 4]]}, "offsets", id="boolean queue id"),
        pytest.param({"dynamicKeys": "all"}, "dynamicKeys", id="dynamic keys not a list"),
    ],
)
def test_malformed_reports_are_refused_by_field(change, field):
    with pytest.raises(v.Invalid) as refused:
        core.parse_report(report(**change))
    assert field in refused.value.fields


def test_queue_rows_may_carry_the_retention_horizon():
    rows = [["T", 0, 5, 10, 1_700_000_000_000], ["T", 1, 3, 3, None], ["U", 0, 0, 4]]
    assert core.parse_report(report(queues=rows))["queues"] == rows


def test_the_writing_master_speaks_for_its_set_then_an_acting_one_then_the_newest():
    slave = {**report(status={"metaMode": "FOLLOWER"}, brokerId=1), "reportedAtMs": 50}
    master = {**report(), "reportedAtMs": 10}
    acting = {**report(status={"metaMode": "ACTING"}, brokerId=2), "reportedAtMs": 40}
    assert core.serving_reports([slave, master, acting], 100)["a"] is master
    assert core.serving_reports([slave, acting], 100)["a"] is acting
    newer = {**slave, "brokerId": 3, "reportedAtMs": 60}
    assert core.serving_reports([slave, newer], 100)["a"] is newer
    # a dead master's last report goes stale: the slave acting for it speaks then
    assert core.serving_reports([master, acting], 10 + 7001)["a"] is acting


def test_consumer_progress_and_topic_status():
    serving = {"a": core.parse_report(report()), "b": core.parse_report(report(brokerName="b", offsets=[["g", "T", 0, 12]]))}
    rows = core.progress(serving)
    assert [(p.group, p.broker_name, p.queue_id, p.lag) for p in rows] == [  # served_by: the report's broker id
        ("g", "a", 0, 6),
        ("g", "a", 1, 0),
        ("g", "b", 0, 0),  # committed beyond the max (a cut log): no negative lag
        ("h", "a", 0, 0),
    ]
    summary = core.groups_summary(rows)
    assert [(s["group"], s["topics"], s["queues"], s["lag"]) for s in summary] == [("g", ["T"], 3, 6), ("h", ["U"], 1, 0)]
    assert [(q["brokerName"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in core.topic_queues(serving, "T")] == [
        ("a", 0, 0, 10),
        ("a", 1, 3, 7),
        ("b", 0, 0, 10),
        ("b", 1, 3, 7),
    ]


def test_a_report_is_stale_after_three_of_its_own_intervals():
    r = core.parse_report(report(config={"brokerStatusReportInterval": "1000"}))
    assert not core.is_stale(r, 0, 4000) and core.is_stale(r, 0, 4001)
    assert core.is_stale(core.parse_report(report(config={})), 0, 7001)  # the 2 s default
