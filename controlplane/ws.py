"""The broker websocket (/ws/broker/): one socket per broker carries heartbeats up and pushes down.

Frames are JSON objects ``{"type": str, "seq": int, "payload": object}`` (docs/websocket.md).
Every request frame gets exactly one reply: ``<type>_result`` with the same ``seq``, or ``error``
with the same ``seq``. A frame the server does not understand gets an error frame; the socket
stays open. Pushes from the control plane carry their own increasing ``seq``.

Heartbeats from every socket of this process are coalesced into one Redis call per round trip
(``Coalescer``), so throughput is not bounded by one Redis round trip per heartbeat; so are the
water levels that heartbeats may carry (a second coalescer, running alongside the liveness one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from rest_framework.exceptions import ValidationError

from audits import event_store as audit_event_store
from audits.events import parse_offset_events
from controlplane.auth import TokenPrincipal, bearer_token, principal_for
from controlplane.controller import api as controller_api
from controlplane.controller import liveness as ctl_liveness
from controlplane.errors import ApiError, ResponseCode, error_body
from controlplane.validation import ADDR_RE, NAME_RE
from dashboards import live
from nameserver import liveness, services, water_levels
from nameserver.serializers import RegisterBrokerSerializer, UnregisterSerializer, parse_water_levels
from nameserver.views import register_response

log = logging.getLogger(__name__)

# Close codes (4000-4999 are the application's): the handshake is refused before accept for these.
CLOSE_UNAUTHORIZED = 4401


class FrameError(Exception):
    def __init__(self, code: ResponseCode, detail: str, fields: dict | None = None):
        super().__init__(detail)
        self.code, self.detail, self.fields = code, detail, fields


class Coalescer:
    """Coalesces calls from all sockets on one event loop: while one Redis call is in flight the
    next ones queue up and go together (group commit for liveness). ``flush`` takes a list of
    items and returns one result per item."""

    MAX_BATCH = 2000

    def __init__(self, flush) -> None:
        self._flush = flush
        self._pending: list[tuple[object, asyncio.Future]] = []
        self._running = False

    async def submit(self, item):
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[: self.MAX_BATCH], self._pending[self.MAX_BATCH :]
                try:
                    results = await self._flush([item for item, _ in batch])
                except Exception as exc:  # Redis down: every waiter gets the error
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, fut), result in zip(batch, results, strict=True):
                    if not fut.done():
                        fut.set_result(result)
        finally:
            self._running = False


def _without_results(store):
    """A ``Coalescer`` flush for a store that answers nothing per item."""

    async def flush(items: list) -> list:
        await store(items)
        return [None] * len(items)

    return flush


async def _store_and_publish_water_levels(reports: list) -> list:
    """Store a batch of reports, then offer them to open dashboards (throttled per replica group)."""
    await water_levels.store_async(reports)
    now = int(time.time() * 1000)
    by_group: dict[str, list[dict]] = {}
    for r in reports:
        by_group.setdefault(r.water_levels["brokerName"], []).append(
            {**r.water_levels, "clusterName": r.cluster_name, "brokerAddr": r.broker_addr, "reportedAtMs": now})
    for name, group in by_group.items():
        await live.publish_async("water_levels", name, {"reports": group})
    return [None] * len(reports)


_coalescers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Coalescer]] = weakref.WeakKeyDictionary()


def _coalescer(kind: str) -> Coalescer:
    loop = asyncio.get_running_loop()
    per_loop = _coalescers.get(loop)
    if per_loop is None:
        per_loop = _coalescers[loop] = {
            "nameserver": Coalescer(liveness.heartbeat_async),
            "controller": Coalescer(_without_results(ctl_liveness.heartbeat_async)),
            "water_levels": Coalescer(_store_and_publish_water_levels),
            "offset_events": Coalescer(_without_results(audit_event_store.append_async)),  # audits (issue #8)
        }
    return per_loop[kind]


def _heartbeat(payload: dict) -> tuple[str, str, dict | None]:
    """clusterName, brokerAddr and waterLevels (None if absent) of a heartbeat, checked as the REST
    serializer checks them."""
    cluster, addr, levels = payload.get("clusterName"), payload.get("brokerAddr"), payload.get("waterLevels")
    fields = {}
    if not isinstance(cluster, str) or not NAME_RE.match(cluster) or len(cluster) > 127:
        fields["clusterName"] = ["required; only letters, digits and %|_.- are allowed"]
    if not isinstance(addr, str) or not ADDR_RE.match(addr) or len(addr) > 255:
        fields["brokerAddr"] = ["required; must be host:port"]
    if levels is not None:
        try:
            levels = parse_water_levels(levels, broker_name=payload.get("brokerName"))
        except ValidationError as exc:
            fields["waterLevels"] = exc.detail
    if fields:
        raise FrameError(ResponseCode.INVALID_PARAMETER, "invalid heartbeat", fields)
    return cluster, addr, levels


class BrokerConsumer(AsyncWebsocketConsumer):
    principal: TokenPrincipal

    async def dispatch(self, message: dict) -> None:
        # Channels runs ``aclose_old_connections()`` (a thread hop) before every message; profiled
        # under 1,000 heartbeating brokers it was ~31 % of the server's CPU. This consumer never uses
        # the ORM on the event loop: every ORM call goes through ``database_sync_to_async``, which
        # closes stale connections around itself. So the per-frame hop is skipped.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        raw = self._token()
        principal = await database_sync_to_async(principal_for)(raw) if raw else None
        if principal is None or not principal.can_act_as_broker:
            await self.close(code=CLOSE_UNAUTHORIZED)  # before accept: the handshake answers 403
            return
        self.principal = principal
        self.bound: set[str] = set()  # nameserver members ("cluster/addr") this socket heartbeats for
        self.bound_controller: set[str] = set()  # controller members ("cluster/brokerName/brokerId")
        self.push_seq = 0
        await self.accept()

    def _token(self) -> str | None:
        headers = dict(self.scope.get("headers") or [])
        raw = bearer_token((headers.get(b"authorization") or b"").decode("latin-1"))
        if raw:
            return raw
        query = parse_qs((self.scope.get("query_string") or b"").decode())
        return (query.get("token") or [None])[0]

    async def receive(self, text_data=None, bytes_data=None) -> None:
        seq = None
        try:
            try:
                frame = json.loads(text_data if text_data is not None else bytes_data)
            except (ValueError, TypeError):
                raise FrameError(ResponseCode.INVALID_PARAMETER, "frame is not valid JSON") from None
            if not isinstance(frame, dict):
                raise FrameError(ResponseCode.INVALID_PARAMETER, "frame must be a JSON object")
            seq = frame.get("seq")
            kind = frame.get("type")
            payload = frame.get("payload") or {}
            if not isinstance(payload, dict):
                raise FrameError(ResponseCode.INVALID_PARAMETER, "payload must be a JSON object")
            handler = self.HANDLERS.get(kind) if isinstance(kind, str) else None
            if handler is None:
                raise FrameError(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"unknown frame type {kind!r}")
            result = await handler(self, payload)
            await self.send(text_data=json.dumps({"type": f"{kind}_result", "seq": seq, "payload": result}))
        except FrameError as exc:
            await self._send_error(seq, exc.code, exc.detail, exc.fields)
        except ApiError as exc:
            await self._send_error(seq, exc.rocketmq_code, str(exc.detail), exc.extra or None)
        except ValidationError as exc:
            await self._send_error(seq, ResponseCode.INVALID_PARAMETER, "invalid request", exc.detail)
        except Exception:
            log.exception("broker frame failed")
            await self._send_error(seq, ResponseCode.SYSTEM_ERROR, "internal error; see the server log")

    async def _send_error(self, seq, code: ResponseCode, detail: str, fields=None) -> None:
        body = error_body(code, detail, **({"fields": fields} if fields else {}))
        await self.send(text_data=json.dumps({"type": "error", "seq": seq, "payload": body}))

    def _check_cluster(self, cluster_name: str) -> None:
        if not self.principal.allows_cluster(cluster_name):
            raise FrameError(ResponseCode.NO_PERMISSION, f"this token may not act on cluster {cluster_name}")

    async def _bind(self, member: str) -> None:
        if member not in self.bound:
            await liveness.bind_connection(member, self.channel_name)
            self.bound.add(member)

    # --- handlers: payload -> reply payload ------------------------------------------------------

    async def on_heartbeat(self, payload: dict) -> dict:
        cluster, addr, levels = _heartbeat(payload)
        self._check_cluster(cluster)
        member = liveness.member(cluster, addr)
        first = member not in self.bound
        beat = _coalescer("nameserver").submit((member, self.channel_name if first else ""))
        if levels is None:
            registered = await beat
        else:  # both batches in flight at once: water levels add no round trip to the reply's latency
            report = water_levels.WaterLevelReport(cluster, addr, levels)
            registered, _ = await asyncio.gather(beat, _coalescer("water_levels").submit(report))
        if registered and first:
            self.bound.add(member)
        return {"registered": registered}

    async def on_register(self, payload: dict) -> dict:
        s = RegisterBrokerSerializer(data=payload)
        s.is_valid(raise_exception=True)
        self._check_cluster(s.validated_data["clusterName"])
        result = await database_sync_to_async(services.register_broker)(s.to_request())
        reply = register_response(result)
        await self._bind(liveness.member(s.validated_data["clusterName"], s.validated_data["brokerAddr"]))
        return reply

    async def on_unregister(self, payload: dict) -> dict:
        s = UnregisterSerializer(data=payload)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        self._check_cluster(d["clusterName"])
        member = liveness.member(d["clusterName"], d["brokerAddr"])
        if member in self.bound:
            self.bound.discard(member)
            await liveness.release_connection(member, self.channel_name)
        result = await database_sync_to_async(services.unregister_broker)(
            d["clusterName"], d["brokerAddr"], broker_name=d.get("brokerName")
        )
        return {"unregistered": result is not None}

    async def on_ping(self, payload: dict) -> dict:
        return {}

    # --- controller (RIP-44) -----------------------------------------------------------------------

    async def on_controller_heartbeat(self, payload: dict) -> dict:
        beat = controller_api.heartbeat_beat(payload)
        self._check_cluster(beat.cluster_name)
        # Bound on every beat, not only the first: an expired heartbeat drops the binding (forget), and
        # a broker whose socket stayed open must get role pushes and a socket-close election again.
        await _coalescer("controller").submit((beat, self.channel_name))
        self.bound_controller.add(beat.member)
        return {"code": 0, "name": "SUCCESS"}

    def _controller_call(operation):
        async def handler(self, payload: dict) -> dict:
            if "clusterName" in payload and isinstance(payload["clusterName"], str):
                self._check_cluster(payload["clusterName"])
            return await database_sync_to_async(operation)(payload, f"token:{self.principal.name}")

        return handler

    on_get_next_broker_id = _controller_call(controller_api.next_broker_id)
    on_apply_broker_id = _controller_call(controller_api.apply_broker_id)
    on_register_broker_to_controller = _controller_call(controller_api.register)
    on_alter_sync_state_set = _controller_call(controller_api.alter)
    on_get_replica_info = _controller_call(controller_api.replica_info)
    del _controller_call

    async def on_elect_master(self, payload: dict) -> dict:
        if "clusterName" in payload and isinstance(payload["clusterName"], str):
            self._check_cluster(payload["clusterName"])
        return await database_sync_to_async(controller_api.elect)(
            payload, f"token:{self.principal.name}", operator=self.principal.is_admin)

    # --- audits (issue #8): consumer-offset commits for the offset event store --------------------

    async def on_offset_events(self, payload: dict) -> dict:
        batch = parse_offset_events(payload)
        self._check_cluster(batch.cluster_name)
        await _coalescer("offset_events").submit(batch)
        return {"accepted": len(batch.events)}

    HANDLERS = {
        "heartbeat": on_heartbeat,
        "register": on_register,
        "unregister": on_unregister,
        "ping": on_ping,
        "controller_heartbeat": on_controller_heartbeat,
        "get_next_broker_id": on_get_next_broker_id,
        "apply_broker_id": on_apply_broker_id,
        "register_broker_to_controller": on_register_broker_to_controller,
        "elect_master": on_elect_master,
        "alter_sync_state_set": on_alter_sync_state_set,
        "get_replica_info": on_get_replica_info,
        "offset_events": on_offset_events,
    }

    # --- pushes from the control plane ------------------------------------------------------------

    async def broker_push(self, event: dict) -> None:
        self.push_seq += 1
        await self.send(text_data=json.dumps({"type": event["frame_type"], "seq": self.push_seq, "payload": event["payload"]}))

    async def disconnect(self, code: int) -> None:
        # RocketMQ's onChannelDestroy: a broker whose connection closes is unregistered at once,
        # unless it has meanwhile reconnected on another socket.
        for member in list(getattr(self, "bound", ())):
            try:
                if await liveness.release_connection(member, self.channel_name):
                    cluster, addr = liveness.split_member(member)
                    await database_sync_to_async(services.unregister_broker)(cluster, addr)
            except Exception:
                log.exception("unregistering %s after its websocket closed failed", member)
        # The controller's BrokerHousekeepingService: a closed channel drops the broker's heartbeat
        # entry at once and, if it was the master, an election runs (in a Celery worker).
        for member in list(getattr(self, "bound_controller", ())):
            try:
                if await ctl_liveness.release_connection(member, self.channel_name):
                    await database_sync_to_async(_broker_gone)(member)
            except Exception:
                log.exception("handling the controller side of %s closing failed", member)


def _broker_gone(member: str) -> None:
    from celery_tasks.controller import on_broker_inactive

    ctl_liveness.forget([member])
    cluster, name, broker_id = ctl_liveness.split_member(member)
    on_broker_inactive.delay(cluster, name, broker_id)
