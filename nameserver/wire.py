"""JSON shapes of nameserver values, as RocketMQ names them (``TopicRouteData``, ``BrokerData`` ...)."""

from __future__ import annotations

from mqrules.logical_queues import MovePreview, TopicMapping

from .core.acting import ActingMasterState
from .core.routes import BrokerData, TopicRouteData
from .core.values import Group, QueueData
from .liveness import member


def queue_data(q: QueueData) -> dict:
    return {
        "brokerName": q.broker_name,
        "readQueueNums": q.read_queue_nums,
        "writeQueueNums": q.write_queue_nums,
        "perm": q.perm,
        "topicSysFlag": q.topic_sys_flag,
        "attributes": dict(q.attributes),
    }


def broker_data(b: BrokerData) -> dict:
    return {
        "cluster": b.cluster,
        "brokerName": b.broker_name,
        "brokerAddrs": {str(k): v for k, v in b.broker_addrs.items()},
        "zoneName": b.zone_name,
        "enableActingMaster": b.enable_acting_master,
        "actingMaster": b.acting_master,
        "brokerGrpcAddrs": {str(k): v for k, v in b.grpc_addrs.items()},
    }


def topic_route(route: TopicRouteData) -> dict:
    return {
        "orderTopicConf": None,
        "queueDatas": [queue_data(q) for q in route.queue_datas],
        "brokerDatas": [broker_data(b) for b in route.broker_datas],
        "filterServerTable": {},
    }


def acting_master(state: ActingMasterState) -> dict:
    """A broker set's acting master as its routes show it and as its brokers report (core/acting.py):
    ``brokerId``/``brokerAddr`` the routes' (None: no route shows one), ``topics`` the topics whose
    routes show it, ``otherTopics`` how many of the set's do not, ``reportedMode`` its own reported
    metaMode, ``othersActing`` the other brokers reporting ACTING."""
    routed = state.routed
    return {
        "agreement": state.agreement.value,
        "brokerId": routed.broker_id if routed else None,
        "brokerAddr": routed.broker_addr if routed else None,
        "topics": list(routed.topics) if routed else [],
        "otherTopics": routed.other_topics if routed else 0,
        "reportedMode": state.routed_mode,
        "othersActing": list(state.others_acting),
    }


def member_group(group: Group) -> dict:
    """``BrokerMemberGroup``."""
    return {
        "cluster": group.cluster_name,
        "brokerName": group.broker_name,
        "brokerAddrs": {str(m.broker_id): m.broker_addr for m in group.members},
    }


def group_broker_data(group: Group) -> dict:
    """A broker set as ``ClusterInfo.brokerAddrTable`` holds it (``BrokerData``: cluster, brokerName,
    brokerAddrs, zoneName, enableActingMaster). brokerAddrs keys are quoted ids, standard JSON, as
    RocketMQ itself writes routes for clients of 4.9.4 and later (docs/remoting.md)."""
    return {
        "cluster": group.cluster_name,
        "brokerName": group.broker_name,
        "brokerAddrs": {str(m.broker_id): m.broker_addr for m in group.members},
        "zoneName": group.zone_name,
        "enableActingMaster": bool(group.enable_acting_master),
    }


def rocketmq_cluster_info(groups: dict[str, Group]) -> dict:
    """``ClusterInfo`` as RocketMQ's ``GET_BROKER_CLUSTER_INFO`` (106) answers it: brokerAddrTable by
    brokerName, clusterAddrTable the broker names of each cluster (sorted: Java's is a set)."""
    clusters: dict[str, list[str]] = {}
    for g in groups.values():
        clusters.setdefault(g.cluster_name, []).append(g.broker_name)
    return {
        "brokerAddrTable": {name: group_broker_data(g) for name, g in groups.items()},
        "clusterAddrTable": {c: sorted(names) for c, names in sorted(clusters.items())},
    }


def topic_list(topics: list[str]) -> dict:
    """``TopicList`` as ``GET_ALL_TOPIC_LIST_FROM_NAMESERVER`` (206) answers it (brokerAddr null, so
    left out as fastjson leaves nulls out); sorted, Java's is a set."""
    return {"topicList": sorted(topics)}


def cluster_info(groups: dict[str, Group], live: dict[str, tuple[int, int] | None]) -> dict:
    """``ClusterInfo`` (``rocketmq_cluster_info``) plus, per member, what the live table knows (ours, for
    operators)."""
    info = rocketmq_cluster_info(groups)
    for name, g in groups.items():
        info["brokerAddrTable"][name]["members"] = [
            {
                "brokerId": m.broker_id,
                "brokerAddr": m.broker_addr,
                "haServerAddr": m.ha_server_addr,
                "heartbeatTimeoutMillis": m.heartbeat_timeout_millis,
                "dataVersion": {
                    "stateVersion": m.data_version.state_version,
                    "counter": m.data_version.counter,
                    "timestamp": m.data_version.timestamp,
                },
                "lastUpdateTimestamp": (lv := live.get(member(g.cluster_name, m.broker_addr))) and lv[0],
                "expiresAt": lv and lv[1],
            }
            for m in g.members
        ]
    return info


def static_topic(m: TopicMapping) -> dict:
    """A static topic's mapping with each segment's state (writable, sealing, read_only, expired)."""
    return {
        "topic": m.topic,
        "epoch": m.epoch,
        "queues": [
            {"queueId": q.queue_id, "segments": [{**s.to_wire(), "state": q.state(n).value} for n, s in enumerate(q.segments)]}
            for q in m.queues
        ],
    }


def queue_move(p: MovePreview) -> dict:
    return {
        "queueId": p.queue_id,
        "source": {"brokerName": p.from_broker, "queueId": p.from_queue},
        "target": {"brokerName": p.to_broker, "queueId": p.to_queue},
        "reused": p.reused,
    }


def migration(done, kept_hours: int) -> dict:
    """A migration's answer (``static_topics.Migration``): what moved, from where to where, and the
    mapping after it."""
    return {
        "applied": done.applied,
        "epochBefore": done.before.epoch,
        "epoch": done.after.epoch,
        "moves": [queue_move(p) for p in done.moves],
        "oldSegmentsKeptHours": kept_hours,
        "mapping": static_topic(done.after),
    }
