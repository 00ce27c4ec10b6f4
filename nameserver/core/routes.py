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
    perms = {qd.broker_name: qd.perm for qd in queue_datas}
    broker_datas = [
        _substitute_acting_master(
            bd,
            route_acting_master_id(
                topic,
                bd.broker_addrs,
                perms.get(bd.broker_name),
                enable_acting_master=bd.enable_acting_master,
                support_acting_master=support_acting_master,
            ),
        )
        for bd in broker_datas
    ]
    return TopicRouteData(tuple(sorted(queue_datas, key=lambda q: q.broker_name)), tuple(broker_datas))


def acting_master_id(broker_ids: Iterable[int], *, enable_acting_master: bool) -> int | None:
    """The replica that stands in for the master of a set, or None: with acting master enabled, a set
    without a master (id 0) is served by its smallest live slave id (the code says "minimum id", the
    RIP says "brokerId 1")."""
    ids = set(broker_ids)
    if not enable_acting_master or not ids or MASTER_ID in ids:
        return None
    return min(ids)


def route_acting_master_id(
    topic: str,
    broker_ids: Iterable[int],
    topic_perm: int | None,
    *,
    enable_acting_master: bool,
    support_acting_master: bool,
) -> int | None:
    """The id the route of ``topic`` shows as id 0 for one broker set, or None (reference §3.5, every
    condition): ``supportActingMaster``, not a member-group topic, the set's queue data of the topic
    not writeable, and a stand-in by ``acting_master_id``. ``topic_perm`` None: the set does not
    serve the topic."""
    if not support_acting_master or topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
        return None
    if topic_perm is None or P.is_writeable(topic_perm):
        return None
    return acting_master_id(broker_ids, enable_acting_master=enable_acting_master)


@dataclass(frozen=True)
class RoutedActingMaster:
    """A broker set's acting master as its topics' routes show it (as id 0)."""

    broker_id: int
    broker_addr: str
    topics: tuple[str, ...]  # the set's topics whose routes show it, sorted
    other_topics: int  # the set's topics whose routes do not (writeable queues, member-group topics)


def routed_acting_master(
    broker_addrs: Mapping[int, str],
    topic_perms: Mapping[str, int],
    *,
    enable_acting_master: bool,
    support_acting_master: bool,
) -> RoutedActingMaster | None:
    """The acting master the routes of a set's topics show (``route_acting_master_id`` for each of
    ``topic_perms``, the set's queue data perm by topic), or None when no route shows one.
    ``broker_addrs``: the members the routes list (isolated ones left out)."""
    shown = sorted(
        topic
        for topic, perm in topic_perms.items()
        if route_acting_master_id(
            topic,
            broker_addrs,
            perm,
            enable_acting_master=enable_acting_master,
            support_acting_master=support_acting_master,
        )
        is not None
    )
    acting_id = acting_master_id(broker_addrs, enable_acting_master=enable_acting_master)
    if not shown or acting_id is None:
        return None
    return RoutedActingMaster(acting_id, broker_addrs[acting_id], tuple(shown), len(topic_perms) - len(shown))


def _substitute_acting_master(bd: BrokerData, acting_id: int | None) -> BrokerData:
    """The set's route entry with its acting master (``route_acting_master_id``) shown as id 0."""
    if acting_id is None:
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
