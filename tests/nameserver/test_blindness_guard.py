"""The blindness guard on the nameserver's inactive-broker scan, against real Redis and Postgres on an
injected clock: while the nameserver hears none of its brokers (its web tier or Redis away), none is
unregistered, so no route loses a broker; one that stays silent after it hears again goes once a
timeout of hearing has passed."""

from __future__ import annotations

import pytest

from controlplane.redis import key, sync_client
from nameserver import liveness, services, settings_store
from nameserver.models import BrokerMember

from .helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ADDRS = [f"127.0.0.1:{10911 + 10 * i}" for i in range(4)]
TIMEOUT = 10_000


def registered() -> set[str]:
    return set(BrokerMember.objects.values_list("broker_addr", flat=True))


def test_an_outage_of_the_nameserver_unregisters_nobody_and_a_broker_silent_after_it_goes_later(api):
    settings_store.update_config({"scanNotActiveBrokerInterval": 100})
    for i, addr in enumerate(ADDRS):
        r = api.post(f"{NS}/brokers/register", register_body(i, addr, timeout=TIMEOUT), format="json")
        assert r.status_code == 200, r.content
    seconds, micros = sync_client().time()
    start = seconds * 1000 + micros // 1000 + 1_000  # injected instants from just after the registrations
    members = [liveness.member("c1", a) for a in ADDRS]

    def run(first: int, last: int, beating: list[str]) -> list[str]:
        gone = []
        for at in range(first, last + 1, 500):
            if beating and at % 1_000 == start % 1_000:
                assert all(liveness.heartbeat(beating, now_ms=at))
            sync_client().delete(key("ns", "scan-slot"))  # as if the 500 ms had passed on Redis's clock
            gone += [r.broker_addr for r in services.scan_not_active_brokers(now_ms=at)]
        return gone

    assert run(start, start + 3_000, members) == []
    assert run(start + 3_500, start + 30_000, []) == []  # 27 s without one heartbeat: blind, not dead
    assert liveness.hearing(start + 30_000).blind_now
    assert registered() == set(ADDRS)
    # Back; the last broker died during the outage and never beats again.
    assert run(start + 30_500, start + 36_000, members[:3]) == []
    gone = run(start + 36_500, start + 45_000, members[:3])
    assert gone == [ADDRS[3]] and registered() == set(ADDRS[:3])
