"""The nameserver's frames on the broker websocket (docs/websocket.md): register, heartbeat (with
optional water levels), unregister, get_broker_member_group (the operations of ``api.py``, as REST
runs them), static_topic_sealed, broker_status; and, when a socket closes, the brokers it stood for
are unregistered at once (RocketMQ's onChannelDestroy). Registered with ``controlplane.ws`` in
``NameserverConfig.ready``."""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async

from controlplane import ws
from controlplane.errors import ApiError
from mqrules import validation as v

from . import acl_selectors, api, broker_status, liveness, metrics, services, static_topics
from .core.broker_status import parse_report

log = logging.getLogger(__name__)

BOUND = "nameserver"  # this app's key for ``connection.bound``: "cluster/addr" members


async def heartbeat(connection: ws.BrokerConsumer, payload: dict) -> dict:
    beat = api.heartbeat_of(payload)
    # api.heartbeat's binding check, with the socket's memory: a beat a second costs no Postgres read.
    await connection.check_binding(clusters=[beat.cluster_name], broker_sets=beat.broker_names, remember=True)
    metrics.HEARTBEATS.inc()
    bound = connection.bound(BOUND)
    first = beat.member not in bound
    beating = ws.coalescer("nameserver", liveness.heartbeat_async).submit((beat.member, connection.channel_name if first else ""))
    if beat.report is None:
        registered = await beating
    else:  # both batches in flight at once: water levels add no round trip to the reply's latency
        stored = ws.coalescer("water_levels", ws.without_results(api.store_water_levels_async)).submit(beat.report)
        registered, _ = await asyncio.gather(beating, stored)
    if registered and first:
        bound.add(beat.member)
    return {"registered": registered}


async def register(connection: ws.BrokerConsumer, payload: dict) -> dict:
    reply = await database_sync_to_async(api.register)(payload, connection.caller)
    # Checked by api.register. The static-topic mappings naming this broker set: the poll behind the
    # pushes (brokers/static.py).
    reply["staticTopics"] = await database_sync_to_async(static_topics.mappings_for)(payload["brokerName"])
    # The cluster's ACL 2.0 snapshot (users with secret keys, policies, version): the poll behind the
    # acl_update pushes (nameserver/acl.py). Absent when it cannot be decrypted: the broker keeps its own.
    acl_snapshot = await database_sync_to_async(acl_selectors.snapshot_for)(payload["clusterName"])
    if acl_snapshot is not None:
        reply["acl"] = acl_snapshot
    member = liveness.member(payload["clusterName"], payload["brokerAddr"])
    bound = connection.bound(BOUND)
    if member not in bound:
        await liveness.bind_connection(member, connection.channel_name)
        bound.add(member)
    return reply


async def unregister(connection: ws.BrokerConsumer, payload: dict) -> dict:
    reply = await database_sync_to_async(api.unregister)(payload, connection.caller)
    member = liveness.member(payload["clusterName"], payload["brokerAddr"])  # checked by api.unregister
    bound = connection.bound(BOUND)
    if member in bound:
        bound.discard(member)
        await liveness.release_connection(member, connection.channel_name)
    return {"unregistered": reply["unregistered"]}


async def get_broker_member_group(connection: ws.BrokerConsumer, payload: dict) -> dict:
    """GET_BROKER_MEMBER_GROUP (901): looked up by brokerName only, as RocketMQ does."""
    query = api.member_group_query(payload)
    # Asked every second: a set found in the token's cluster is not looked up again on this socket.
    await connection.check_binding(clusters=[query.cluster_name], broker_sets=[query.broker_name], remember=True)
    return await database_sync_to_async(api.member_group_answer)(query)


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
    if report["status"].get("metaMode") == "WRITER":  # the set's serving master: its min offsets expire segments
        await database_sync_to_async(static_topics.expire_reported)(report["brokerName"], report["queues"])
    return {}


def register_frames() -> None:
    ws.register("register", register)
    ws.register("heartbeat", heartbeat)
    ws.register("unregister", unregister)
    ws.register("get_broker_member_group", get_broker_member_group)
    ws.register("static_topic_sealed", static_topic_sealed)
    ws.register("broker_status", broker_status_report)
    ws.on_close(closed)
