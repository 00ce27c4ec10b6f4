"""The soak's own arithmetic (chaos/soak.py), on made-up runs: the schedule, which elections count
against which fault, what is spurious, and the RTO of a fault."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

import pytest

from chaos.soak import KINDS, Outcome, attribute_elections, failures, rto, schedule, summary

pytestmark = pytest.mark.unit


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
    s = summary([kill, redis, web], {"acked_lost": 0, "acked_undelivered": 0, "masters_per_epoch_max": 1, "logs_identical": True})
    assert (s["spurious_elections"], s["control_plane_outage_depositions"], s["burnt_epochs"]) == (3, 2, 1)
    assert s["unexpected_elections"] == 3 and s["expected_elections"] == 2
    assert "spurious_elections 3" in failures(s) and "burnt_epochs 1" in failures(s)


def test_rto_is_the_longest_time_without_an_ack_from_the_fault_to_its_heal():
    o = Outcome("kill9-master", "n1", 100.0, 110.0)
    assert rto([99.0, 99.9, 102.5, 102.6, 104.0, 105.5, 107.0, 108.5, 109.5], o) == 2.5  # the fault to the first ack after it
    assert rto([99.0, 100.1, 100.2, 103.7, 105.0, 107.0, 109.0, 109.9], o) == 3.5  # a stall later in the window
    assert rto([95.0, 111.0], o) == 10.0  # nothing acknowledged until after the heal


def test_a_clean_run_has_no_failures_and_each_headline_figure_can_fail_it():
    ok = {"acked_lost": 0, "acked_undelivered": 0, "masters_per_epoch_max": 1, "logs_identical": True, "invariants_ok": True}
    o = Outcome("kill9-master", "n1", 100.0, 110.0, rto_s=0.2)
    assert failures(summary([o], ok)) == []
    assert failures(summary([o], ok | {"acked_lost": 3})) == ["acked_lost 3"]
    assert failures(summary([o], ok | {"masters_per_epoch_max": 2})) == ["masters_per_epoch_max 2"]
    assert failures(summary([o], ok | {"logs_identical": False})) == ["commit logs differ"]
    assert failures(summary([o], ok | {"invariants_ok": False})) == ["check_controller_invariants failed"]
