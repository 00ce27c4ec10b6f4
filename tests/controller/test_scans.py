"""The controller's periodic scans (what Celery beat runs) and the invariant-checker command."""

from __future__ import annotations

import time

import pytest
from django.core.management import CommandError, call_command

from controlplane.controller import config_store, liveness, services
from controlplane.controller.core.state import Trigger
from controlplane.controller.models import ReplicaGroup, Transition
from controlplane.redis import sync_client

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def make_set(name: str, *, master_timeout: int, others_timeout: int = 60_000) -> None:
    for i in (1, 2, 3):
        assert services.apply_broker_id("c1", name, i, f"127.0.0.1:{10000 + i};1").ok
        timeout = master_timeout if i == 1 else others_timeout
        services.heartbeat(
            liveness.Beat("c1", name, i, f"127.0.0.1:{10000 + i}", epoch=0, max_offset=10 * i, heartbeat_timeout_millis=timeout)
        )
    assert services.elect_master(name, broker_id=1).ok
    assert services.alter_sync_state_set(
        name, master_broker_id=1, master_epoch=1, new_sync_state_set={1, 2, 3}, sync_state_set_epoch=1
    ).ok


def redis_now_ms() -> int:
    seconds, micros = sync_client().time()
    return seconds * 1000 + micros // 1000


def hear_for_a_timeout(until_ms: int) -> None:
    """The scans' looks, every second of the last heartbeat timeout before ``until_ms`` (a control
    plane that just started does not take a broker missing from its table for dead)."""
    for t in range(until_ms - liveness.DEFAULT_TIMEOUT_MILLIS, until_ms, 1_000):
        liveness.hearing(t, look=True)


def test_the_inactive_broker_scan_drops_an_expired_master_and_elects():
    # The one scan test on Redis's own clock (the default): it waits for the master's 200 ms to pass.
    config_store.update_config({"scanNotActiveBrokerInterval": 100})
    make_set("g1", master_timeout=200)
    time.sleep(0.4)
    expired = services.scan_inactive_brokers()
    assert expired == [liveness.member("c1", "g1", 1)]
    group = ReplicaGroup.objects.get(broker_name="g1")
    assert (group.master_broker_id, group.master_epoch) == (3, 2)  # 3 reported the larger maxOffset
    assert Transition.objects.filter(kind="elect").last().trigger == Trigger.CONTROLLER


def test_the_inactive_master_scan_reelects_a_set_whose_master_is_dead_but_a_replica_lives():
    config_store.update_config({"scanInactiveMasterInterval": 100})
    make_set("g1", master_timeout=200)
    make_set("g2", master_timeout=60_000)  # healthy: left alone
    now = redis_now_ms()
    hear_for_a_timeout(now)
    # g1's master last beat 400 ms ago (an injected clock reading): dead for the scan and the election.
    liveness.heartbeat(
        liveness.Beat("c1", "g1", 1, "127.0.0.1:10001", epoch=0, max_offset=10, heartbeat_timeout_millis=200), now_ms=now - 400
    )
    assert services.scan_inactive_masters(now_ms=now) == ["g1"]
    assert ReplicaGroup.objects.get(broker_name="g1").master_epoch == 2
    assert ReplicaGroup.objects.get(broker_name="g2").master_epoch == 1
    # One scan per interval, however many beats and workers tick.
    assert services.scan_inactive_masters() == []


def test_nobody_alive_controller_elections_retry_then_leave_no_master():
    config_store.update_config({"scanNotActiveBrokerInterval": 100, "electMasterMaxRetryCount": 2})
    make_set("g1", master_timeout=200, others_timeout=200)
    assert services.scan_inactive_brokers(now_ms=redis_now_ms() + 400) == [liveness.member("c1", "g1", i) for i in (1, 2, 3)]
    group = ReplicaGroup.objects.get(broker_name="g1")
    # Each controller-triggered try that finds nobody still moves the epoch (reference §1.5 step 7).
    assert group.master_broker_id is None and group.master_epoch == 3
    assert list(Transition.objects.filter(kind="elect").values_list("response_code", flat=True)) == [0, 2004, 2004]


def test_invariant_checker_command(capsys):
    make_set("g1", master_timeout=60_000)
    call_command("check_controller_invariants")
    assert "no violation" in capsys.readouterr().out
    # A forged history row that gives epoch 1 a second master is reported, and the command fails.
    last = Transition.objects.filter(kind="alter").last()
    Transition.objects.create(
        cluster_name="c1",
        broker_name="g1",
        kind="alter",
        trigger="operator",
        old_master_broker_id=1,
        new_master_broker_id=2,
        old_master_epoch=1,
        new_master_epoch=1,
        old_sync_state_set_epoch=last.new_sync_state_set_epoch,
        new_sync_state_set_epoch=last.new_sync_state_set_epoch + 1,
        old_sync_state_set=[1, 2, 3],
        new_sync_state_set=[2, 3],
        response_code=0,
    )
    with pytest.raises(CommandError, match="violation"):
        call_command("check_controller_invariants", "g1")
    assert "two masters in one epoch" in capsys.readouterr().err
