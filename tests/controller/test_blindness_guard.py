"""The blindness guard on the controller's scans, against real Redis and Postgres, on an injected clock:
an outage of the web tier (no heartbeat reaches Redis) and a Redis restart (the heartbeat table lost)
depose nobody and burn no epoch; a master that died meanwhile is replaced once, by one election, when
the control plane has heard for a heartbeat timeout."""

from __future__ import annotations

import pytest

from controlplane import hearing
from controlplane.controller import config_store, liveness, services
from controlplane.controller.models import ReplicaGroup, Transition
from controlplane.redis import key, sync_client
from tests.conftest import clear_redis

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 10_000
SETS = ("g1", "g2")


def beat(name: str, broker_id: int, at: int | None) -> None:
    liveness.heartbeat(
        liveness.Beat(
            "c1",
            name,
            broker_id,
            f"127.0.0.1:{broker_id}{SETS.index(name)}",
            epoch=1,
            max_offset=10 * broker_id,
            heartbeat_timeout_millis=TIMEOUT,
        ),
        now_ms=at,
    )


@pytest.fixture
def cluster():
    """g1 and g2, three replicas each, master 1; the scans run at every call."""
    config_store.update_config({"scanNotActiveBrokerInterval": 100, "scanInactiveMasterInterval": 100})
    seconds, micros = sync_client().time()
    start = seconds * 1000 + micros // 1000 - 60_000  # injected instants, all before Redis's now
    for name in SETS:
        for i in (1, 2, 3):
            assert services.apply_broker_id("c1", name, i, f"127.0.0.1:{i}{SETS.index(name)};1").ok
            beat(name, i, start)
            beat(name, i, None)  # the elections below judge liveness on Redis's own clock
        assert services.elect_master(name, broker_id=1).ok
        assert services.alter_sync_state_set(
            name, master_broker_id=1, master_epoch=1, new_sync_state_set={1, 2, 3}, sync_state_set_epoch=1
        ).ok
    return start


def scan(at: int) -> None:
    # The scans' slots are on Redis's own clock: freed here, as if 500 ms had passed.
    sync_client().delete(key("ctl", "slot", "scan-brokers"), key("ctl", "slot", "scan-masters"))
    services.scan_inactive_brokers(now_ms=at)
    services.scan_inactive_masters(now_ms=at)


def run(start: int, end: int, beating: set[tuple[str, int]]) -> int:
    """Scans every 500 ms of (start, end]; the ``beating`` replicas beat every second. Returns end."""
    for at in range(start + 500, end + 1, 500):
        if at % 1_000 == start % 1_000:
            for name, i in sorted(beating):
                beat(name, i, at)
        scan(at)
    return end


def elections() -> list[tuple[str, int, int | None]]:
    rows = Transition.objects.filter(kind="elect").order_by("id")
    return list(rows.values_list("broker_name", "new_master_epoch", "new_master_broker_id"))


ALL = {(n, i) for n in SETS for i in (1, 2, 3)}


def test_a_web_tier_outage_longer_than_the_timeout_deposes_nobody(cluster):
    t = run(cluster, cluster + 5_000, ALL)
    t = run(t, t + 25_000, set())  # no heartbeat reaches the control plane for 25 s
    assert liveness.hearing(t).blind_now
    t = run(t, t + 15_000, ALL)  # back: everyone was alive all along
    assert not liveness.hearing(t).blind_now
    assert elections() == [("g1", 1, 1), ("g2", 1, 1)]  # only the first elections
    assert {g.master_broker_id for g in ReplicaGroup.objects.all()} == {1}


def test_a_master_killed_with_the_web_process_is_replaced_by_one_election_after_a_timeout_of_hearing(cluster):
    t = run(cluster, cluster + 5_000, ALL)
    outage_end = run(t, t + 4_000, set())  # web process and g1's master killed together
    t = run(outage_end, outage_end + 6_000, ALL - {("g1", 1)})
    assert elections()[2:] == []  # 10 s after the kill, but the control plane heard only ~7.5 s of it
    t = run(t, t + 6_000, ALL - {("g1", 1)})
    assert elections()[2:] == [("g1", 2, 3)]  # one election, epoch 2: no epoch burnt while blind
    assert ReplicaGroup.objects.get(broker_name="g2").master_epoch == 1


def test_after_a_redis_restart_a_master_missing_from_the_table_is_unknown_until_the_record_is_warm(cluster):
    t = run(cluster, cluster + 3_000, ALL)
    clear_redis()  # Redis restarted with nothing on disk: heartbeats, hearing record, slots
    t = run(t, t + 8_000, ALL - {("g1", 1)})  # g1's master died meanwhile; the others beat again
    assert elections()[2:] == []
    t = run(t, t + 4_000, ALL - {("g1", 1)})
    assert elections()[2:] == [("g1", 2, 3)]


def test_after_a_redis_restart_a_live_master_is_never_deposed(cluster):
    t = run(cluster, cluster + 3_000, ALL)
    clear_redis()
    for name, i in sorted(ALL - {("g1", 1)}):  # the slaves beat first
        beat(name, i, t + 100)
    t = run(t + 100, t + 20_000, ALL)
    assert elections() == [("g1", 1, 1), ("g2", 1, 1)]


@pytest.mark.parametrize("known", [1, 2, 3, 4, 7, 300])
def test_the_hearing_reads_the_horizon_by_rank_as_the_pure_rule_defines_it(known):
    """The hearing record reads one expectation, the horizon's (so an election costs the same with 3
    brokers known or 3,000); it must be the one blindness.horizon picks from them all, the stale ones
    left out."""
    import random

    from controlplane import blindness

    record = liveness.HEARING
    stamps = [random.Random(known).randrange(1_000_000) for _ in range(known)]
    client = sync_client()
    now = client.time()[0] * 1000
    client.zadd(record.expect_key, {f"m{i}": now - 30_000 + s for i, s in enumerate(stamps)})
    client.zadd(record.expect_key, {f"stale{i}": now - 61_000 - s for i, s in enumerate(stamps)})  # count for nothing
    reading = record._read(client, now)
    expected = [now - 30_000 + s for s in stamps]
    assert reading.known == known and reading.at_horizon == blindness.horizon(expected + [now - 61_000], now)
    assert record.view(now).known == known


def slow_beat(i: int, at: int) -> None:
    liveness.heartbeat(
        liveness.Beat("c1", f"slow{i // 3}", i % 3 + 1, f"127.0.0.2:{i}", epoch=1, heartbeat_timeout_millis=90_000), now_ms=at
    )


def run_mixed(start: int, end: int, beating: set[tuple[str, int]], *, web: bool) -> int:
    """``run`` beside 60 brokers declaring 90 s and beating every 30 s, with the web tier stamping
    every 250 ms while ``web`` (no heartbeat at all reaches the control plane otherwise)."""
    for at in range(start + 250, end + 1, 250):
        if web:
            hearing.stamp_web(now_ms=at)
            for i in range(60):
                if at % 30_000 == (start + 500 * i) % 30_000:
                    slow_beat(i, at)
            if at % 1_000 == start % 1_000:
                for name, i in sorted(beating):
                    beat(name, i, at)
        if at % 500 == start % 500:
            scan(at)
    return end


def test_in_a_cluster_of_30_s_beaters_a_25_s_web_outage_deposes_nobody_and_a_master_killed_with_it_goes_once(cluster):
    """Issue 34: most brokers beat every 30 s, so most are not due within the outage; the web tier's
    own stamp says the control plane could not hear."""
    for i in range(60):
        slow_beat(i, cluster)
    t = run_mixed(cluster, cluster + 35_000, ALL, web=True)
    assert not liveness.hearing(t).blind_now
    t = run_mixed(t, t + 25_000, set(), web=False)
    assert liveness.hearing(t).blind_now
    # g1's master died with the web tier. The 30 s beaters that fell due in the outage count as unheard
    # until they beat again (within 30 s): the verdict waits for more than half to be heard.
    t = run_mixed(t, t + 40_000, ALL - {("g1", 1)}, web=True)
    assert not liveness.hearing(t).blind_now
    assert elections() == [("g1", 1, 1), ("g2", 1, 1), ("g1", 2, 3)]  # one election, epoch 2
    assert ReplicaGroup.objects.get(broker_name="g2").master_epoch == 1


def test_an_election_among_live_replicas_reads_no_hearing_and_one_judging_a_silent_master_does(cluster):
    """The read an election makes carries the hearing only when a replica is past its timeout (issue
    34: the guard costs an election among live replicas nothing), and a Redis that lost its scripts
    (a restart) loads them again."""
    seconds, micros = sync_client().time()
    now = seconds * 1000 + micros // 1000  # the fixture's last beats were on Redis's clock
    members = [liveness.member("c1", "g1", i) for i in (1, 2, 3)]
    (at, hearing), fields = liveness._read(members, now)
    assert at == now and hearing is None and len(fields) == 3
    sync_client().script_flush()
    (at, hearing), _ = liveness._read(members, now + TIMEOUT + 1_000)  # everyone past 10 s
    assert hearing is not None and hearing.now == at
