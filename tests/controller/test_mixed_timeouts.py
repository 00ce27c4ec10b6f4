"""Liveness by each broker's own declared timeout (issue 34), through the controller's REST API as a
RocketMQ broker speaks it, on Redis's own clock: 20 replica sets of 3 declare 90 s and beat every 30 s
(legitimately alive for RocketMQ), beside one set that beats every second. Most brokers have not beaten
for seconds, yet none of them is due: the control plane is not blind, and a dead master of the fast
set expires after its own timeout, an election follows, and a designated election of a dead replica
answers 2012 and changes nothing."""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from controlplane.auth import ApiToken
from controlplane.controller import config_store, liveness, services
from controlplane.controller.models import ReplicaGroup

from .helpers import CTL, addr, apply_body, heartbeat_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SLOW_SETS = [f"slow{i}" for i in range(20)]
FAST = "fast"
SLOW_TIMEOUT, FAST_TIMEOUT = 90_000, 3_000


def ok(r):
    assert r.status_code == 200, r.content
    return r.json()


@pytest.fixture
def broker():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('ctl-broker', 'broker')[1]}")
    return client


def join(client, name: str, broker_id: int, timeout: int) -> None:
    ok(client.post(f"{CTL}/brokers/apply-broker-id", apply_body(broker_id, name), format="json"))
    ok(
        client.post(
            f"{CTL}/brokers/register",
            {"clusterName": "c1", "brokerName": name, "brokerId": broker_id, "brokerAddress": addr(broker_id)},
            format="json",
        )
    )
    beat(client, name, broker_id, timeout)


def beat(client, name: str, broker_id: int, timeout: int) -> None:
    ok(client.post(f"{CTL}/brokers/heartbeat", heartbeat_body(broker_id, name, epoch=1, timeout=timeout), format="json"))


def elect(client, name: str, broker_id: int, designate: bool = False):
    body = {"clusterName": "c1", "brokerName": name, "brokerId": broker_id, "designateElect": designate}
    return client.post(f"{CTL}/elect-master", body, format="json")


def test_a_dead_fast_master_among_slow_long_timeout_brokers_expires_and_is_replaced(broker, api):
    config_store.update_config({"scanNotActiveBrokerInterval": 100, "scanInactiveMasterInterval": 100})
    for name in SLOW_SETS:
        for i in (1, 2, 3):
            join(broker, name, i, SLOW_TIMEOUT)
    for i in (1, 2, 3):
        join(broker, FAST, i, FAST_TIMEOUT)
    assert ok(elect(broker, FAST, 1))["masterBrokerId"] == 1
    ok(
        broker.post(
            f"{CTL}/alter-sync-state-set",
            {"brokerName": FAST, "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, 2, 3], "syncStateSetEpoch": 1},
            format="json",
        )
    )

    def tick(beating, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for i in beating:
                beat(broker, FAST, i, FAST_TIMEOUT)
            services.scan_inactive_brokers()
            services.scan_inactive_masters()
            time.sleep(0.3)

    tick((1, 2, 3), 2.5)  # 60 of 63 brokers have not beaten for more than 1.5 s: not blind
    assert not liveness.hearing().blind_now
    # Replica 3's last heartbeat declares 100 ms; 0.4 s later it is dead, and cannot be made master.
    beat(broker, FAST, 3, 100)
    time.sleep(0.4)
    assert not liveness.live_infos("c1", FAST, [3])[3].alive
    refused = elect(api, FAST, 3, designate=True)
    assert refused.status_code != 200 and refused.json()["code"] == 2012, refused.content
    assert ReplicaGroup.objects.get(broker_name=FAST).master_broker_id == 1
    # The master's last heartbeat declares 100 ms too; then silence. It expires, and one election follows.
    beat(broker, FAST, 1, 100)
    deadline = time.monotonic() + 20
    while ReplicaGroup.objects.get(broker_name=FAST).master_broker_id == 1 and time.monotonic() < deadline:
        tick((2,), 0.3)
    group = ReplicaGroup.objects.get(broker_name=FAST)
    assert (group.master_broker_id, group.master_epoch) == (2, 2), "the dead master was kept in place"
    again = elect(api, FAST, 1, designate=True)
    assert again.status_code != 200 and again.json()["code"] == 2012, again.content
    group.refresh_from_db()
    assert (group.master_broker_id, group.master_epoch) == (2, 2)
    # The slow sets' brokers are all still alive: none was declared dead.
    infos = liveness.live_infos_many([("c1", name, (1, 2, 3)) for name in SLOW_SETS])
    assert all(info.alive for name in SLOW_SETS for info in infos[name].values())
