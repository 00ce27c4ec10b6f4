"""Isolating a broker (an operator's use case, spanning both siblings): it leaves the topic routes
(nameserver), stops being a candidate in elections (controller), and is told over its websocket to stop
taking writes; lifting it undoes all three. The dashboard's action and the REST endpoint both come here.

The fact itself is one ground row (``controlplane.models.Isolation``, keyed by cluster and address),
which the nameserver reads for routes and registration answers, and the controller for elections; so a
restarted broker, or one that missed the push, hears it again in its next registration answer."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from controlplane.controller import selectors as ctl_selectors
from controlplane.controller.signals import announce_group_changed
from controlplane.models import Isolation
from controlplane.push import send_frames
from nameserver import liveness as ns_liveness
from nameserver import route_cache
from nameserver import selectors as ns_selectors


class UnknownGroup(LookupError):
    pass


class UnknownMember(LookupError):
    pass


@dataclass(frozen=True)
class Target:
    """One broker process: the replica ``broker_id`` of ``broker_name`` at ``broker_addr``."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str


@dataclass(frozen=True)
class IsolationResult:
    target: Target
    isolated: bool  # the state now
    changed: bool

    @property
    def was_isolated(self) -> bool:
        return self.isolated != self.changed

    def as_dict(self) -> dict:
        t = self.target
        return {
            "clusterName": t.cluster_name,
            "brokerName": t.broker_name,
            "brokerId": t.broker_id,
            "brokerAddr": t.broker_addr,
            "isolated": self.isolated,
            "changed": self.changed,
        }


def find_target(broker_name: str, broker_id: int) -> Target:
    """A replica by its controller id in a controller-managed set, else a member by its nameserver id."""
    state = ctl_selectors.replica_info(broker_name)
    replica = state.replica(broker_id) if state is not None else None
    if replica is not None:
        return Target(state.cluster_name, broker_name, broker_id, replica.broker_address)
    group = ns_selectors.member_group(broker_name)
    if state is None and group is None:
        raise UnknownGroup(broker_name)
    member = group.member_with_id(broker_id) if group is not None else None
    controller_addrs = {r.broker_address for r in state.replicas} if state is not None else set()
    if member is None or member.broker_addr in controller_addrs:
        raise UnknownMember(f"no broker {broker_id} in {broker_name}")
    return Target(group.cluster_name, broker_name, broker_id, member.broker_addr)


def isolate(broker_name: str, broker_id: int, isolated: bool, *, by: str) -> IsolationResult:
    """Isolate (or lift) the replica ``broker_id`` of ``broker_name``; UnknownGroup / UnknownMember."""
    target = find_target(broker_name, broker_id)
    changed = set_isolated(target.cluster_name, target.broker_name, target.broker_addr, isolated, by=by)
    return IsolationResult(target, isolated, changed)


def set_isolated(cluster_name: str, broker_name: str, broker_addr: str, isolated: bool, *, by: str) -> bool:
    """Isolate or lift by address; True if something changed. After commit: routes move at once
    (registry version), the broker hears it on its socket, pages hear that the group changed."""
    with transaction.atomic():
        if isolated:
            _, changed = Isolation.objects.get_or_create(
                cluster_name=cluster_name, broker_addr=broker_addr, defaults={"broker_name": broker_name, "by": by}
            )
        else:
            changed = Isolation.objects.filter(cluster_name=cluster_name, broker_addr=broker_addr).delete()[0] > 0
        if changed:
            transaction.on_commit(route_cache.registry_changed, robust=True)
            transaction.on_commit(lambda: tell_broker(cluster_name, broker_addr, isolated), robust=True)
            transaction.on_commit(lambda: announce_group_changed(broker_name), robust=True)
    return changed


def tell_broker(cluster_name: str, broker_addr: str, isolated: bool) -> int:
    member = ns_liveness.member(cluster_name, broker_addr)
    return send_frames(ns_liveness.connections([member]).values(), "isolate", {"isolated": isolated})
