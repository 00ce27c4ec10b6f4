"""The soak's own arithmetic (chaos/soak.py), on made-up runs: the schedule, which elections count
against which fault, what is spurious, the RTO of a fault, the cuts of a commit log read from the
brokers' log lines, which failed sends a replica could have taken, and the one rule for the exit
code of both ``python -m chaos.soak`` and bench/soak.py."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from datetime import UTC, datetime

import pytest

import bench.soak
from chaos.checks import LogCut, ReplicaOut, scan_broker_log, writable_members
from chaos.soak import (
    CONSUMER_GROUP,
    KINDS,
    MUST_BE_ZERO,
    ROUTE_LAG_S,
    TOPIC,
    Outcome,
    attribute_elections,
    cut_figures,
    failed_send_figures,
    failures,
    rto,
    schedule,
    summary,
    undelivered_detail,
)

pytestmark = pytest.mark.unit

CLEAN = {
    "acked_lost": 0,
    "acked_undelivered": 0,
    "masters_per_epoch_max": 1,
    "logs_identical": True,
    "invariants_ok": True,
    "failed_sends_while_writable": 0,
    "refused_cuts": 0,
    "guard_errors": 0,
    "unreadable_cut_lines": 0,
}


def at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def elect(t: float, broker_id: int | None, epoch: int, code: int = 0) -> dict:
    return {"kind": "elect", "createdAt": at(t), "newMasterBrokerId": broker_id, "newMasterEpoch": epoch, "responseCode": code}


def test_every_kind_comes_once_before_any_comes_twice():
    plan = schedule(list(KINDS), 100, random.Random(3))
    assert len(plan) == 100
    assert sorted(plan[: len(KINDS)]) == sorted(KINDS)
    assert set(Counter(plan)) == set(KINDS)
    assert schedule(list(KINDS), 5, random.Random(3)) == plan[:5]  # a seed gives the same schedule


def test_elections_count_against_the_fault_whose_window_holds_them():
    kill = Outcome("kill9-master", "n1", 100.0, 110.0)
    redis = Outcome("redis-restart", "n2", 120.0, 135.0)
    web = Outcome("kill-with-controlplane", "n2", 140.0, 150.0)
    history = [
        elect(10.0, 1, 1),  # the first master, before any fault
        elect(101.0, 2, 2),
        elect(125.0, None, 3, code=2001),  # found nobody: a burnt epoch, during a restart of Redis
        elect(126.0, 3, 4),  # deposed the master during a restart of Redis
        elect(142.0, 1, 5),
        elect(145.0, 3, 6),  # a second election for one master fault
        {"kind": "alter", "createdAt": at(103.0)},
    ]
    attribute_elections([kill, redis, web], history)
    assert (kill.elections, kill.new_masters, kill.no_master) == (1, 1, 0)
    assert (redis.elections, redis.new_masters, redis.no_master) == (2, 1, 1)
    assert (web.elections, web.new_masters) == (2, 2)
    assert (kill.spurious, redis.spurious, web.spurious) == (0, 2, 1)
    assert (kill.depositions, redis.depositions, web.depositions) == (0, 1, 1)
    s = summary([kill, redis, web], CLEAN)
    assert (s["spurious_elections"], s["control_plane_outage_depositions"], s["burnt_epochs"]) == (3, 2, 1)
    assert s["unexpected_elections"] == 3 and s["expected_elections"] == 2
    assert "spurious_elections 3" in failures(s) and "burnt_epochs 1" in failures(s)


def test_rto_is_the_longest_time_without_an_ack_from_the_fault_to_its_heal():
    o = Outcome("kill9-master", "n1", 100.0, 110.0)
    assert rto([99.0, 99.9, 102.5, 102.6, 104.0, 105.5, 107.0, 108.5, 109.5], o) == 2.5  # the fault to the first ack after it
    assert rto([99.0, 100.1, 100.2, 103.7, 105.0, 107.0, 109.0, 109.9], o) == 3.5  # a stall later in the window
    assert rto([95.0, 111.0], o) == 10.0  # nothing acknowledged until after the heal


def test_a_clean_run_has_no_failures_and_each_headline_figure_can_fail_it():
    ok = CLEAN
    o = Outcome("kill9-master", "n1", 100.0, 110.0, rto_s=0.2)
    assert failures(summary([o], ok)) == []
    assert failures(summary([o], ok | {"acked_lost": 3})) == ["acked_lost 3"]
    assert failures(summary([o], ok | {"masters_per_epoch_max": 2})) == ["masters_per_epoch_max 2"]
    assert failures(summary([o], ok | {"logs_identical": False})) == ["commit logs differ"]
    assert failures(summary([o], ok | {"invariants_ok": False})) == ["check_controller_invariants failed"]
    assert failures(summary([o], ok | {"problems": ["the soak stopped early: boom"]})) == ["the soak stopped early: boom"]


@pytest.mark.parametrize(
    "figure, value",
    [
        ("acked_lost", 1),
        ("acked_undelivered", 2),
        ("failed_sends_while_writable", 1),
        ("refused_cuts", 1),
        ("guard_errors", 3),
        ("unreadable_cut_lines", 1),
        ("acked_undelivered", None),  # never measured (the run stopped first): not a pass
        ("failed_sends_while_writable", None),
    ],
)
def test_each_must_be_zero_figure_fails_the_run_and_the_bench(figure, value, monkeypatch, capsys):
    o = Outcome("kill9-master", "n1", 100.0, 110.0, rto_s=0.2)
    s = summary([o], CLEAN | {figure: value})
    assert failures(s) == [f"{figure} {value}"]
    # bench/soak.py: the same rule decides its exit code, and the figure is one of its goals
    report = s | {"failures": failures(s), "ok": False, "run_dir": "test-artifacts/soak/x"}
    monkeypatch.setattr(bench.soak.soak, "run", lambda args: report)
    assert bench.soak.main(["--faults", "1"]) == 1
    assert bench.soak.goals(report)[f"{figure}_zero"] is False
    assert f"soak FAILED: {figure} {value}" in capsys.readouterr().err


def test_a_failed_fault_fails_the_run_and_a_clean_bench_run_exits_0(monkeypatch):
    ok = Outcome("kill9-master", "n1", 100.0, 110.0, rto_s=0.2)
    failed = Outcome("kill9-slave", "n2", 120.0, 130.0, problems=["heal: n2 back in sync not seen within 90 s"])
    assert failures(summary([ok, failed], CLEAN)) == ["failed_faults 1"]
    report = summary([ok], CLEAN) | {"failures": [], "ok": True, "run_dir": "test-artifacts/soak/x"}
    monkeypatch.setattr(bench.soak.soak, "run", lambda args: report)
    assert bench.soak.main(["--faults", "1"]) == 0
    assert set(report["goals"]) >= {f"{k}_zero" for k in MUST_BE_ZERO} | {"faults_at_least_100", "one_master_per_epoch"}
    assert [name for name, met in report["goals"].items() if not met] == ["faults_at_least_100"]


# --- the cuts of a commit log, from the brokers' log lines --------------------------------------------

FORK = (
    "2026-11-28 02:29:49,123 INFO brokers.ha.slave log cut: cause=FORK at=23271142 end=23274477 bytes=3335 "
    'confirm=23270000 allowed=yes detail="fork case 1-2: the master\'s epoch 4 starts at 23271142"'
)
REFUSED = (
    "2026-11-28 02:31:02,007 ERROR brokers.store.store [acked-data-guard] log cut refused: cause=PARTIAL_RECORD "
    'at=23271142 end=23875536 bytes=604394 confirm=23875000 allowed=no detail="a record cut mid-way below the confirm offset"'
)


def local(*fields: int) -> float:
    return datetime(*fields).timestamp()  # the brokers' asctime is local time


@pytest.mark.parametrize(
    "line, cut",
    [
        pytest.param(
            FORK,
            LogCut(
                "n2",
                local(2026, 11, 28, 2, 29, 49, 123000),
                "FORK",
                23271142,
                23274477,
                3335,
                23270000,
                True,
                "fork case 1-2: the master's epoch 4 starts at 23271142",
            ),
            id="an allowed cut",
        ),
        pytest.param(
            REFUSED,
            LogCut(
                "n2",
                local(2026, 11, 28, 2, 31, 2, 7000),
                "PARTIAL_RECORD",
                23271142,
                23875536,
                604394,
                23875000,
                False,
                "a record cut mid-way below the confirm offset",
            ),
            id="a refused cut, with the guard's marker",
        ),
        pytest.param(
            "2026-11-28 02:29:50,000 WARNING brokers.store.store log cut: cause=TORN_TAIL at=10 end=10 bytes=0 confirm=-1 "
            'allowed=yes detail=""',
            LogCut("n2", local(2026, 11, 28, 2, 29, 50), "TORN_TAIL", 10, 10, 0, -1, True, ""),
            id="an empty cut, an empty detail",
        ),
    ],
)
def test_a_cut_line_gives_one_record(line, cut):
    assert scan_broker_log("n2", [line + "\n"]).cuts == (cut,)


def test_guard_lines_and_unreadable_cut_lines_are_counted_other_lines_ignored():
    lines = [
        "===== broker-n1 start #2 at 2026-11-28 02:29:40: python -m brokers -c broker.conf\n",
        "2026-11-28 02:29:41,000 INFO brokers.broker now SLAVE of 127.0.0.1:1234 at epoch 4\n",
        FORK + "\n",
        REFUSED + "\n",
        "2026-11-28 02:31:03,000 ERROR brokers.ha.quorum [acked-data-guard] acknowledged 4 bytes past the confirm offset\n",
        "Traceback (most recent call last): ... [acked-data-guard] in a traceback counts too\n",
        # a refused link quoting the refused cut: a guard line, not a cut of its own
        "2026-11-28 02:31:02,010 ERROR brokers.ha.slave replication from 127.0.0.1:5 refused: " + REFUSED.split(" ", 4)[4] + "\n",
        "2026-11-28 02:31:04,000 INFO brokers.ha.slave log cut: cause=fork at=1 end=2 bytes=1\n",  # a format drift
    ]
    scan = scan_broker_log("n1", lines)
    assert [c.cause for c in scan.cuts] == ["FORK", "PARTIAL_RECORD"]
    assert scan.guard_errors == 4
    assert scan.unreadable == ("n1: " + lines[-1].rstrip(),)


def test_cuts_are_reported_by_cause_and_each_one_that_removed_bytes_is_blamed_on_the_fault_under_way():
    kill = Outcome("kill9-master", "n1", local(2026, 11, 28, 2, 29, 40), local(2026, 11, 28, 2, 29, 55))
    disk = Outcome("disk-full", "n3", local(2026, 11, 28, 2, 30, 50), local(2026, 11, 28, 2, 31, 10))
    scans = [
        scan_broker_log("n1", [FORK]),
        scan_broker_log("n3", [REFUSED]),
        scan_broker_log(
            "n2",
            [
                '2026-11-28 02:29:45,000 INFO b log cut: cause=TORN_TAIL at=5 end=5 bytes=0 confirm=0 allowed=yes detail=""',
                '2026-11-28 02:30:00,000 INFO b log cut: cause=UNWRITTEN at=5 end=9 bytes=4 confirm=0 allowed=yes detail="x"',
            ],
        ),
    ]
    f = cut_figures(scans, [kill, disk])
    assert [(t["node"], t["cause"], t["fault"]) for t in f["truncations"]] == [
        ("n2", "TORN_TAIL", None),  # 0 bytes: nothing to blame
        ("n1", "FORK", {"n": 1, "kind": "kill9-master", "node": "n1"}),
        ("n2", "UNWRITTEN", None),  # between the faults
        ("n3", "PARTIAL_RECORD", {"n": 2, "kind": "disk-full", "node": "n3"}),
    ]
    assert f["truncations"][1] | {"fault": None} == {
        "node": "n1",
        "t": local(2026, 11, 28, 2, 29, 49, 123000),
        "cause": "FORK",
        "at": 23271142,
        "end": 23274477,
        "bytes": 3335,
        "confirm": 23270000,
        "allowed": True,
        "detail": "fork case 1-2: the master's epoch 4 starts at 23271142",
        "fault": None,
    }
    assert f["truncations_by_cause"] == {"TORN_TAIL": 1, "FORK": 1, "UNWRITTEN": 1, "PARTIAL_RECORD": 1}
    assert (f["refused_cuts"], f["guard_errors"], f["unreadable_cut_lines"]) == (1, 1, 0)
    assert failures(summary([kill, disk], CLEAN | f)) == ["refused_cuts 1", "guard_errors 1"]


# --- sends that failed while a replica could have taken them ---------------------------------------

WHOLE = frozenset({"n1", "n2", "n3"})


@pytest.mark.parametrize(
    "t, sync_state_sets, out, writable",
    [
        pytest.param(5.0, [(0.0, WHOLE)], [], WHOLE, id="nothing wrong: the whole set"),
        pytest.param(
            105.0, [(0.0, WHOLE)], [ReplicaOut("n1", 100.0, 110.0)], {"n2", "n3"}, id="kill -9 of the master: its slaves could"
        ),
        pytest.param(
            105.0,
            [(0.0, WHOLE), (103.0, frozenset({"n2"}))],
            [ReplicaOut("n1", 100.0, 110.0)],
            {"n2"},
            id="after the election: the new master",
        ),
        pytest.param(
            105.0,
            [(0.0, WHOLE), (90.0, frozenset({"n1"}))],
            [ReplicaOut("n1", 100.0, 110.0)],
            set(),
            id="the disk of the only in-sync replica full",
        ),
        pytest.param(
            105.0,
            [(0.0, WHOLE)],
            [ReplicaOut("n1", 100.0, 110.0), ReplicaOut("n2", 100.0, 110.0), ReplicaOut("n3", 101.0, 106.0)],
            set(),
            id="the whole group down",
        ),
        pytest.param(111.0, [(0.0, WHOLE)], [ReplicaOut("n1", 100.0, 110.0)], WHOLE, id="after the heal"),
    ],
)
def test_the_replicas_that_could_have_taken_a_write(t, sync_state_sets, out, writable):
    assert writable_members(t, sync_state_sets, out) == writable


def test_failed_sends_count_unless_no_in_sync_replica_could_write():
    kill = Outcome("kill9-master", "n1", 100.0, 110.0)  # retries that did not bridge the failover: counted
    web = Outcome("kill-web", "n2", 120.0, 125.0)  # the master was fine: counted
    disk = Outcome("disk-full", "n2", 140.0, 150.0)  # the only in-sync replica full: not counted
    sync_state_sets = [(float("-inf"), WHOLE), (101.0, frozenset({"n2"})), (130.0, WHOLE), (139.0, frozenset({"n2"}))]
    fails = [
        {"t": 100.5, "kind": "fail", "id": "m-1", "sent": 97.5, "error": "TimeoutError: send timed out"},
        {"t": 121.0, "kind": "fail", "id": "m-2", "sent": 118.0, "error": "ConnectionError: refused"},
        {"t": 145.0, "kind": "fail", "id": "m-3", "sent": 142.0, "error": "BrokerError: the store is not running"},
        {"t": 160.0, "kind": "fail", "id": "m-4", "sent": 157.0, "error": "TimeoutError: send timed out"},
    ]
    f = failed_send_figures(fails, sync_state_sets, [kill, web, disk])
    assert (f["failed_sends_after_retries"], f["failed_sends_while_writable"]) == (4, 3)
    assert f["failed_sends_while_writable_by_fault"] == {"kill9-master": 1, "kill-web": 1, "between faults": 1}
    assert f["first_failed_sends_while_writable"][0] == {
        "t": 100.5,
        "id": "m-1",
        "error": "TimeoutError: send timed out",
        "writable": ["n2", "n3"],
        "fault": {"n": 1, "kind": "kill9-master", "node": "n1"},
    }
    assert [s["id"] for s in f["first_failed_sends_while_writable"]] == ["m-1", "m-2", "m-4"]
    assert failures(summary([kill, web, disk], CLEAN | f)) == ["failed_sends_while_writable 3"]


@pytest.mark.parametrize(
    "new_master_at, counted",
    [(None, ["m-2", "m-3"]), (104.0, ["m-2", "m-3"]), (105.8, ["m-3"]), (107.0, ["m-3"])],
    ids=["no-election-seen", "elected-before", "elected-just-before", "elected-after"],
)
def test_no_replica_could_write_while_the_master_and_the_controller_were_both_down(new_master_at, counted):
    """kill-with-controlplane: from the kill until the control plane answers again no replica could be
    made master (a slave taking writes without the controller would be a second master), nor until
    the controller, back, has elected one (once the dead master's heartbeats lapsed) and the replicas
    that forward sends know it (ROUTE_LAG_S); a send given up then is not counted. One given up
    later is."""
    both = Outcome("kill-with-controlplane", "n1", 100.0, 110.0, controller_back=103.0, new_master_at=new_master_at)
    fails = [
        {"t": 102.7, "kind": "fail", "id": "m-1", "sent": 100.0, "error": "UNAVAILABLE: connection refused"},
        {"t": 106.0, "kind": "fail", "id": "m-2", "sent": 103.5, "error": "UNAVAILABLE: connection refused"},
        {"t": 107.0 + ROUTE_LAG_S + 0.1, "kind": "fail", "id": "m-3", "sent": 104.0, "error": "TimeoutError: timed out"},
    ]
    f = failed_send_figures(fails, [(float("-inf"), WHOLE)], [both])
    assert [s["id"] for s in f["first_failed_sends_while_writable"]] == counted
    assert f["failed_sends_while_writable"] == len(counted)
    assert writable_members(102.7, [(0.0, WHOLE)], [], [(100.0, 103.0)]) == frozenset()


def test_the_first_election_of_a_new_master_in_a_faults_window_is_kept():
    both = Outcome("kill-with-controlplane", "n1", 100.0, 110.0, controller_back=103.0)
    stamp = lambda t: datetime.fromtimestamp(t, UTC).isoformat()  # noqa: E731
    history = [
        {"kind": "elect", "createdAt": stamp(99.0), "responseCode": 0, "newMasterBrokerId": 2},
        {"kind": "elect", "createdAt": stamp(104.0), "responseCode": 2009, "newMasterBrokerId": None},
        {"kind": "elect", "createdAt": stamp(105.5), "responseCode": 0, "newMasterBrokerId": 2},
        {"kind": "elect", "createdAt": stamp(106.0), "responseCode": 0, "newMasterBrokerId": 3},
    ]
    attribute_elections([both], history)
    assert (both.elections, both.new_masters, both.no_master) == (3, 2, 1)
    assert both.new_master_at == pytest.approx(105.5)


def _node_with_pop_table(tmp_path, name: str, queue: dict | None):
    from types import SimpleNamespace

    root = tmp_path / name
    (root / "config").mkdir(parents=True)
    table = {} if queue is None else {f"{CONSUMER_GROUP}@{TOPIC}@1": queue}
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"popTable": table}))
    return SimpleNamespace(name=name, root=root)


@pytest.mark.parametrize(
    "offset, state",
    [
        (7, "in flight (attempt 2)"),
        (8, "done"),
        (3, "below ackedBelow"),
        (12, "not popped yet"),
        (9, "popped, neither in flight nor done"),
    ],
)
def test_an_undelivered_message_is_told_with_its_groups_state_on_each_replica(tmp_path, offset, state):
    queue = {"popOffset": 10, "ackedBelow": 5, "inFlight": [[7, 0, 2, "n"]], "done": [8], "redeliver": []}
    nodes = [_node_with_pop_table(tmp_path, "n1", queue), _node_with_pop_table(tmp_path, "n2", None)]
    kill = Outcome("kill9-master", "n1", 100.0, 110.0, on_master=True)
    ack = {"id": "m-1", "msg_id": "X", "t": 105.0}
    assert undelivered_detail([ack, {"id": "m-2", "msg_id": "Y", "t": 200.0}], {"X": (1, offset)}, nodes, [kill]) == [
        f"undelivered m-1 (acknowledged during kill9-master #1) at queue 1 offset {offset}: "
        f"n1: popOffset 10 ackedBelow 5: {state}; n2: the group has no state for the queue",
        "undelivered m-2 (acknowledged during no fault): not served by the final master",
    ]


def test_a_full_master_that_came_back_as_master_was_due_no_election():
    """It stepped down, and nobody was elected (no replica in sync, or a control plane that could not
    hear most brokers left it to expiry): it resumes as master, and no election was missing."""
    stepped_down = Outcome("disk-full-master", "n1", 0.0, 5.0, on_master=True)
    assert stepped_down.expected_elections == 1
    assert dataclasses.replace(stepped_down, resumed_as_master=True).expected_elections == 0
    assert Outcome("disk-full", "n2", 0.0, 5.0, on_master=False).expected_elections == 0
