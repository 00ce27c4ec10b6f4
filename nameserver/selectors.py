"""Reads of the registry. Values returned are the pure core's (``nameserver.core.values``)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from controlplane.isolation import isolated_addrs

from . import broker_status, liveness, route_cache, wire
from .core.acting import ActingMasterState, acting_master_state
from .core.routes import TopicRouteData, acting_master_id, pickup_route, routed_acting_master
from .core.values import DataVersion, Group, Member, QueueData
from .models import BrokerGroup, BrokerMember, StaticTopic, TopicQueue
from .settings_store import current_config, last_config


def member_value(m: BrokerMember) -> Member:
    return Member(
        broker_id=m.broker_id,
        broker_addr=m.broker_addr,
        ha_server_addr=m.ha_server_addr,
        data_version=DataVersion(m.state_version, m.data_version_counter, m.data_version_timestamp),
        heartbeat_timeout_millis=m.heartbeat_timeout_millis,
        grpc_addr=m.grpc_addr,
    )


def group_value(row: BrokerGroup, members: Iterable[BrokerMember] | None = None) -> Group:
    if members is None:
        members = BrokerMember.objects.filter(group=row).order_by("broker_id")
    return Group(
        cluster_name=row.cluster_name,
        broker_name=row.broker_name,
        zone_name=row.zone_name,
        enable_acting_master=row.enable_acting_master,
        members=tuple(member_value(m) for m in sorted(members, key=lambda m: m.broker_id)),
    )


def queue_value(q: TopicQueue, broker_name: str) -> QueueData:
    return QueueData(broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag, q.attributes)


def groups_by_name(names: Iterable[str] | None = None, *, cluster_name: str | None = None) -> dict[str, Group]:
    rows = BrokerGroup.objects.prefetch_related("members").order_by("broker_name")
    if names is not None:
        rows = rows.filter(broker_name__in=list(names))
    if cluster_name is not None:
        rows = rows.filter(cluster_name=cluster_name)
    return {r.broker_name: group_value(r, r.members.all()) for r in rows}


def topic_route(topic: str) -> TopicRouteData | None:
    """``GET_ROUTEINFO_BY_TOPIC`` as clients see it, acting-master substitution included."""
    support = current_config().support_acting_master
    return route_cache.cached(("route", topic, support), lambda: _topic_route(topic, support))


def cached_route_json(topic: str, version: int) -> bytes | None:
    """``topic_route_json`` when this process rendered it at registry ``version``, else None; never
    blocks (nameserver/fast_routes.py). A config change bumps the version, so the config this process
    read last names the entry."""
    config = last_config()
    if config is None:
        return None
    body = route_cache.peek(("route-json", topic, config.support_acting_master), version)
    return body if isinstance(body, bytes) else None


def topic_route_json(topic: str) -> bytes | None:
    """The same route rendered as JSON, cached as bytes: a topic spread over hundreds of broker
    sets costs milliseconds to render, and clients ask for routes every 30 s each."""
    support = current_config().support_acting_master

    def render() -> bytes | None:
        route = topic_route(topic)
        if route is None:
            return None
        body = wire.topic_route(route)
        mapping = static_mapping(topic)
        if mapping is not None:  # as RocketMQ's route carries topicQueueMappingByBroker
            body["logicQueueMapping"] = mapping
        return _json(body)

    return route_cache.cached(("route-json", topic, support), render)


def cluster_info_json() -> bytes:
    """``GET_BROKER_CLUSTER_INFO`` (106) as RocketMQ's ``ClusterInfo``, rendered once per registry
    version (the remoting endpoint's; the REST view adds liveness per member)."""
    return route_cache.cached(("cluster-info-json",), lambda: _json(wire.rocketmq_cluster_info(cluster_info())))


def topic_list_json() -> bytes:
    """``GET_ALL_TOPIC_LIST_FROM_NAMESERVER`` (206) as RocketMQ's ``TopicList``, once per registry version."""
    return route_cache.cached(("topic-list-json",), lambda: _json(wire.topic_list(topic_names())))


def topic_names() -> list[str]:
    return list(TopicQueue.objects.order_by("topic").values_list("topic", flat=True).distinct())


def _json(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def topic_broker_sets(topic: str) -> list[str]:
    """The broker sets holding queue data of ``topic``."""
    return sorted(TopicQueue.objects.filter(topic=topic).values_list("group__broker_name", flat=True))


def static_mapping(topic: str) -> dict | None:
    """A static topic's logical-queue mapping, as stored (mqrules/logical_queues.py's wire form)."""
    return StaticTopic.objects.filter(topic=topic).values_list("mapping", flat=True).first()


def _topic_route(topic: str, support_acting_master: bool) -> TopicRouteData | None:
    queues = list(TopicQueue.objects.filter(topic=topic).select_related("group"))
    if not queues:
        return None
    isolated = isolated_addrs()  # isolated brokers leave the routes
    groups = {
        r.broker_name: group_value(r, [m for m in r.members.all() if (r.cluster_name, m.broker_addr) not in isolated])
        for r in BrokerGroup.objects.filter(id__in={q.group_id for q in queues}).prefetch_related("members")
    }
    return pickup_route(
        topic,
        [queue_value(q, q.group.broker_name) for q in queues],
        groups,
        support_acting_master=support_acting_master,
    )


def acting_masters(
    broker_names: Iterable[str] | None = None, *, isolated: set[tuple[str, str]] | None = None
) -> dict[str, ActingMasterState]:
    """Per broker set (every one, or the named ones): the acting master its topics' routes show, by
    the rule ``pickup_route`` applies (``routes.routed_acting_master``) over the same inputs (isolated
    members left out, the live supportActingMaster), held against the modes its brokers report
    (``core.acting``). Two queries (the second only for sets without a master) and one Redis round
    trip, whatever the number of sets. ``isolated``: ``isolated_addrs()`` if the caller has read it."""
    rows = BrokerGroup.objects.order_by()
    if broker_names is not None:
        rows = rows.filter(broker_name__in=list(broker_names))
    if isolated is None:
        isolated = isolated_addrs()
    sets: dict[str, tuple[str, bool, dict[int, str]]] = {}
    for name, cluster, enable, broker_id, addr in rows.values_list(
        "broker_name", "cluster_name", "enable_acting_master", "members__broker_id", "members__broker_addr"
    ):
        addrs = sets.setdefault(name, (cluster, bool(enable), {}))[2]
        if broker_id is not None and (cluster, addr) not in isolated:
            addrs[broker_id] = addr
    # Only a set with a stand-in can have a route showing one: only theirs need their topics read.
    standing_in = [n for n, (_, on, addrs) in sets.items() if acting_master_id(addrs, enable_acting_master=on) is not None]
    perms: dict[str, dict[str, int]] = {}
    for name, topic, perm in TopicQueue.objects.filter(group__broker_name__in=standing_in).values_list(
        "group__broker_name", "topic", "perm"
    ):
        perms.setdefault(name, {})[topic] = perm
    support = current_config().support_acting_master
    modes = broker_status.reported_modes(set(sets)) if sets else {}
    return {
        name: acting_master_state(
            routed_acting_master(addrs, perms.get(name, {}), enable_acting_master=enable, support_acting_master=support),
            modes.get((cluster, name), []),
        )
        for name, (cluster, enable, addrs) in sets.items()
    }


def member_group(broker_name: str) -> Group | None:
    """``GET_BROKER_MEMBER_GROUP``: looked up by brokerName only, as RocketMQ does."""
    return groups_by_name([broker_name]).get(broker_name)


def cluster_info(cluster_name: str | None = None) -> dict[str, Group]:
    """Every broker set, or those of one cluster."""
    return groups_by_name(cluster_name=cluster_name)


def topics(cluster_name: str | None = None) -> dict[str, list[QueueData]]:
    qs = TopicQueue.objects.select_related("group").order_by("topic", "group__broker_name")
    if cluster_name:
        qs = qs.filter(group__cluster_name=cluster_name)
    out: dict[str, list[QueueData]] = {}
    for q in qs:
        out.setdefault(q.topic, []).append(queue_value(q, q.group.broker_name))
    return out


def broker_set_clusters(broker_names: list[str]) -> list[tuple[str, str]]:
    """(brokerName, clusterName) of the named sets the registry knows: its reader for the token
    binding (``controlplane.auth.register_broker_set_reader``)."""
    return list(BrokerGroup.objects.filter(broker_name__in=broker_names).values_list("broker_name", "cluster_name"))


def registered_brokers() -> list[tuple[str, str, str]]:
    """(clusterName, brokerName, brokerAddr) of every broker the registry holds, in one query of plain
    rows (the metrics' thousands)."""
    return list(BrokerMember.objects.values_list("group__cluster_name", "group__broker_name", "broker_addr"))


def liveness_of(groups: Iterable[Group]) -> dict[str, tuple[int, int] | None]:
    """member key -> (last heartbeat ms, deadline ms) for every member of ``groups``."""
    members = [liveness.member(g.cluster_name, m.broker_addr) for g in groups for m in g.members]
    return liveness.last_heartbeats(members)
