"""Isolating a broker (an operator action): it leaves the topic routes, stops being a candidate in
elections, and is told over its websocket to stop taking writes; lifting it undoes all three."""

from __future__ import annotations

from django.db import transaction

from controlplane.push import send_frames
from nameserver import liveness as ns_liveness
from nameserver import route_cache

from .models import Isolation


def isolated_addrs(cluster_name: str | None = None) -> set[tuple[str, str]]:
    """(cluster, broker address) of every isolated broker."""
    qs = Isolation.objects.all()
    if cluster_name is not None:
        qs = qs.filter(cluster_name=cluster_name)
    return set(qs.values_list("cluster_name", "broker_addr"))


def set_isolated(cluster_name: str, broker_name: str, broker_addr: str, isolated: bool, *, by: str) -> bool:
    """Isolate or lift; True if something changed. Routes move at once (registry version), the broker
    hears it on its socket (and again on its next registration answer)."""
    with transaction.atomic():
        if isolated:
            _, changed = Isolation.objects.get_or_create(cluster_name=cluster_name, broker_addr=broker_addr,
                                                         defaults={"broker_name": broker_name, "by": by})
        else:
            changed = Isolation.objects.filter(cluster_name=cluster_name, broker_addr=broker_addr).delete()[0] > 0
        if changed:
            transaction.on_commit(route_cache.registry_changed)
            transaction.on_commit(lambda: tell_broker(cluster_name, broker_addr, isolated))
    return changed


def tell_broker(cluster_name: str, broker_addr: str, isolated: bool) -> int:
    member = ns_liveness.member(cluster_name, broker_addr)
    return send_frames(ns_liveness.connections([member]).values(), "isolate", {"isolated": isolated})
