"""The control plane rides restarts of its own Redis and Postgres (issue 19, item 2).

One test bed for the whole module: a Postgres and a Redis of the test's own (testkit.services: the
machine's shared servers are never restarted), a control plane (uvicorn, Celery worker and beat) on
them, a replica group of two brokers in controller mode with allAckInSyncStateSet=true, and a
producer that records every acknowledged write. The scenarios run in a row on it:

- a Redis restart alone and a Postgres restart alone: **no election and no deposition** (the master
  and its epoch are unchanged once the control plane has heard long enough to have acted);
- the master killed with -9 while Redis restarts (every key lost), while Postgres shuts down fast,
  while Postgres crashes (immediate shutdown), and while the control plane's connections are
  terminated (pg_terminate_backend): each time **one** election at the next epoch, writes acknowledged
  on the new master, and the killed broker back as an in-sync slave, with no manual step.

After each: every transition the controller acknowledged (the history read over REST before the
fault, and every state the observer saw) is still in Postgres, and the control plane's processes
are the ones started at the beginning. At the end (chaos.runner.drain_and_check): no acknowledged
write lost, at most one master per epoch in the history and in the brokers' own reports,
``check_controller_invariants`` passes, commit logs byte-identical. Logs:
test-artifacts/restarts/test-*/logs/ (and redis/, postgres/ for the servers').
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from chaos.checks import elections
from chaos.faults import Kill9
from chaos.harness import GROUP, TOPIC, Harness
from chaos.replicas import BrokerNode
from chaos.runner import Report, ScenarioConfig, drain_and_check
from chaos.workload import Producer
from testkit.controlplane import fresh_database
from testkit.procs import ARTIFACTS, wait_until
from testkit.services import OwnedPostgres, OwnedRedis

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

DB_NAME = "rocketmq_ha_restarts"
HEARTBEAT_TIMEOUT_S = 3.0  # controllerHeartBeatTimeoutMills of the group (chaos.replicas default)
SCAN_INTERVAL_S = 1.0
# docs/failover.md, "When the control plane is blind": after a Redis restart a broker missing from the
# emptied liveness table is not judged until the record has heard for 10 s. Anything a restart
# wrongly set off has happened once that, a heartbeat timeout and two scans have passed.
HEARING_WARM_UP_S = 10.0
REDIS_WATCH_S = HEARING_WARM_UP_S + HEARTBEAT_TIMEOUT_S + 2 * SCAN_INTERVAL_S
POSTGRES_WATCH_S = HEARTBEAT_TIMEOUT_S + 2 * SCAN_INTERVAL_S
DOWN_S = 1.0  # how long a restarted server stays down
RECOVERY_TIMEOUT_S = 45.0


@dataclass
class Bed:
    h: Harness
    redis: OwnedRedis
    postgres: OwnedPostgres
    producer: Producer
    report: Report
    control_plane_pids: dict[str, int]

    def snapshot(self) -> tuple[BrokerNode, int, list[dict]]:
        """(master node, master epoch, the controller's history) now."""
        master = self.h.master_node()
        assert master is not None, "no master"
        return master, self.h.api.replica_info(GROUP).master_epoch, self.h.api.history(GROUP)


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    httpx_logger = logging.getLogger("httpx")
    httpx_level = httpx_logger.level
    httpx_logger.setLevel(logging.WARNING)  # the observer polls four times a second
    run_dir = ARTIFACTS / "restarts" / f"test-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    config = ScenarioConfig("restarts", replicas=2, all_ack=True, run_dir=run_dir)
    with OwnedPostgres(run_dir / "postgres") as postgres, OwnedRedis(run_dir / "redis") as redis:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=postgres.url(DB_NAME),
            REDIS_URL=redis.url,
            DJANGO_SETTINGS_MODULE="controlplane.settings_test",
            TEST_REDIS_KEY_PREFIX="rmqha-test-restarts:",
            PYTHONUNBUFFERED="1",
        )
        fresh_database(env)
        h = Harness(config.group_settings(), run_dir, env, scan_interval_ms=int(SCAN_INTERVAL_S * 1000))
        producer: Producer | None = None
        resolver = None
        try:
            h.start()
            resolver = h.new_api()
            producer = Producer(TOPIC, lambda: h.resolve(resolver), rate=200, batch=8)
            producer.start()
            wait_until(lambda: producer.stats.acks, 30, "the first acknowledged write")
            pids = {p.name: p.pid for p in h.controlplane.processes}
            yield Bed(h, redis, postgres, producer, Report(config, run_dir), pids)
        finally:
            if producer is not None:
                producer.halt()
            if resolver is not None:
                resolver.close()
            h.stop()
            httpx_logger.setLevel(httpx_level)


# --- what every scenario checks --------------------------------------------------------------------


def assert_control_plane_unchanged(bed: Bed) -> None:
    """Nobody restarted a control-plane process: it rode the restart by itself."""
    cp = bed.h.controlplane
    assert {p.name: p.pid for p in cp.processes if p.alive()} == bed.control_plane_pids, [p.log_tail(20) for p in cp.processes]


def missing_acknowledged_transitions(bed: Bed, before: list[dict]) -> list[str]:
    """What the controller acknowledged and Postgres no longer holds: the history as it was read over
    REST before the fault (it must still be its beginning), every state the observer saw (master and
    epoch, SyncStateSet and its epoch), and every epoch a broker said it was master in."""
    history = bed.h.api.history(GROUP)
    missing = [f"transition #{t['id']} ({t['kind']} at epoch {t['newMasterEpoch']})" for t in before if t not in history]
    elected = {(t["newMasterEpoch"], t["newMasterBrokerId"]) for t in elections(history)}
    sets = {(t["newSyncStateSetEpoch"], frozenset(t["newSyncStateSet"])) for t in history if t.get("responseCode", 0) == 0}
    for view in bed.h.monitor.views:
        info = view.info
        if info.master_broker_id is not None and (info.master_epoch, info.master_broker_id) not in elected:
            missing.append(f"the election of broker {info.master_broker_id} at epoch {info.master_epoch}")
        if info.master_broker_id is not None and (info.sync_state_set_epoch, frozenset(info.sync_state_set)) not in sets:
            missing.append(f"SyncStateSet {list(info.sync_state_set)} at epoch {info.sync_state_set_epoch}")
    epochs = {e for e, _ in elected}
    missing += [
        f"{addr} reported itself master at epoch {e}"
        for addr, role, e in bed.h.monitor.reported()
        if role.endswith("MASTER") and e > 0 and e not in epochs
    ]
    return missing


def assert_whole_again(bed: Bed, since: float) -> None:
    """A master takes writes and every slave is back in the SyncStateSet, with no manual step."""
    h = bed.h
    wait_until(lambda: bed.producer.first_ack_after(since), RECOVERY_TIMEOUT_S, "a write acknowledged after the restart")
    wait_until(
        lambda: (m := h.master_node()) is not None and all(h.in_sync(n) for n in h.nodes if n is not m),
        RECOVERY_TIMEOUT_S,
        "every slave back in the SyncStateSet",
        interval_s=0.25,
    )


def assert_nobody_elected_nor_deposed(bed: Bed, restart: Callable[[], None], watch_s: float) -> None:
    master, epoch, before = bed.snapshot()
    started = time.monotonic()
    restart()
    time.sleep(max(0.0, watch_s - (time.monotonic() - started)))
    assert_whole_again(bed, started)
    after_master, after_epoch, history = bed.snapshot()
    assert (after_master.name, after_epoch) == (master.name, epoch), "the restart alone changed the master"
    assert elections(history) == elections(before), "the restart alone set off an election"
    masters = {(addr, e) for addr, role, e in bed.h.monitor.reported() if role.endswith("MASTER") and e > 0}
    assert masters == {(master.addr, epoch)}, f"a broker said it was master in another epoch: {masters}"
    assert missing_acknowledged_transitions(bed, before) == []
    assert_control_plane_unchanged(bed)


class KillDuringRestart(Kill9):
    """kill -9 of the master while one of the control plane's servers goes away: ``down`` runs just
    before the kill (the election on the master's closed socket meets the server gone) or, with
    ``down_after_kill``, just after it (it lands on the election in flight); ``up`` ``down_s`` later."""

    def __init__(
        self,
        bed: Bed,
        kind: str,
        down: Callable[[], None],
        up: Callable[[], None] = lambda: None,
        *,
        down_after_kill: bool = False,
        down_s: float = DOWN_S,
    ):
        super().__init__(bed.h, bed.producer)
        self.kind = kind
        self.down, self.up, self.down_after_kill, self.down_s = down, up, down_after_kill, down_s

    def inject(self) -> None:
        master = self._master()
        self._begin(master, master)
        if not self.down_after_kill:
            self.down()
        master.process.kill9()
        if self.down_after_kill:
            self.down()
        self.h.note(f"{self.kind}: kill -9 of the master {master.name} (epoch {self.record.old_epoch})")
        time.sleep(self.down_s)
        self.up()
        self.h.note(f"{self.kind}: over {time.monotonic() - self.record.at:.2f} s after the kill")


def assert_one_election_and_whole_again(bed: Bed, fault: KillDuringRestart) -> None:
    _, _, before = bed.snapshot()
    record = fault.run()
    bed.report.faults.append(record)
    assert record.problems == [], record.problems
    assert record.new_master is not None and record.new_master != record.node, "no other broker took over"
    assert record.new_epoch == record.old_epoch + 1, f"epochs spent: {record.old_epoch} -> {record.new_epoch}"
    assert_whole_again(bed, record.at)
    _, epoch, history = bed.snapshot()
    assert epoch == record.new_epoch, "another election followed the one that replaced the killed master"
    assert [t["newMasterEpoch"] for t in elections(history)] == list(range(1, epoch + 1))
    assert missing_acknowledged_transitions(bed, before) == []
    assert_control_plane_unchanged(bed)


# --- the scenarios, in this order on one bed ---------------------------------------------------------


def test_a_postgres_restart_alone_elects_nobody_and_deposes_nobody(bed):
    assert_nobody_elected_nor_deposed(bed, lambda: bed.postgres.restart("fast", DOWN_S), POSTGRES_WATCH_S)


def test_a_redis_restart_alone_elects_nobody_and_deposes_nobody_once_the_hearing_is_warm(bed):
    assert_nobody_elected_nor_deposed(bed, lambda: bed.redis.restart(DOWN_S), REDIS_WATCH_S)


def test_the_master_killed_while_redis_restarts_empty_is_replaced_by_one_election(bed):
    fault = KillDuringRestart(bed, "redis-restart", bed.redis.stop, bed.redis.start)
    assert_one_election_and_whole_again(bed, fault)
    # The dead master is missing from the emptied table: it waits for the hearing to warm up.
    assert fault.record.detect_s >= HEARING_WARM_UP_S - 1, fault.record.detect_s


def test_the_master_killed_while_postgres_shuts_down_fast_is_replaced_by_one_election(bed):
    fault = KillDuringRestart(bed, "postgres-fast-restart", lambda: bed.postgres.stop("fast"), bed.postgres.start)
    assert_one_election_and_whole_again(bed, fault)


def test_postgres_crashing_on_the_election_of_a_killed_master_loses_no_transition(bed):
    fault = KillDuringRestart(
        bed, "postgres-crash", lambda: bed.postgres.stop("immediate"), bed.postgres.start, down_after_kill=True
    )
    assert_one_election_and_whole_again(bed, fault)


def test_terminating_the_control_planes_connections_during_an_election_loses_no_transition(bed):
    terminated: list[int] = []

    def terminate_for_a_while() -> None:
        """Again and again for DOWN_S: whatever connection the election takes is cut."""
        until = time.monotonic() + DOWN_S
        while time.monotonic() < until:
            terminated.append(bed.postgres.terminate_backends(DB_NAME))
            time.sleep(0.02)

    fault = KillDuringRestart(bed, "pg-terminate-backend", terminate_for_a_while, down_after_kill=True, down_s=0.0)
    assert_one_election_and_whole_again(bed, fault)
    assert sum(terminated) > 0, "no connection of the control plane was terminated"


def test_after_every_restart_no_acknowledged_write_is_lost_and_the_history_holds(bed):
    time.sleep(1.0)  # writes with the group whole again
    bed.producer.stop()
    drain_and_check(bed.h, bed.producer, bed.report)
    report = bed.report
    print(report.human())
    assert report.delivery is not None and report.delivery.acked > 1000, "the producer hardly got anything acknowledged"
    assert report.logs is not None and report.logs.compared_bytes > 0
    assert report.ok, report.failures()
    assert max(report.masters_in_history) == 1 + len(report.faults), "an epoch spent beyond one per killed master"
