"""The nameserver's inactive-broker scan (reference §3.4) judged at an injected instant: no sleeping
against Redis's clock. A broker is expired once its last heartbeat plus its timeout has passed."""

from __future__ import annotations

import pytest

from nameserver import liveness, services, settings_store
from nameserver.models import BrokerMember

from .helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

M, S1 = "127.0.0.1:10911", "127.0.0.1:10921"


def register(api, broker_id: int, addr: str, timeout: int) -> None:
    r = api.post(f"{NS}/brokers/register", register_body(broker_id, addr, timeout=timeout), format="json")
    assert r.status_code == 200, r.content


def registered() -> set[str]:
    return set(BrokerMember.objects.values_list("broker_addr", flat=True))


def test_the_scan_unregisters_exactly_the_brokers_expired_at_the_instant_it_is_given(api):
    settings_store.update_config({"scanNotActiveBrokerInterval": 100})
    register(api, 0, M, timeout=1_000)
    register(api, 1, S1, timeout=5_000)
    stamped = liveness.mark_registered("c1", M, 1_000)  # the clock reading both beats are near
    m, s1 = liveness.member("c1", M), liveness.member("c1", S1)
    assert liveness.expired_members(stamped + 999) == []
    assert liveness.is_expired(m, stamped + 1_001) and not liveness.is_expired(s1, stamped + 1_001)

    removed = services.scan_not_active_brokers(now_ms=stamped + 1_001)
    assert [(r.broker_addr, r.broker_id, r.write_perm_wiped) for r in removed] == [(M, 0, True)]
    assert registered() == {S1}
    assert liveness.live_members() == {s1}


def test_a_heartbeat_stamped_at_an_instant_moves_the_deadline_from_that_instant(api):
    register(api, 0, M, timeout=1_000)
    m = liveness.member("c1", M)
    assert liveness.heartbeat([m, liveness.member("c1", S1)], now_ms=10_000) == [True, False]
    assert liveness.last_heartbeats([m])[m] == (10_000, 11_000)
    assert liveness.is_expired(m, 11_001) and not liveness.is_expired(m, 11_000)
