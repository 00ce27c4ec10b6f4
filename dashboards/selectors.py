"""What the dashboard pages show, read in a bounded number of queries (the overview of 1,000 replica
groups is two Postgres queries and two Redis round trips per cluster)."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from controlplane.controller import selectors as ctl
from controlplane.controller.config_store import current_config as controller_config
from controlplane.controller.models import Transition
from controlplane.isolation import isolated_addrs
from nameserver import selectors as ns
from nameserver import water_levels
from nameserver.settings_store import current_config as nameserver_config

from .models import WaterLevelSample

HA_MAX_GAP_NOT_IN_SYNC = 256 * 1024 * 1024  # reference §2.7 default: the warning threshold


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

    if group["masterBrokerId"] is None and group["actingMasterId"] is None:
        flag("no master", bad=True)
    elif group["masterBrokerId"] is None:
        flag(f"no master: acting master is id {group['actingMasterId']} (read-only)")
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
        for s in r.get("slaves", []):
            if s["lagBytes"] > HA_MAX_GAP_NOT_IN_SYNC:
                flag(f"slave {s['brokerId']} lag above haMaxGapNotInSync ({s['lagBytes']} bytes)")
    return level, reasons


def _groups() -> list[dict]:
    """Every replica group known to the nameserver or the controller, with members merged by address."""
    ns_groups = ns.cluster_info()
    states = {s.broker_name: s for s in ctl.states()}
    live = ns.liveness_of(ns_groups.values())
    isolated = isolated_addrs()
    names = sorted(set(ns_groups) | set(states))
    out = []
    for name in names:
        g, s = ns_groups.get(name), states.get(name)
        cluster = g.cluster_name if g else s.cluster_name
        members: dict[str, dict] = {}
        if s is not None:
            for r in s.replicas:
                members[r.broker_address] = {"brokerId": r.broker_id, "address": r.broker_address, "nameserverId": None,
                                             "inSyncStateSet": r.broker_id in s.sync_state_set}
        if g is not None:
            for m in g.members:
                entry = members.setdefault(m.broker_addr, {"brokerId": m.broker_id, "address": m.broker_addr,
                                                           "inSyncStateSet": False})
                entry["nameserverId"] = m.broker_id
                beat = live.get(ns.liveness.member(cluster, m.broker_addr))
                entry["lastHeartbeatMs"] = beat[0] if beat else None
                entry["grpcAddr"] = m.grpc_addr
                entry["haAddr"] = m.ha_server_addr
        for addr, entry in members.items():
            entry.setdefault("lastHeartbeatMs", None)
            entry["alive"] = entry["lastHeartbeatMs"] is not None
            entry["isolated"] = (cluster, addr) in isolated
        acting = None
        if g is not None and not any(m.broker_id == 0 for m in g.members) and g.enable_acting_master and g.members:
            acting = min(m.broker_id for m in g.members)
        master_id = s.master_broker_id if s is not None else (0 if g and any(m.broker_id == 0 for m in g.members) else None)
        master_addr = s.master_address if s is not None else next((m.broker_addr for m in g.members if m.broker_id == 0), None)
        out.append({
            "brokerName": name, "clusterName": cluster, "controllerManaged": s is not None,
            "masterBrokerId": master_id, "masterAddress": master_addr, "actingMasterId": acting,
            "masterEpoch": s.master_epoch if s else None, "syncStateSet": sorted(s.sync_state_set) if s else [],
            "syncStateSetEpoch": s.sync_state_set_epoch if s else None,
            "members": sorted(members.values(), key=lambda m: m["brokerId"]),
        })
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
        m["lagBytes"] = s["lagBytes"] if s else (0 if r and "MASTER" in m["role"] else None)
        caught = s["lastCaughtUpMs"] if s else 0
        m["lagSeconds"] = round((now - caught) / 1000, 1) if s and s["lagBytes"] > 0 and caught else (0 if s else None)


def group_detail(broker_name: str) -> dict | None:
    group = next((g for g in _groups() if g["brokerName"] == broker_name), None)
    if group is None:
        return None
    reports = water_levels.latest_reports(group["clusterName"], broker_name)
    group["health"], group["reasons"] = _health(group, group["members"], reports)
    _with_levels(group, reports)
    transitions = list(Transition.objects.filter(broker_name=broker_name).order_by("-id")[:200])
    group["epochs"] = [{"epoch": t.new_master_epoch, "masterBrokerId": t.new_master_broker_id, "at": t.created_at}
                       for t in transitions if t.kind == "elect" and t.response_code == 0]
    group["elections"] = [{"at": t.created_at, "epoch": t.new_master_epoch, "trigger": t.trigger,
                           "winner": t.new_master_broker_id, "previous": t.old_master_broker_id,
                           "candidates": t.candidates, "why": t.detail, "requestedBy": t.requested_by,
                           "code": t.response_code} for t in transitions if t.kind == "elect"]
    group["syncStateSetJournal"] = [{"at": t.created_at, "epoch": t.new_sync_state_set_epoch,
                                     "syncStateSet": t.new_sync_state_set, "previous": t.old_sync_state_set,
                                     "by": t.requested_by or t.trigger, "kind": t.kind}
                                    for t in transitions if t.new_sync_state_set != t.old_sync_state_set
                                    or t.new_sync_state_set_epoch != t.old_sync_state_set_epoch]
    return group


def group_state(broker_name: str) -> dict | None:
    """The controller state of one group as the live page shows it."""
    s = ctl.replica_info(broker_name)
    if s is None:
        return None
    isolated = {addr for _, addr in isolated_addrs(s.cluster_name)}
    return {"masterBrokerId": s.master_broker_id, "masterAddress": s.master_address, "masterEpoch": s.master_epoch,
            "syncStateSet": sorted(s.sync_state_set), "syncStateSetEpoch": s.sync_state_set_epoch,
            "isolated": sorted(r.broker_id for r in s.replicas if r.broker_address in isolated)}


def water_history(broker_name: str, minutes: int = 15) -> list[dict]:
    since = timezone.now() - timedelta(minutes=minutes)
    rows = WaterLevelSample.objects.filter(broker_name=broker_name, at__gte=since).order_by("at")
    return [{"at": r.at.isoformat(), "brokerId": r.broker_id, "role": r.role, "maxOffset": r.max_offset,
             "confirmOffset": r.confirm_offset, "ackOffset": r.ack_offset, "lagBytes": r.lag_bytes} for r in rows]


def brokers() -> list[dict]:
    rows = []
    for g in _groups():
        for m in g["members"]:
            rows.append({"clusterName": g["clusterName"], "brokerName": g["brokerName"], **m})
    return rows


def topics() -> list[dict]:
    from nameserver import wire

    out = []
    for topic in sorted(ns.topics()):
        route = ns.topic_route(topic)
        out.append({"topic": topic, "route": wire.topic_route(route) if route else None})
    return out


def configs() -> dict:
    return {"controller": dict(controller_config().values), "nameserver": dict(nameserver_config().values)}
