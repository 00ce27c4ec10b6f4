"""Which brokers an operator isolated: a ground-level read of ``controlplane.models.Isolation`` that
both siblings use (the nameserver leaves them out of routes and tells a registering broker; the
controller never elects them). Isolating and lifting is an operation: controlplane/operations/isolation.py."""

from __future__ import annotations

from .models import Isolation


def isolated_addrs(cluster_name: str | None = None) -> set[tuple[str, str]]:
    """(cluster, broker address) of every isolated broker."""
    qs = Isolation.objects.all()
    if cluster_name is not None:
        qs = qs.filter(cluster_name=cluster_name)
    return set(qs.values_list("cluster_name", "broker_addr"))


def is_isolated(cluster_name: str, broker_addr: str) -> bool:
    return Isolation.objects.filter(cluster_name=cluster_name, broker_addr=broker_addr).exists()
