"""The nameserver's frames on the broker websocket (docs/websocket.md): register, heartbeat (with
optional water levels), unregister, get_broker_member_group, static_topic_sealed, broker_status;
and, when a socket closes, the brokers it stood for are unregistered at once (RocketMQ's onChannelDestroy). Registered with
``controlplane.ws`` in ``NameserverConfig.ready``."""

from __future__ import annotations

import asyncio
import logging
import time

from channels.db import database_sync_to_async

from controlplane import ws
from controlplane.errors import ApiError
from mqrules import validation as v

from . import broker_status, liveness, route_cache, selectors, services, static_topics, water_levels, wire
from .core.broker_status import parse_report
from .core.water_levels import parse_water_levels
from .serializers import MemberGroupQuerySerializer, RegisterBrokerSerializer, UnregisterSerializer
from .signals import water_levels_reported
from .views import register_response

log = logging.getLogger(__name__)

BOUND = "nameserver"  # this app's key for ``connection.bound``: "cluster/addr" members
_IDENTITY = {"clusterName": v.name, "brokerAddr": v.addr}


def _heartbeat(payload: dict) -> tuple[str, str, dict | None]:
    """clusterName, brokerAddr and waterLevels (None if absent) of a heartbeat; every error at once."""
    identity, errors = v.json_object(payload, _IDENTITY)
    levels = payload.get("waterLevels")
    if levels is not None:
        try:
            levels = parse_water_levels(levels, broker_name=payload.get("brokerName"))
        except v.Invalid as exc:
            errors["waterLevels"] = exc.fields
    if errors:
        raise v.Invalid(errors)
    return identity["clusterName"], identity["brokerAddr"], levels


async def _store_and_announce(reports: list[water_levels.WaterLevelReport]) -> list:
    """Store a batch of reports, then announce them (the dashboard listens and throttles on its side)."""
    await water_levels.store_async(reports)
    now = int(time.time() * 1000)
    wire = [{**r.water_levels, "clusterName": r.cluster_name, "brokerAddr": r.broker_addr, "reportedAtMs": now} for r in reports]
    try:
        await water_levels_reported.asend(sender=BOUND, reports=wire)
    except Exception:  # a listener's failure is not the broker's: its heartbeat was stored
        log.exception("a water_levels_reported receiver failed")
    return [None] * len(reports)


async def heartbeat(connection: ws.BrokerConsumer, payload: dict) -> dict:
    cluster, addr, levels = _heartbeat(payload)
    named = [n for n in (payload.get("brokerName"), (levels or {}).get("brokerName")) if isinstance(n, str)]
    await connection.check_binding(clusters=[cluster], broker_sets=named, remember=True)
    member = liveness.member(cluster, addr)
    bound = connection.bound(BOUND)
    first = member not in bound
    beat = ws.coalescer("nameserver", liveness.heartbeat_async).submit((member, connection.channel_name if first else ""))
    if levels is None:
        registered = await beat
    else:  # both batches in flight at once: water levels add no round trip to the reply's latency
        report = water_levels.WaterLevelReport(cluster, addr, levels)
        registered, _ = await asyncio.gather(beat, ws.coalescer("water_levels", _store_and_announce).submit(report))
    if registered and first:
        bound.add(member)
    return {"registered": registered}


async def register(connection: ws.BrokerConsumer, payload: dict) -> dict:
    s = RegisterBrokerSerializer(data=payload)
    s.is_valid(raise_exception=True)
    await connection.check_binding(clusters=[s.validated_data["clusterName"]], broker_sets=[s.validated_data["brokerName"]])
    result = await database_sync_to_async(services.register_broker)(s.to_request())
    reply = register_response(result)
    # the static-topic mappings naming this broker set: the poll behind the pushes (brokers/static.py)
    reply["staticTopics"] = await database_sync_to_async(static_topics.mappings_for)(s.validated_data["brokerName"])
    member = liveness.member(s.validated_data["clusterName"], s.validated_data["brokerAddr"])
    bound = connection.bound(BOUND)
    if member not in bound:
        await liveness.bind_connection(member, connection.channel_name)
        bound.add(member)
    return reply


async def unregister(connection: ws.BrokerConsumer, payload: dict) -> dict:
    s = UnregisterSerializer(data=payload)
    s.is_valid(raise_exception=True)
    d = s.validated_data
    await connection.check_binding(clusters=[d["clusterName"]], broker_sets=[d.get("brokerName")])
    member = liveness.member(d["clusterName"], d["brokerAddr"])
    bound = connection.bound(BOUND)
    if member in bound:
        bound.discard(member)
        await liveness.release_connection(member, connection.channel_name)
    unregister_broker = database_sync_to_async(services.unregister_broker)
    result = await unregister_broker(d["clusterName"], d["brokerAddr"], broker_name=d.get("brokerName"))
    return {"unregistered": result is not None}


def _member_group_answer(cluster_name: str, broker_name: str) -> dict:
    """As ``GET /api/v1/nameserver/brokers/member-group`` answers (MemberGroupView), cached per registry
    version: slave-acting-master brokers ask every second (reference §3.7)."""

    def compute() -> dict:
        group = selectors.member_group(broker_name)
        if group is None:
            return {"cluster": cluster_name, "brokerName": broker_name, "brokerAddrs": {}}
        return wire.member_group(group)

    return route_cache.cached(("member-group", broker_name, cluster_name), compute)


async def get_broker_member_group(connection: ws.BrokerConsumer, payload: dict) -> dict:
    """GET_BROKER_MEMBER_GROUP (901): looked up by brokerName only, as RocketMQ does."""
    s = MemberGroupQuerySerializer(data=payload)
    s.is_valid(raise_exception=True)
    d = s.validated_data
    # Asked every second: a set found in the token's cluster is not looked up again on this socket.
    await connection.check_binding(clusters=[d.get("clusterName")], broker_sets=[d["brokerName"]], remember=True)
    return await database_sync_to_async(_member_group_answer)(d.get("clusterName", ""), d["brokerName"])


async def closed(connection: ws.BrokerConsumer) -> None:
    """A broker whose socket closes is unregistered at once, unless it has meanwhile bound another."""
    for member in list(connection.bound(BOUND)):
        try:
            if await liveness.release_connection(member, connection.channel_name):
                await database_sync_to_async(_broker_gone)(member)
        except Exception:
            log.exception("unregistering %s after its websocket closed failed", member)


def _broker_gone(member: str) -> None:
    if liveness.hearing().blind_now:  # sockets closing by the dozen while most brokers are unheard: ours
        log.warning("%s's socket closed while the nameserver cannot hear most brokers: left to expiry", member)
        return
    services.unregister_broker(*liveness.split_member(member))


_SEALED = {
    "topic": v.name,
    "queueId": v.integer(),
    "brokerName": v.name,
    "physicalQueueId": v.integer(),
    "sealedEnd": v.integer(0, 2**63 - 1),
}


async def static_topic_sealed(connection: ws.BrokerConsumer, payload: dict) -> dict:
    """A broker sealed its segment of a static topic's logical queue (docs/static-topics.md): the new
    segment's logical start is decided. Answers the topic's mapping epoch after the report."""
    d = v.checked(payload, _SEALED)
    await connection.check_binding(broker_sets=[d["brokerName"]])
    try:
        m = await database_sync_to_async(static_topics.seal)(
            d["topic"], d["queueId"], d["brokerName"], d["physicalQueueId"], d["sealedEnd"]
        )
    except static_topics.StaticTopicRefused as exc:
        raise ApiError(exc.code, exc.detail, exc.http_status) from None
    return {"epoch": m.epoch}


async def broker_status_report(connection: ws.BrokerConsumer, payload: dict) -> dict:
    """A broker's status, config, queue offsets and consumer offsets (nameserver/broker_status.py)."""
    report = parse_report(payload)
    await connection.check_binding(clusters=[report["clusterName"]], broker_sets=[report["brokerName"]], remember=True)
    await broker_status.store_async(report)
    return {}


def register_frames() -> None:
    ws.register("register", register)
    ws.register("heartbeat", heartbeat)
    ws.register("unregister", unregister)
    ws.register("get_broker_member_group", get_broker_member_group)
    ws.register("static_topic_sealed", static_topic_sealed)
    ws.register("broker_status", broker_status_report)
    ws.on_close(closed)
