"""A set's state read while transitions commit (controller/selectors.py one_snapshot): the
SyncStateSet and its epoch always come from the same commit. Read apart (its row, then its
replicas), an alter committed between the two queries showed one epoch with another epoch's
members; the restart e2e test's observer saw "SyncStateSet [1, 2] at epoch 5" where epoch 5 was [1].

A real thread on its own Postgres connection alters the set back and forth while this one reads."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from controlplane.controller import selectors, services
from controlplane.controller.models import Transition
from tests.controller.test_concurrency import make_groups

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NAME = "snap"
ALTERS = 300


def alter_back_and_forth(done: threading.Event, failures: list[str]) -> None:
    try:
        for i in range(ALTERS):
            state = selectors.replica_info(NAME)
            members = {1, 2} if i % 2 == 0 else {1}
            outcome = services.alter_sync_state_set(
                NAME,
                master_broker_id=1,
                master_epoch=state.master_epoch,
                new_sync_state_set=members,
                sync_state_set_epoch=state.sync_state_set_epoch,
            )
            if not outcome.ok:
                failures.append(f"alter {i}: {outcome.code}")
    except Exception as exc:  # reported by the test
        failures.append(repr(exc))
    finally:
        done.set()
        connection.close()


@pytest.mark.parametrize("read", ["replica_info", "states"])
def test_a_state_read_while_alters_commit_is_always_one_commit_s_state(read):
    make_groups([NAME])
    done, failures = threading.Event(), []
    writer = threading.Thread(target=alter_back_and_forth, args=(done, failures))
    seen: set[tuple[int, frozenset[int]]] = set()
    writer.start()
    try:
        while not done.is_set():
            state = selectors.replica_info(NAME) if read == "replica_info" else selectors.states([NAME])[0]
            seen.add((state.sync_state_set_epoch, state.sync_state_set))
    finally:
        writer.join(60)
    assert failures == []
    committed = {
        (t.new_sync_state_set_epoch, frozenset(t.new_sync_state_set)) for t in Transition.objects.filter(broker_name=NAME)
    }
    assert len(seen) > 10, "the reads did not overlap the alters"
    assert seen <= committed, sorted(seen - committed)
