"""What the dashboard pages show, read in a bounded number of queries (the overview of 1,000 replica
groups is four Postgres queries, three Redis round trips and one more per cluster)."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from controlplane.controller import liveness as ctl_liveness
from controlplane.controller import selectors as ctl
from controlplane.controller.config_store import current_config as controller_config
from controlplane.controller.models import ReplicaGroup, Transition
from controlplane.isolation import isolated_addrs
from controlplane.operations import drill
from controlplane.operations import headroom as operations_headroom
from mqrules.topic_attributes import message_type_of
from nameserver import acl_selectors, broker_status, static_topics, water_levels, wire
from nameserver import selectors as ns
from nameserver.models import AclVersion, BrokerGroup, TopicQueue
from nameserver.settings_store import current_config as nameserver_config

from . import acting_master
from .models import WaterLevelSample


def _reports_by_group(clusters: set[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for cluster in clusters:
        for r in water_levels.latest_reports(cluster):
            out.setdefault(r["brokerName"], []).append(r)
    return out


def _health(group: dict, members: list[dict], reports: list[dict]) -> tuple[str, list[str]]:
    reasons, level = [], "ok"

    def flag(text: str, bad: bool = False) -> None:
        nonlocal level
        reasons.append(text)
        level = "bad" if bad or level == "bad" else "warn"

    acting = group["actingMaster"]
    if group["masterBrokerId"] is None and (acting is None or acting["brokerId"] is None):
        flag("no master", bad=True)
    if acting is not None:  # a stand-in the routes show, or a disagreement between routes and brokers
        flag(acting["text"])
    replicas = len(members)
    ss = group["syncStateSet"]
    if group["controllerManaged"] and ss and len(ss) < replicas:
        flag(f"SyncStateSet below the group's replicas ({len(ss)} of {replicas})")
    for m in members:
        if not m["alive"]:
            flag(f"broker {m['brokerId']} not heartbeating")
        if m["isolated"]:
            flag(f"broker {m['brokerId']} isolated by an operator")
    for r in reports:
        # The master judges its slaves by its own haMaxGapNotInSync (brokers/ha/quorum.py) and reports
        # the verdict; a report without it (an older broker) raises no warning here.
        threshold = f" of {r['haMaxGapNotInSync']} bytes" if "haMaxGapNotInSync" in r else ""
        for s in r.get("slaves", []):
            if s.get("inSync") is False:
                flag(f"slave {s['brokerId']} lag above haMaxGapNotInSync{threshold} ({s['lagBytes']} bytes)")
    return level, reasons


def _groups(broker_name: str | None = None) -> list[dict]:
    """Every replica group known to the nameserver or the controller, with members merged by address.
    Two flat JOIN queries (tuples, no model instances: the overview reads 1,000 groups) and one Redis
    round trip for the heartbeats."""
    ctl_rows = ReplicaGroup.objects.order_by("broker_name")
    ns_rows = BrokerGroup.objects.order_by("broker_name")
    if broker_name is not None:
        ctl_rows, ns_rows = ctl_rows.filter(broker_name=broker_name), ns_rows.filter(broker_name=broker_name)
    groups: dict[str, dict] = {}
    for cluster, name, master, epoch, ss_epoch, rid, raddr, in_ss in ctl_rows.values_list(
        "cluster_name",
        "broker_name",
        "master_broker_id",
        "master_epoch",
        "sync_state_set_epoch",
        "replicas__broker_id",
        "replicas__broker_address",
        "replicas__in_sync_state_set",
    ):
        g = groups.setdefault(
            name,
            {
                "brokerName": name,
                "clusterName": cluster,
                "controllerManaged": True,
                "masterBrokerId": master,
                "masterAddress": None,
                "actingMaster": None,
                "masterEpoch": epoch,
                "syncStateSet": [],
                "syncStateSetEpoch": ss_epoch,
                "_members": {},
            },
        )
        if rid is not None:
            g["_members"][raddr] = {
                "brokerId": rid,
                "address": raddr,
                "nameserverId": None,
                "inSyncStateSet": in_ss,
                "grpcAddr": "",
                "haAddr": "",
            }
            if in_ss:
                g["syncStateSet"].append(rid)
            if rid == master:
                g["masterAddress"] = raddr
    for cluster, name, mid, maddr, grpc, ha in ns_rows.values_list(
        "cluster_name",
        "broker_name",
        "members__broker_id",
        "members__broker_addr",
        "members__grpc_addr",
        "members__ha_server_addr",
    ):
        g = groups.setdefault(
            name,
            {
                "brokerName": name,
                "clusterName": cluster,
                "controllerManaged": False,
                "masterBrokerId": None,
                "masterAddress": None,
                "actingMaster": None,
                "masterEpoch": None,
                "syncStateSet": [],
                "syncStateSetEpoch": None,
                "_members": {},
            },
        )
        if mid is None:
            continue
        entry = g["_members"].setdefault(maddr, {"brokerId": mid, "address": maddr, "inSyncStateSet": False})
        entry.update(nameserverId=mid, grpcAddr=grpc, haAddr=ha)
        if not g["controllerManaged"] and mid == 0:
            g["masterBrokerId"], g["masterAddress"] = 0, maddr
    keys = [
        ns.liveness.member(g["clusterName"], addr)
        for g in groups.values()
        for addr, m in g["_members"].items()
        if m.get("nameserverId") is not None
    ]
    beats = ns.liveness.last_heartbeats(keys) if keys else {}
    isolated = isolated_addrs()
    acting = ns.acting_masters(None if broker_name is None else [broker_name], isolated=isolated) if groups else {}
    out = []
    for name in sorted(groups):
        g = groups[name]
        for addr, m in g["_members"].items():
            beat = beats.get(ns.liveness.member(g["clusterName"], addr)) if m.get("nameserverId") is not None else None
            m["lastHeartbeatMs"] = beat[0] if beat else None
            m["alive"] = beat is not None
            m["isolated"] = (g["clusterName"], addr) in isolated
            m.setdefault("nameserverId", None)
        g["actingMaster"] = acting_master.view(acting.get(name))
        g["members"] = sorted(g.pop("_members").values(), key=lambda m: m["brokerId"])
        g["syncStateSet"].sort()
        out.append(g)
    return out


def overview() -> list[dict]:
    groups = _groups()
    reports = _reports_by_group({g["clusterName"] for g in groups})
    clusters: dict[str, list[dict]] = {}
    for g in groups:
        g["health"], g["reasons"] = _health(g, g["members"], reports.get(g["brokerName"], []))
        clusters.setdefault(g["clusterName"], []).append(g)
    return [{"cluster": c, "groups": gs} for c, gs in sorted(clusters.items())]


def _with_levels(group: dict, reports: list[dict]) -> None:
    now = int(time.time() * 1000)
    by_addr = {r["brokerAddr"]: r for r in reports}
    slaves = {s["brokerId"]: s for r in reports for s in r.get("slaves", [])}
    for m in group["members"]:
        r = by_addr.get(m["address"], {})
        m["role"] = r.get("role") or ("MASTER" if m.get("nameserverId") == 0 else ("SLAVE" if m["alive"] else "unknown"))
        m["maxOffset"] = r.get("maxOffset")
        m["confirmOffset"] = r.get("confirmOffset")
        m["reportedBrokerId"] = r.get("brokerId")
        s = slaves.get(r.get("brokerId")) if r and "SLAVE" in m["role"] else None
        m["ackOffset"] = s["ackOffset"] if s else None
        m["inSync"] = s.get("inSync") if s else None  # the master's verdict (haMaxGapNotInSync), if reported
        m["lagBytes"] = s["lagBytes"] if s else (0 if r and "MASTER" in m["role"] else None)
        caught = s["lastCaughtUpMs"] if s else 0
        m["lagSeconds"] = round((now - caught) / 1000, 1) if s and s["lagBytes"] > 0 and caught else (0 if s else None)


def group_detail(broker_name: str) -> dict | None:
    group = next(iter(_groups(broker_name)), None)
    if group is None:
        return None
    reports = water_levels.latest_reports(group["clusterName"], broker_name)
    group["health"], group["reasons"] = _health(group, group["members"], reports)
    _with_levels(group, reports)
    transitions = list(Transition.objects.filter(broker_name=broker_name).order_by("-id")[:200])
    group["epochs"] = [
        {"epoch": t.new_master_epoch, "masterBrokerId": t.new_master_broker_id, "at": t.created_at}
        for t in transitions
        if t.kind == "elect" and t.response_code == 0
    ]
    group["elections"] = [
        {
            "at": t.created_at,
            "epoch": t.new_master_epoch,
            "trigger": t.trigger,
            "winner": t.new_master_broker_id,
            "previous": t.old_master_broker_id,
            "candidates": t.candidates,
            "why": _why(t),
            "requestedBy": t.requested_by,
            "code": t.response_code,
        }
        for t in transitions
        if t.kind == "elect"
    ]
    live = ctl_liveness.live_infos(group["clusterName"], broker_name, [m["brokerId"] for m in group["members"]])
    for m in group["members"]:
        info = live.get(m["brokerId"])
        m["electionPriority"] = info.election_priority if info is not None and info.alive else None
    group["syncStateSetJournal"] = [
        {
            "at": t.created_at,
            "epoch": t.new_sync_state_set_epoch,
            "syncStateSet": t.new_sync_state_set,
            "previous": t.old_sync_state_set,
            "by": t.requested_by or t.trigger,
            "kind": t.kind,
        }
        for t in transitions
        if t.new_sync_state_set != t.old_sync_state_set or t.new_sync_state_set_epoch != t.old_sync_state_set_epoch
    ]
    return group


def _why(t: Transition) -> str:
    """Why the winner won, in words (the rule of reference §1.5-1.6 applied to the recorded candidates)."""
    if t.response_code != 0:
        return t.detail or "no replica could be elected"
    if t.trigger == "operator" and t.requested_broker_id is not None:
        return f"designated by an operator ({t.requested_by or 'unknown'})"
    winner = next((c for c in t.candidates if c.get("brokerId") == t.new_master_broker_id), None)
    if winner is None:
        return t.detail or "elected"
    others = [c for c in t.candidates if c is not winner and c.get("alive") and c.get("inSyncStateSet")]
    basis = (
        f"alive and in the SyncStateSet; epoch {winner.get('epoch')}, maxOffset {winner.get('maxOffset')}, "
        f"priority {winner.get('electionPriority')}"
    )
    if not others:
        return f"the only eligible replica ({basis})"
    return f"ranked first among {len(others) + 1} eligible replicas by (epoch, maxOffset, priority, id): {basis}"


def group_state(broker_name: str) -> dict | None:
    """The controller state of one group as the live page shows it."""
    return group_states([broker_name]).get(broker_name)


def group_states(broker_names: list[str]) -> dict[str, dict]:
    """``group_state`` of several groups, in as many queries and Redis round trips for a batch as for
    one (the live publisher's batches)."""
    found = ctl.states(broker_names)
    isolated = isolated_addrs() if found else set()
    acting = ns.acting_masters([s.broker_name for s in found], isolated=isolated) if found else {}
    return {
        s.broker_name: {
            "masterBrokerId": s.master_broker_id,
            "masterAddress": s.master_address,
            "masterEpoch": s.master_epoch,
            "syncStateSet": sorted(s.sync_state_set),
            "syncStateSetEpoch": s.sync_state_set_epoch,
            "isolated": sorted(r.broker_id for r in s.replicas if (s.cluster_name, r.broker_address) in isolated),
            "actingMaster": acting_master.view(acting.get(s.broker_name)),
        }
        for s in found
    }


def water_history(broker_name: str, minutes: int = 15) -> list[dict]:
    since = timezone.now() - timedelta(minutes=minutes)
    rows = WaterLevelSample.objects.filter(broker_name=broker_name, at__gte=since).order_by("at")
    return [
        {
            "at": r.at.isoformat(),
            "brokerId": r.broker_id,
            "role": r.role,
            "maxOffset": r.max_offset,
            "confirmOffset": r.confirm_offset,
            "ackOffset": r.ack_offset,
            "lagBytes": r.lag_bytes,
        }
        for r in rows
    ]


def brokers() -> list[dict]:
    groups = _groups()
    reports = _reports_by_group({g["clusterName"] for g in groups})
    rows = []
    for g in groups:
        roles = {r["brokerAddr"]: r["role"] for r in reports.get(g["brokerName"], [])}
        for m in g["members"]:
            role = roles.get(m["address"]) or ("MASTER" if m.get("nameserverId") == 0 else "SLAVE" if m["alive"] else "")
            rows.append({"clusterName": g["clusterName"], "brokerName": g["brokerName"], "role": role, **m})
    return rows


def topics() -> list[dict]:
    out = []
    for topic in sorted(ns.topics()):
        route = ns.topic_route(topic)
        out.append({"topic": topic, "route": wire.topic_route(route) if route else None})
    return out


def topic_targets() -> dict:
    """Where a topic can be created: the clusters and their broker sets."""
    rows = list(BrokerGroup.objects.order_by("cluster_name", "broker_name").values_list("cluster_name", "broker_name"))
    return {
        "clusters": sorted({cluster for cluster, _ in rows}),
        "brokerSets": [{"cluster": cluster, "brokerName": name} for cluster, name in rows],
    }


def acl_clusters() -> list[str]:
    """The clusters whose users and policies the Access control page offers: those the registry knows,
    and those that have had an ACL change (their brokers may all be gone)."""
    registered = BrokerGroup.objects.values_list("cluster_name", flat=True).distinct()
    return sorted({*registered, *AclVersion.objects.values_list("cluster_name", flat=True)})


def acl_view(cluster: str) -> dict:
    """A cluster's users (listUser: never a secret) each with its policy's entries (listAcl), and the version."""
    entries = {p["username"]: p["entries"] for p in acl_selectors.policies(cluster)}
    users = [
        {**acl_selectors.user_dict(row), "entries": entries.get(row.username, [])}
        for row in sorted(acl_selectors.users(cluster), key=lambda r: r.username)
    ]
    return {"version": acl_selectors.version(cluster), "users": users}


def queue_datas(topic: str, broker_names: list[str] | None = None) -> list[dict]:
    """The topic's queue data per broker set (all, or the named ones), sorted by broker set."""
    qs = TopicQueue.objects.filter(topic=topic).select_related("group").order_by("group__broker_name")
    if broker_names:
        qs = qs.filter(group__broker_name__in=broker_names)
    return [
        {
            "brokerName": q.group.broker_name,
            "clusterName": q.group.cluster_name,
            "readQueueNums": q.read_queue_nums,
            "writeQueueNums": q.write_queue_nums,
            "perm": q.perm,
            "messageType": message_type_of(q.attributes).value,
        }
        for q in qs
    ]


def topic_detail(topic: str) -> dict | None:
    """One topic: its route as clients get it, its queue data per broker set, each queue's offsets and
    the consumer groups reading it; None if the topic is nowhere."""
    sets = queue_datas(topic)
    route = ns.topic_route(topic)
    if not sets and route is None:
        return None
    offsets = topic_offsets(topic)
    return {
        "topic": topic,
        "route": wire.topic_route(route) if route else None,
        "queueDatas": sets,
        "config": sets[0] if sets else None,
        "brokerNames": [q["brokerName"] for q in sets],
        "offsets": offsets,
        "messages": sum(q["messages"] for q in offsets),
        "unreported": sorted({q["brokerName"] for q in sets} - {q["brokerName"] for q in offsets}),
        "consumerGroups": groups_reading(topic),
    }


def static_topics_view() -> dict:
    """Every static topic's mapping (segments with their states, as REST shows them) and the broker
    set names an operator can move queues to."""
    mappings = [
        {**wire.static_topic(m), "writers": sorted({b for b, _ in m.owners().values()})}
        for m in sorted(static_topics.all_mappings(), key=lambda m: m.topic)
    ]
    return {
        "mappings": mappings,
        "brokerSets": list(BrokerGroup.objects.order_by("broker_name").values_list("broker_name", flat=True)),
    }


def configs() -> dict:
    """Each config's sorted ``(key, value, note)`` rows; the note is its schema's (a key with no effect here)."""
    return {
        name: [(key, value, config.schema.notes.get(key, "")) for key, value in sorted(config.values.items())]
        for name, config in (("controller", controller_config()), ("nameserver", nameserver_config()))
    }


def controller_groups() -> list[dict]:
    """Every controller-managed replica group (as the overview reads them) with its health."""
    return [g for cluster in overview() for g in cluster["groups"] if g["controllerManaged"]]


# --- what the brokers report (nameserver.broker_status): offsets, consumer progress ---------------


def topic_offsets(topic: str) -> list[dict]:
    """Each queue of ``topic`` with its min and max offset and the messages between, as the broker
    serving its set last reported them."""
    return [{**q, "messages": max(0, q["maxOffset"] - q["minOffset"])} for q in broker_status.topic_offsets(topic)]


def groups_reading(topic: str, broker_names: set[str] | None = None) -> list[dict]:
    """The consumer groups with committed offsets on ``topic`` (on the named broker sets): each with
    its lag there (``topicLag``) and its total lag."""
    return broker_status.topic_readers(topic, broker_names)


CONSUMER_SORTS = {
    "group": (lambda g: g["group"], False),
    "lag": (lambda g: (g["lag"], g["group"]), True),
    "queues": (lambda g: (g["queues"], g["group"]), True),
}


def consumer_groups(search: str = "", sort: str = "group") -> list[dict]:
    """Every consumer group the serving brokers report (one read of the reports, whatever the number
    of groups): topics, queues, total lag; those whose name or a topic contains ``search``, sorted by
    ``sort`` (group name; lag or queues, the largest first)."""
    groups = broker_status.consumer_groups()
    if search:
        needle = search.lower()
        groups = [g for g in groups if needle in g["group"].lower() or any(needle in t.lower() for t in g["topics"])]
    key, reverse = CONSUMER_SORTS.get(sort, CONSUMER_SORTS["group"])
    return sorted(groups, key=key, reverse=reverse) if sort != "group" else groups


def consumer_group(group: str) -> dict | None:
    """One group's progress per queue (committed offset, max offset, lag) with a subtotal per topic;
    None when no broker reports it."""
    progress = broker_status.consumer_progress(group)
    if progress is None:
        return None
    topics: dict[str, dict] = {}
    for q in progress["queues"]:
        t = topics.setdefault(q["topic"], {"topic": q["topic"], "queues": 0, "lag": 0, "stale": False})
        t["queues"] += 1
        t["lag"] += q["lag"]
        t["stale"] = t["stale"] or q["stale"]
    return {
        **progress,
        "topics": list(topics.values()),
        "stale": any(t["stale"] for t in topics.values()),
        "behindHorizon": any(q["behindHorizon"] for q in progress["queues"]),
    }


def broker_reports(broker_name: str, broker_id: int) -> list[dict]:
    """The status and config one broker last reported (one per address it reported from)."""
    return broker_status.reports(broker_name, broker_id)


def topic_horizons(broker_name: str) -> list[tuple[str, int]]:
    """(topic, store time of its oldest message kept) of a broker set, oldest first."""
    return sorted(broker_status.topic_horizons(broker_name).items(), key=lambda kv: (kv[1], kv[0]))


RECENT_DRILLS = 10


def headroom(broker_name: str) -> dict | None:
    """How many more replica losses before the set's writes stop (controlplane.operations.headroom)."""
    return operations_headroom.headroom(broker_name)


def drills(broker_name: str) -> list[dict]:
    """The set's latest failover drills, newest first."""
    return drill.recent(broker_name, RECENT_DRILLS)
