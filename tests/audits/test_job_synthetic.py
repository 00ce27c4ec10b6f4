"""The audit job over a synthetic event set with known rollbacks of every cause (seed 000; reference
§5.3-§5.4): it finds exactly those, with the right causes, epochs and sizes, ignores what is not a
rollback (slave-sync lag, pre-online sync, operator resets reported or logged), flags offsets beyond
a queue's max offset, and writes findings and the run's summary to Postgres. Real Spark (local),
real Postgres."""

from __future__ import annotations

import pytest

from audits.models import AuditRun, Finding, RunStatus
from audits.services import job_environment
from controlplane.audit import record
from controlplane.controller.models import Transition
from spark_jobs import pg
from spark_jobs.offset_audit import execute

from .helpers import batch, now_ms, store

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CC, SYNC, PRE, RESET, TAKEOVER = "client_commit", "slave_sync", "pre_online_sync", "operator_reset", "master_takeover"


def elect(broker_name: str, epoch: int, new_master: int, old_sss: list[int], old_master: int | None = 1) -> Transition:
    return Transition.objects.create(
        cluster_name="c1",
        broker_name=broker_name,
        kind="elect",
        trigger="controller",
        old_master_broker_id=old_master,
        new_master_broker_id=new_master,
        old_master_epoch=epoch - 1,
        new_master_epoch=epoch,
        old_sync_state_set_epoch=epoch - 1,
        new_sync_state_set_epoch=epoch,
        old_sync_state_set=old_sss,
        new_sync_state_set=[new_master],
        response_code=0,
    )


def synthetic_events(t0: int) -> list:
    s = 1000  # ms between steps
    return [
        # rg-failover: master 1 at epoch 1 commits up to 100; its slave 2 syncs with lag (not a rollback);
        # 2 is elected cleanly at epoch 2 and serves its stale 40: 60 messages again.
        batch("rg-failover", 1, "SYNC_MASTER", 1, [("g1", "t1", 0, o, CC, t0 + i * s) for i, o in enumerate(range(10, 101, 10))]),
        batch("rg-failover", 2, "SLAVE", 1, [("g1", "t1", 0, 90, SYNC, t0 + 9 * s + 500)]),
        batch(
            "rg-failover", 2, "SYNC_MASTER", 2, [("g1", "t1", 0, 40, TAKEOVER, t0 + 20 * s), ("g1", "t1", 0, 45, CC, t0 + 21 * s)]
        ),
        # the same failover on another queue with no stale offsets: not a rollback
        batch("rg-failover", 1, "SYNC_MASTER", 1, [("g1", "t1", 1, 70, CC, t0 + 5 * s)]),
        batch("rg-failover", 2, "SYNC_MASTER", 2, [("g1", "t1", 1, 70, TAKEOVER, t0 + 20 * s)]),
        # rg-unclean: master 1 at epoch 2 commits 500; 3, outside the SyncStateSet {1}, is elected at epoch 3
        # and commits 450: 50 again.
        batch("rg-unclean", 1, "SYNC_MASTER", 2, [("g2", "t2", 3, 500, CC, t0 + s)]),
        batch("rg-unclean", 3, "SYNC_MASTER", 3, [("g2", "t2", 3, 450, CC, t0 + 30 * s)]),
        # rg-classic: master 0 commits 200, goes down; slave 1 acts as master (commits 230); 0 comes back
        # without pre-online sync and serves its 200 again: 30 again.
        batch("rg-classic", 0, "SYNC_MASTER", 1, [("g3", "t3", 0, 200, CC, t0 + s)]),
        batch("rg-classic", 1, "SLAVE", 1, [("g3", "t3", 0, 210, CC, t0 + 5 * s), ("g3", "t3", 0, 230, CC, t0 + 6 * s)]),
        batch("rg-classic", 0, "SYNC_MASTER", 1, [("g3", "t3", 0, 200, TAKEOVER, t0 + 10 * s)]),
        # ... and on another queue, with the pre-online reverse sync: no rollback.
        batch("rg-classic", 0, "SYNC_MASTER", 1, [("g3", "t3", 1, 300, CC, t0 + s)]),
        batch("rg-classic", 1, "SLAVE", 1, [("g3", "t3", 1, 330, CC, t0 + 5 * s)]),
        batch("rg-classic", 0, "SYNC_MASTER", 1, [("g3", "t3", 1, 330, PRE, t0 + 9 * s), ("g3", "t3", 1, 335, CC, t0 + 10 * s)]),
        # rg-other: the same broker and epoch go back by 100 for no known reason: unknown.
        batch("rg-other", 0, "SYNC_MASTER", 4, [("g4", "t4", 2, 1000, CC, t0 + s), ("g4", "t4", 2, 900, CC, t0 + 2 * s)]),
        # an operator reset reported as such: intended
        batch("rg-other", 0, "SYNC_MASTER", 4, [("g5", "t4", 0, 800, CC, t0 + s), ("g5", "t4", 0, 0, RESET, t0 + 2 * s)]),
        # an operator reset logged in the operator audit log, reaching the broker as a plain commit: intended
        batch(
            "rg-other",
            0,
            "SYNC_MASTER",
            4,
            [("g-reset", "t4", 0, 700, CC, t0 - 5 * s), ("g-reset", "t4", 0, 100, CC, t0 + 3 * s)],
        ),
        # committed beyond the queue's max offset twice (max 100): flagged once, by 20 at most
        batch(
            "rg-other",
            0,
            "SYNC_MASTER",
            4,
            [
                ("g6", "t6", 0, 110, CC, t0 + s, 100),
                ("g6", "t6", 0, 120, CC, t0 + 2 * s, 100),
                ("g6", "t6", 1, 50, CC, t0 + s, 100),
            ],
        ),
    ]


def test_the_job_finds_exactly_the_known_rollbacks_with_their_causes_and_sizes(spark, events_uri):
    failover = elect("rg-failover", 2, new_master=2, old_sss=[1, 2])
    unclean = elect("rg-unclean", 3, new_master=3, old_sss=[1])
    record("user:alice", "reset_offset", broker_name="rg-other", params={"consumerGroup": "g-reset", "topic": "t4"})
    t0 = now_ms()
    store(events_uri, *synthetic_events(t0))
    run = AuditRun.objects.create(trigger="cli", status=RunStatus.RUNNING, active=True)

    with pg.connect(job_environment()["DATABASE_URL"]) as conn:
        outcome = execute(spark, conn, run.pk, events_uri, lookback_days=7)

    rollbacks = {
        (f.broker_name, f.consumer_group, f.topic, f.queue_id): (
            f.cause,
            f.master_epoch,
            f.messages_again,
            f.previous_offset,
            f.offset,
            f.transition_id,
        )
        for f in Finding.objects.filter(run=run, kind="rollback")
    }
    assert rollbacks == {
        ("rg-failover", "g1", "t1", 0): ("failover_stale_replica", 2, 60, 100, 40, failover.pk),
        ("rg-unclean", "g2", "t2", 3): ("unclean_election", 3, 50, 500, 450, unclean.pk),
        ("rg-classic", "g3", "t3", 0): ("former_master_without_pre_online_sync", 1, 30, 230, 200, None),
        ("rg-other", "g4", "t4", 2): ("unknown", 4, 100, 1000, 900, None),
    }
    beyond = list(
        Finding.objects.filter(run=run, kind="beyond_max_offset").values(
            "consumer_group", "queue_id", "offset", "queue_max_offset", "excess", "event_count"
        )
    )
    assert beyond == [
        {"consumer_group": "g6", "queue_id": 0, "offset": 120, "queue_max_offset": 100, "excess": 20, "event_count": 2}
    ]

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.active is None and run.progress == 1
    assert run.events_scanned == sum(len(b.events) for b in synthetic_events(t0)) == outcome.events_scanned
    assert (run.rollbacks, run.messages_again, run.beyond_max_offset, run.explained_by_reset) == (4, 240, 1, 1)
    assert run.summary["rollbacksByCause"] == {
        "failover_stale_replica": 1,
        "unclean_election": 1,
        "former_master_without_pre_online_sync": 1,
        "unknown": 1,
    }
    assert run.summary["messagesAgainByCause"]["failover_stale_replica"] == 60


def test_an_empty_event_store_is_an_empty_audit(spark, events_uri):
    run = AuditRun.objects.create(trigger="cli", status=RunStatus.RUNNING, active=True)
    with pg.connect(job_environment()["DATABASE_URL"]) as conn:
        execute(spark, conn, run.pk, events_uri, lookback_days=7)
    run.refresh_from_db()
    assert (run.status, run.events_scanned, run.rollbacks, run.findings.count()) == (RunStatus.SUCCEEDED, 0, 0, 0)


def test_events_older_than_the_lookback_are_not_audited(spark, events_uri):
    old = now_ms() - 30 * 86_400_000
    store(events_uri, batch("rg-old", 0, "SYNC_MASTER", 1, [("g", "t", 0, 10, CC, old), ("g", "t", 0, 5, CC, old + 1)]))
    run = AuditRun.objects.create(trigger="cli", status=RunStatus.RUNNING, active=True)
    with pg.connect(job_environment()["DATABASE_URL"]) as conn:
        execute(spark, conn, run.pk, events_uri, lookback_days=7)
    run.refresh_from_db()
    assert (run.events_scanned, run.rollbacks) == (0, 0)


def test_retention_skips_are_counted_as_messages_lost_apart_from_rollbacks(spark, events_uri):
    """A broker moved group g7 past messages retention deleted (source retention_skip): 1108 - 30 = 1078
    lost on queue 0, none known on queue 1 (no commit before the skip); a later commit above the skip
    is no rollback, one below it is."""
    t0, s, skip = now_ms(), 1000, "retention_skip"
    store(
        events_uri,
        batch("rg-ret", 0, "SYNC_MASTER", 1, [("g7", "t7", 0, 30, CC, t0), ("g7", "t7", 0, 1108, skip, t0 + s)]),
        batch("rg-ret", 0, "SYNC_MASTER", 1, [("g7", "t7", 0, 1200, CC, t0 + 2 * s), ("g7", "t7", 1, 500, skip, t0 + s)]),
        batch("rg-ret", 0, "SYNC_MASTER", 1, [("g7", "t7", 1, 450, CC, t0 + 3 * s)]),
    )
    run = AuditRun.objects.create(trigger="cli", status=RunStatus.RUNNING, active=True)
    with pg.connect(job_environment()["DATABASE_URL"]) as conn:
        execute(spark, conn, run.pk, events_uri, lookback_days=7)
    lost = {
        f.queue_id: (f.previous_offset, f.offset, f.messages_lost, f.source)
        for f in Finding.objects.filter(run=run, kind="retention_skip")
    }
    assert lost == {0: (30, 1108, 1078, skip), 1: (None, 500, 0, skip)}
    rollbacks = [(f.queue_id, f.previous_offset, f.offset) for f in Finding.objects.filter(run=run, kind="rollback")]
    assert rollbacks == [(1, 500, 450)]
    run.refresh_from_db()
    assert (run.summary["retentionSkips"], run.summary["messagesLostToRetention"], run.rollbacks) == (2, 1078, 1)
