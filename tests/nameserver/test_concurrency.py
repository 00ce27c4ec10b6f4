"""20 threads registering brokers of one set at once, each on its own Postgres connection."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from nameserver import liveness, services
from nameserver.core.registry import RegisterOutcome, RegisterRequest
from nameserver.core.values import DataVersion, TopicConfig
from nameserver.models import BrokerGroup, BrokerMember, TopicQueue

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

THREADS = 20
TOPICS = (TopicConfig("T1", 4, 4, 6), TopicConfig("T2", 4, 4, 6))


def race(requests: list[RegisterRequest]) -> list:
    barrier = threading.Barrier(len(requests))
    results: list = [None] * len(requests)

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = services.register_broker(requests[i])
        except Exception as exc:  # surfaced by the assertion below
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(not isinstance(r, Exception) for r in results), results
    return results


def registry_and_liveness_agree():
    """Every registered member is live, and every live entry has a registry row behind it."""
    members = {liveness.member(m.group.cluster_name, m.broker_addr) for m in BrokerMember.objects.select_related("group")}
    assert liveness.live_members() == members
    assert not liveness.expired_members()


def test_twenty_distinct_replicas_register_at_once():
    requests = [
        RegisterRequest("c1", f"127.0.0.1:{20000 + i}", "b1", i, "", "", 30_000, True, DataVersion(1, 1), TOPICS)
        for i in range(THREADS)
    ]
    results = race(requests)
    assert all(r.outcome is RegisterOutcome.ACCEPTED for r in results)
    assert BrokerGroup.objects.count() == 1
    assert sorted(BrokerMember.objects.values_list("broker_id", "broker_addr")) == [
        (i, f"127.0.0.1:{20000 + i}") for i in range(THREADS)
    ]
    # Queue data comes from the master (id 0), whose perm keeps write.
    assert set(TopicQueue.objects.values_list("topic", "perm")) == {("T1", 6), ("T2", 6)}
    registry_and_liveness_agree()


def test_twenty_addresses_racing_for_id_0_leave_the_highest_state_version_as_master():
    requests = [
        RegisterRequest("c1", f"127.0.0.1:{20000 + i}", "b1", 0, "", "", 30_000, True, DataVersion(state_version=i), TOPICS)
        for i in range(THREADS)
    ]
    race(list(reversed(requests)))
    assert list(BrokerMember.objects.values_list("broker_id", "broker_addr")) == [(0, f"127.0.0.1:{20000 + THREADS - 1}")]
    assert BrokerMember.objects.get().state_version == THREADS - 1
    registry_and_liveness_agree()
