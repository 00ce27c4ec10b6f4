"""Faults against a real replica group in controller mode under a steady produce load (chaos/): the
master frozen with SIGSTOP past its heartbeat timeout (and probed once resumed), and the HA link to a
slave cut and black-holed through the fault proxy. (The master killed with -9, alone or with the web
server, is one of the soak's faults: tests/e2e/test_soak.py.) After each, with
allAckInSyncStateSet=true: no acknowledged message is lost, no message is duplicated unless a send of
it failed, the controller never had two masters in one epoch (nor did the brokers say so), every
replica's commit log is byte-identical up to the common end, and the failed-over group takes writes
again. Logs of every run: test-artifacts/chaos/test-<scenario>-*/logs/."""

from __future__ import annotations

import logging
import time

import pytest

from chaos.runner import Report, ScenarioConfig, run
from tests.procs import ARTIFACTS, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture(autouse=True)
def quiet_http_client_logs(caplog):
    caplog.set_level(logging.WARNING, logger="httpx")  # the observer polls four times a second


def chaos(scenario: str, **overrides) -> Report:
    run_dir = ARTIFACTS / "chaos" / f"test-{scenario}-{time.strftime('%Y%m%d-%H%M%S')}"
    report = run(ScenarioConfig(scenario, seconds=8, run_dir=run_dir, **overrides), env=child_env())
    print(report.human())
    return report


def assert_group_consistent(report: Report) -> None:
    d = report.delivery
    assert d is not None, report.problems
    assert d.acked > 1000, "the producer hardly got anything acknowledged"
    assert d.lost == (), f"{len(d.lost)} acknowledged message(s) lost, acknowledged by {d.lost_by_node}"
    assert d.duplicates_never_failed == 0, "a message whose every send was acknowledged was stored twice"
    assert all(len(m) == 1 for m in report.masters_in_history.values()), report.masters_in_history
    assert all(len(m) == 1 for m in report.masters_reported.values()), report.masters_reported
    assert report.invariant_checker is not None and report.invariant_checker[0] == 0, report.invariant_checker
    assert report.logs is not None and report.logs.identical, report.logs
    assert report.logs.compared_bytes > 0
    assert report.epoch_conflicts == []
    assert report.problems == [] and all(f.problems == [] for f in report.faults), report.failures()
    assert report.ok, report.failures()


def assert_failed_over(report: Report) -> None:
    (fault,) = report.faults
    assert fault.new_master is not None and fault.new_master != fault.node, "no other broker took over"
    assert fault.new_epoch is not None and fault.new_epoch > fault.old_epoch
    assert fault.rto_s is not None and fault.heal_s is not None  # writes resumed; the old master rejoined as a slave


def test_sigstop_of_the_master_past_its_heartbeat_timeout_fails_over_and_the_deposed_master_keeps_nothing_of_its_own():
    report = chaos("sigstop")
    assert_group_consistent(report)
    assert_failed_over(report)
    fault = report.faults[0]
    # Probed straight after SIGCONT, the deposed master either refuses, or (once it follows) forwards
    # the sends to the new master: whatever it acknowledged is stored there, none was lost.
    assert fault.stale_probe_codes, "the deposed master was not probed"
    assert report.delivery is not None and report.delivery.lost_probes == 0, fault.stale_probe_codes
    assert fault.rto_s < report.config.heartbeat_timeout_ms / 1000 + 3


def test_a_cut_and_black_holed_ha_link_acknowledges_nothing_the_cut_slave_lacks_and_the_slave_catches_up():
    report = chaos("cut-ha-link")
    assert_group_consistent(report)
    (fault,) = report.faults
    assert fault.new_master == fault.old_master, "a cut HA link must not change the master"
    assert fault.acks_while_member_cut == 0, "writes acknowledged while a SyncStateSet member could not have them"
    assert fault.heal_s is not None
