"""The controller is an app of its own (label ``controller``) whose tables kept their names, and it
tells the floors above it of a committed transition with a signal instead of calling them."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction

from controlplane.controller import liveness, services
from controlplane.controller.core.state import Trigger
from controlplane.controller.models import ControllerConfigEntry, Replica, ReplicaGroup, Transition
from controlplane.controller.signals import replica_group_changed

from .helpers import addr

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_the_models_belong_to_the_controller_app_and_keep_their_tables():
    tables = {m._meta.label: m._meta.db_table for m in (ReplicaGroup, Replica, Transition, ControllerConfigEntry)}
    assert tables == {
        "controller.ReplicaGroup": "controlplane_replicagroup",
        "controller.Replica": "controlplane_replica",
        "controller.Transition": "controlplane_transition",
        "controller.ControllerConfigEntry": "controlplane_controllerconfigentry",
    }
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)  # exits 1 if a model and its migrations differ
    assert "No changes detected" in out.getvalue()


@pytest.fixture
def heard():
    """The broker names announced with ``replica_group_changed`` during the test."""
    names: list[str] = []

    def receiver(sender, broker_name, **kwargs):
        names.append(broker_name)

    replica_group_changed.connect(receiver, dispatch_uid="test-heard")
    yield names
    replica_group_changed.disconnect(dispatch_uid="test-heard")


def group(name: str = "g1") -> None:
    for i in (1, 2):
        assert services.apply_broker_id("c1", name, i, f"{addr(i)};{i}").ok
        services.heartbeat(liveness.Beat("c1", name, i, addr(i), epoch=1, max_offset=100, heartbeat_timeout_millis=60_000))


def test_a_committed_election_or_alter_is_announced_after_commit_and_a_refusal_is_not(heard):
    group()
    assert heard == []  # ids and registrations are not the page's business
    with transaction.atomic():
        assert services.elect_master("g1", broker_id=1, designate=True, trigger=Trigger.OPERATOR).ok
        assert heard == []  # not before the commit
    assert heard == ["g1"]
    assert not services.elect_master("g1", broker_id=9, designate=True, trigger=Trigger.OPERATOR).ok
    assert services.alter_sync_state_set(
        "g1", master_broker_id=1, master_epoch=1, new_sync_state_set={1, 2}, sync_state_set_epoch=1
    ).ok
    assert heard == ["g1", "g1"]


def test_a_rolled_back_election_is_not_announced(heard):
    group()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert services.elect_master("g1", broker_id=1, designate=True, trigger=Trigger.OPERATOR).ok
        raise RuntimeError("rolled back")
    assert heard == [] and ReplicaGroup.objects.get().master_broker_id is None


def test_a_failing_subscriber_never_fails_the_election():
    def broken(sender, broker_name, **kwargs):
        raise RuntimeError("a page's bug")

    group()
    replica_group_changed.connect(broken, dispatch_uid="test-broken")
    try:
        assert services.elect_master("g1", broker_id=2, designate=True, trigger=Trigger.OPERATOR).ok
    finally:
        replica_group_changed.disconnect(dispatch_uid="test-broken")
    assert ReplicaGroup.objects.get().master_broker_id == 2


def test_the_invariant_command_lives_in_the_controller_app():
    from django.core.management import get_commands

    assert get_commands()["check_controller_invariants"] == "controlplane.controller"
