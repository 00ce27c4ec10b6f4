"""Real network partitions (issue 19 item 3): a replica group of three in controller mode with
allAckInSyncStateSet=true, each broker in a network namespace of its own and the control plane on a
host of the root namespace (testkit.netns), under a steady producer and a pop consumer group run
from the test process, which reaches every host. Four partitions in a row, each healed before the
next (chaos/partition.py says what each must show):

1. the master from the control plane (not from its slaves): a slave is elected; the deposed master,
   probed while still cut off, acknowledges nothing; on heal it rejoins as a slave of the new epoch;
2. a slave from its master (not from the control plane): the SyncStateSet drops it, nothing it lacks
   was acknowledged while it was a member, writes go on; on heal it catches up;
3. the control plane from a minority (one slave): the control plane still hears most brokers, so it
   is not blind and the nameserver drops the silent slave, but nobody is deposed and no epoch spent;
4. the control plane from the majority (master and a slave): the control plane is blind, so nobody
   is dropped or deposed; the brokers serve with the roles they have.

Then the checks of every chaos run (chaos/runner.py drain_and_check): no acknowledged message lost,
no duplicate of a never-failed send, at most one master per epoch in the controller's history and
in the brokers' own reports, the controller invariants, commit logs and epoch files identical across
the replicas; and the consumer group got every acknowledged message, its rollbacks (a message
delivered again after its ack was answered OK) counted. Logs: test-artifacts/chaos/test-partitions-*/.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import pytest

from chaos.consumers import ConsumerGroups, RouteCache, missing, redeliveries_after_ack
from chaos.harness import GROUP, QUEUES, TOPIC, Harness
from chaos.partition import SHAPES, PartitionRecord, partition_fault
from chaos.runner import Report, ScenarioConfig, drain_and_check
from chaos.workload import Producer
from testkit.netns import Network
from testkit.procs import wait_until
from tests.procs import ARTIFACTS, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.timeout(300)]

CONSUMER_GROUP = "partition-readers"
# The control plane's cuts last 5 s: past the 4 s heartbeat timeout, and short enough that the brokers'
# connections come back at their next TCP retransmission, before their 10 s call timeout gives up on
# them. Longer cuts from the majority can depose the master after the heal (docs/chaos.md, "Real partitions").
HOLD_S = {"controlplane-from-minority": 5.0, "controlplane-from-majority": 5.0}
DRAIN_TIMEOUT_S = 40.0
BLIND = re.compile(r"(ctl|ns): the control plane cannot hear most brokers \(since (\d+) ms")


def blind_onsets(worker_log: Path) -> list[tuple[str, float]]:
    """(record, time.time()) of each time the Celery worker's scans found the control plane blind
    (controlplane/hearing.py logs the onset of each blind span, stamped with Redis's clock)."""
    return [(m.group(1), int(m.group(2)) / 1000) for m in BLIND.finditer(worker_log.read_text(errors="replace"))]


@pytest.fixture(autouse=True)
def quiet_http_client_logs(caplog):
    caplog.set_level(logging.WARNING, logger="httpx")  # the observer polls four times a second


def run_partitions(run_dir) -> tuple[Report, dict]:
    """Set up once, the four partitions in a row, then drain and check; everything is stopped and
    the network removed before it returns."""
    # A 4 s heartbeat timeout (not the chaos runs' 3 s) keeps the blind case clear of heartbeat jitter:
    # a broker cut off is heard silent for up to two heartbeat intervals plus the 0.5 s grace.
    config = ScenarioConfig("partitions", replicas=3, all_ack=True, rate=200.0, heartbeat_timeout_ms=4000, run_dir=run_dir)
    report = Report(config, run_dir)
    consumed: dict = {}
    started = time.monotonic()
    with Network() as net:
        h = Harness(config.group_settings(), run_dir, child_env(), network=net)
        producer = consumers = None
        apis = []
        try:
            h.start()
            apis = [h.new_api(), h.new_api()]
            producer = Producer(TOPIC, lambda: h.resolve(apis[0]), rate=config.rate, batch=config.batch)
            consumers = ConsumerGroups(
                TOPIC, QUEUES, [CONSUMER_GROUP], RouteCache(lambda: apis[1].master_grpc_addr_from_route(TOPIC, GROUP))
            )
            producer.start()
            consumers.start()
            wait_until(lambda: producer.stats.acks, 30, "the first acknowledged write")
            time.sleep(1.0)
            for shape in SHAPES:
                options = {"hold_s": HOLD_S[shape]} if shape in HOLD_S else {}
                report.faults.append(partition_fault(shape, h, producer, **options).run())
            producer.stop()
            h.note(f"producer stopped: {len(producer.stats.acks)} acknowledged")
            acked = list(producer.acks_snapshot())
            record = consumers.records[CONSUMER_GROUP]
            try:
                wait_until(lambda: not missing(acked, record.delivered_ids()), DRAIN_TIMEOUT_S, "the consumers got every ack")
            except TimeoutError:
                pass
            consumers.stop()
            rollbacks, copies = redeliveries_after_ack(record.deliveries, record.first_ok_ack)
            consumed = {
                "delivered": len(record.deliveries),
                "missing": len(missing(acked, record.delivered_ids())),
                "redeliveredAfterAck": rollbacks,
                "storedCopiesDelivered": copies,
                "acksOk": record.acks_ok,
                "ackFailures": dict(record.ack_failures),
                "receiveFailures": dict(record.receive_failures),
            }
            h.note(f"consumer group {CONSUMER_GROUP}: {consumed}")
            drain_and_check(h, producer, report)
        finally:
            if producer is not None:
                producer.halt()
            if consumers is not None:
                consumers.stop()
            for api in apis:
                api.close()
            h.stop()
    report.seconds = time.monotonic() - started
    (run_dir / "report.json").write_text(json.dumps(report.as_json() | {"consumers": consumed}, indent=2) + "\n")
    return report, consumed


def test_real_partitions_depose_only_a_master_the_controller_cannot_hear_and_heal_with_nothing_acknowledged_lost():
    run_dir = ARTIFACTS / "chaos" / f"test-partitions-{time.strftime('%Y%m%d-%H%M%S')}"
    report, consumed = run_partitions(run_dir)
    print(report.human())
    print(f"consumers: {consumed}")
    by_kind: dict[str, PartitionRecord] = {f.kind: f for f in report.faults}
    assert len(by_kind) == len(SHAPES), report.failures()

    d = report.delivery
    assert d is not None, report.problems
    assert d.acked > 1000, "the producer hardly got anything acknowledged"
    assert d.lost == (), f"{len(d.lost)} acknowledged message(s) lost, acknowledged by {d.lost_by_node}"
    assert d.duplicates_never_failed == 0
    assert all(len(m) == 1 for m in report.masters_in_history.values()), report.masters_in_history
    assert all(len(m) == 1 for m in report.masters_reported.values()), report.masters_reported
    assert report.invariant_checker is not None and report.invariant_checker[0] == 0, report.invariant_checker
    assert report.logs is not None and report.logs.identical and report.logs.compared_bytes > 0, report.logs
    assert report.epoch_conflicts == []

    cut_master = by_kind["partition-master-from-controlplane"]
    assert cut_master.new_master not in (None, cut_master.node), "no slave took over from the master cut off"
    assert cut_master.new_epoch is not None and cut_master.new_epoch > cut_master.old_epoch
    assert cut_master.stale_probe_codes and not cut_master.stale_probe_codes.get("OK"), cut_master.stale_probe_codes
    assert cut_master.heal_s is not None, "the deposed master did not rejoin as an in-sync slave"
    if cut_master.stale_probe_codes.get("SLAVE_PERSISTENCE_TIMEOUT"):  # stored on its own, never replicated ...
        assert cut_master.own_writes_cut_bytes, "... so its rejoin must have cut them"

    cut_slave = by_kind["partition-slave-from-master"]
    assert cut_slave.new_master == cut_slave.old_master, "a slave cut from its master changed the master"
    assert cut_slave.sync_state_set_shrunk_s is not None, "the SyncStateSet never dropped the cut slave"
    assert cut_slave.acks_while_member_cut == 0
    assert cut_slave.heal_s is not None and cut_slave.elections_during == 0

    minority = by_kind["partition-controlplane-from-minority"]
    assert minority.declared_dead_s is not None, "the control plane took hearing most brokers for blindness"
    assert minority.elections_during == 0 and minority.new_master == minority.old_master

    majority = by_kind["partition-controlplane-from-majority"]
    assert majority.unregistered_during == [] and majority.elections_during == 0, "the blind control plane acted"
    assert majority.new_master == majority.old_master
    # ... because the controller knew itself blind then
    onsets = blind_onsets(run_dir / "logs" / "celery-worker.log")
    assert any(app == "ctl" and majority.at_wall <= t <= majority.healed_at_wall for app, t in onsets), (onsets, majority)

    assert consumed["missing"] == 0, "the consumer group never got some acknowledged messages"
    assert report.problems == [] and all(f.problems == [] for f in report.faults), report.failures()
    assert report.ok, report.failures()
