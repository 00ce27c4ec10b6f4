"""Liveness by each broker's own declared timeout on the nameserver (issue 34), through its REST API
as a RocketMQ broker speaks it, on Redis's own clock: 20 replica sets of 3 registered with 90 s
timeouts (classic brokers re-register every 30 s) beside one set heartbeating every second. The fast
set's master dies: it is unregistered after its own timeout and the route shows its slave acting
(RIP-32), although most brokers have not been heard for seconds."""

from __future__ import annotations

import time

import pytest

from nameserver import liveness, services, settings_store

from .helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def ok(r):
    assert r.status_code == 200, r.content
    return r.json()


def fast_addr(i: int) -> str:
    return f"127.0.0.1:{20911 + 10 * i}"


def test_a_dead_fast_master_among_slow_long_timeout_brokers_goes_and_its_slave_acts(api):
    settings_store.update_config({"scanNotActiveBrokerInterval": 100})
    ok(api.patch(f"{NS}/config", {"supportActingMaster": True}, format="json"))
    for s in range(20):
        for i in range(3):
            body = register_body(i, f"127.0.0.{2 + s}:{10911 + 10 * i}", name=f"slow{s}", timeout=90_000, topics={})
            ok(api.post(f"{NS}/brokers/register", body, format="json"))
    for i in range(3):
        ok(api.post(f"{NS}/brokers/register", register_body(i, fast_addr(i), name="fast", timeout=3_000), format="json"))

    def tick(beating, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for i in beating:
                assert ok(api.post(f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": fast_addr(i)}, format="json"))[
                    "registered"
                ]
            services.scan_not_active_brokers()
            time.sleep(0.3)

    tick((0, 1, 2), 2.5)
    assert not liveness.hearing().blind_now
    deadline = time.monotonic() + 20  # the master is silent from here
    while liveness.member("c1", fast_addr(0)) in liveness.live_members() and time.monotonic() < deadline:
        tick((1, 2), 0.3)
    route = ok(api.get(f"{NS}/routes/TopicA"))
    (fast,) = [bd for bd in route["brokerDatas"] if bd["brokerName"] == "fast"]
    assert fast["brokerAddrs"] == {"0": fast_addr(1), "2": fast_addr(2)} and fast["actingMaster"] is True
    assert len(liveness.live_members()) == 62  # every slow broker is still registered
