"""Topic routes as clients see them (reference §3.2, §3.5): ``pickupTopicRouteData``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import perm as P
from .values import MASTER_ID, SYNC_BROKER_MEMBER_GROUP_PREFIX, Group, QueueData


@dataclass(frozen=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]
    zone_name: str = ""
    enable_acting_master: bool = False
    acting_master: bool = False  # ours, for operators: id 0 here is a slave standing in, read-only
    grpc_addrs: Mapping[int, str] = field(default_factory=dict)  # ours: the RocketMQ 5 client endpoints


@dataclass(frozen=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]


def pickup_route(
    topic: str,
    queue_datas: Sequence[QueueData],
    groups: Mapping[str, Group],
    *,
    support_acting_master: bool,
) -> TopicRouteData | None:
    """The route of ``topic``, or None when it has no queue data or no live broker set."""
    if not queue_datas:
        return None
    broker_datas = [
        BrokerData(
            cluster=g.cluster_name,
            broker_name=g.broker_name,
            broker_addrs=dict(sorted(g.broker_addrs.items())),
            zone_name=g.zone_name,
            enable_acting_master=bool(g.enable_acting_master),
            grpc_addrs=dict(sorted(g.grpc_addrs.items())),
        )
        for name in sorted({qd.broker_name for qd in queue_datas})
        if (g := groups.get(name)) is not None and g.members
    ]
    if not broker_datas:
        return None
    if support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
        perms = {qd.broker_name: qd.perm for qd in queue_datas}
        broker_datas = [_substitute_acting_master(bd, perms.get(bd.broker_name)) for bd in broker_datas]
    return TopicRouteData(tuple(sorted(queue_datas, key=lambda q: q.broker_name)), tuple(broker_datas))


def acting_master_id(broker_ids: Iterable[int], *, enable_acting_master: bool) -> int | None:
    """The replica that stands in for the master of a set, or None: with acting master enabled, a set
    without a master (id 0) is served by its smallest live slave id (the code says "minimum id", the
    RIP says "brokerId 1"). The dashboard shows the same id."""
    ids = set(broker_ids)
    if not enable_acting_master or not ids or MASTER_ID in ids:
        return None
    return min(ids)


def _substitute_acting_master(bd: BrokerData, topic_perm: int | None) -> BrokerData:
    """A masterless set with acting master enabled and a read-only queue shows its acting master as
    id 0."""
    acting_id = acting_master_id(bd.broker_addrs, enable_acting_master=bd.enable_acting_master)
    if acting_id is None or topic_perm is None or P.is_writeable(topic_perm):
        return bd
    addrs = dict(bd.broker_addrs)
    acting_addr = addrs.pop(acting_id)
    grpc = dict(bd.grpc_addrs)
    acting_grpc = grpc.pop(acting_id, None)
    return BrokerData(
        cluster=bd.cluster,
        broker_name=bd.broker_name,
        broker_addrs={MASTER_ID: acting_addr, **dict(sorted(addrs.items()))},
        zone_name=bd.zone_name,
        enable_acting_master=bd.enable_acting_master,
        acting_master=True,
        grpc_addrs={**({MASTER_ID: acting_grpc} if acting_grpc else {}), **dict(sorted(grpc.items()))},
    )
