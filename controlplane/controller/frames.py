"""The controller's frames on the broker websocket (RIP-44; docs/websocket.md): its heartbeat and the
broker-facing calls of ``api.py``. When a socket closes, the heartbeat entries it stood for are dropped
at once and an election runs in a Celery worker if one was the master (RocketMQ's
BrokerHousekeepingService). Registered with ``controlplane.ws`` in ``ControllerConfig.ready``."""

from __future__ import annotations

import logging

from channels.db import database_sync_to_async

from controlplane import audit, ws
from controlplane.celery import app as celery_app

from . import api, liveness, metrics

log = logging.getLogger(__name__)

BOUND = "controller"  # this app's key for ``connection.bound``: "cluster/brokerName/brokerId" members
ON_BROKER_INACTIVE = "controller.on_broker_inactive"  # celery_tasks/controller.py; enqueued by name


async def heartbeat(connection: ws.BrokerConsumer, payload: dict) -> dict:
    beat = api.heartbeat_beat(payload)
    # api.heartbeat's binding check, with the socket's memory: a beat a second costs no Postgres read.
    await connection.check_binding(clusters=[beat.cluster_name], broker_sets=[beat.broker_name], remember=True)
    metrics.HEARTBEATS.inc()
    # Bound on every beat, not only the first: an expired heartbeat drops the binding (forget), and
    # a broker whose socket stayed open must get role pushes and a socket-close election again.
    await ws.coalescer("controller", ws.without_results(liveness.heartbeat_async)).submit((beat, connection.channel_name))
    connection.bound(BOUND).add(beat.member)
    return {"code": 0, "name": "SUCCESS"}


def _call(operation):
    """A frame that runs one ``api`` operation with the payload, as the token's caller (the operation
    checks the token's cluster binding)."""

    async def handler(connection: ws.BrokerConsumer, payload: dict) -> dict:
        return await database_sync_to_async(operation)(payload, connection.caller)

    handler.__qualname__ = f"frame:{operation.__name__}"
    return handler


async def elect_master(connection: ws.BrokerConsumer, payload: dict) -> dict:
    if connection.principal.is_admin:
        return await database_sync_to_async(_elect_as_operator)(payload, connection.caller)
    return await database_sync_to_async(api.elect)(payload, connection.caller, operator=False)


def _elect_as_operator(payload: dict, caller) -> dict:
    """An admin token electing over the socket is an operator: the election and its audit record
    (action ``frame elect_master``, refusals too) commit together, as for the REST call."""

    def record(answer: dict | None, refusal: Exception | None) -> None:
        code = getattr(refusal, "rocketmq_code", None)
        audit.record(
            caller.name,
            "frame elect_master",
            broker_name=str(payload.get("brokerName") or ""),
            cluster_name=str(payload.get("clusterName") or ""),
            params=payload,
            result="ok" if refusal is None else (code.name if code is not None else type(refusal).__name__),
            detail=str((answer or {}).get("name", "")) if refusal is None else str(refusal),
        )

    return api.elect_recorded(payload, caller, record)


async def closed(connection: ws.BrokerConsumer) -> None:
    for member in list(connection.bound(BOUND)):
        try:
            if await liveness.release_connection(member, connection.channel_name):
                await database_sync_to_async(_broker_gone)(member)
        except Exception:
            log.exception("handling the controller side of %s closing failed", member)


def _broker_gone(member: str) -> None:
    if liveness.hearing().blind_now:  # sockets closing by the dozen while most brokers are unheard: ours
        log.warning("%s's socket closed while the control plane cannot hear most brokers: left to expiry", member)
        return
    liveness.forget([member])
    cluster, name, broker_id = liveness.split_member(member)
    celery_app.send_task(ON_BROKER_INACTIVE, args=[cluster, name, broker_id])


FRAMES = {
    "controller_heartbeat": heartbeat,
    "get_next_broker_id": _call(api.next_broker_id),
    "apply_broker_id": _call(api.apply_broker_id),
    "register_broker_to_controller": _call(api.register),
    "alter_sync_state_set": _call(api.alter),
    "get_replica_info": _call(api.replica_info),
    "elect_master": elect_master,
}


def register_frames() -> None:
    for frame_type, handler in FRAMES.items():
        ws.register(frame_type, handler)
    ws.on_close(closed)
