"""An election reads the heartbeats of the set's replicas before it queues for the row lock (so the lock
covers Postgres only), and uses that early view only if the set still has the same replicas and the
view is fresh; otherwise it reads them again under the lock."""

from __future__ import annotations

import time

import pytest

from controlplane.controller import liveness, services
from controlplane.controller.config_store import update_config
from controlplane.controller.core.state import LiveInfo, Trigger

from .helpers import addr

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def beat(i: int) -> None:
    services.heartbeat(liveness.Beat("c1", "g1", i, addr(i), epoch=1, max_offset=100, heartbeat_timeout_millis=60_000))


def replica(i: int) -> None:
    assert services.apply_broker_id("c1", "g1", i, f"{addr(i)};{i}").ok
    beat(i)


def test_a_replica_added_since_the_last_lock_is_seen_alive():
    update_config({"enableElectUncleanMaster": True})
    for i in (1, 2):
        replica(i)
    assert services.elect_master("g1", broker_id=1, designate=True, trigger=Trigger.OPERATOR).ok  # the set is known
    replica(3)
    out = services.elect_master("g1", broker_id=3, designate=True, trigger=Trigger.OPERATOR)
    assert out.ok and out.state.master_broker_id == 3


@pytest.mark.parametrize(
    ("same_replicas", "age_s", "uses_early"),
    [
        (True, 0.0, True),
        (True, services.EARLY_VIEW_MAX_AGE_S + 0.1, False),
        (False, 0.0, False),
    ],
    ids=["same-replicas-fresh: used", "too-old: read again", "replicas-changed: read again"],
)
def test_when_the_early_view_is_used(same_replicas, age_s, uses_early):
    for i in (1, 2):
        replica(i)
    locked = services._locked("g1")
    replicas = ("c1", locked.state.replica_ids if same_replicas else frozenset({1}))
    says_dead = {1: LiveInfo(1, alive=True), 2: LiveInfo(2, alive=False)}
    early = services._EarlyView(replicas, says_dead, time.monotonic() - age_s)
    live = locked.live(early)
    assert live[2].alive is (not uses_early)  # Redis says 2 is alive; the made-up early view says dead
