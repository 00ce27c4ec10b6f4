"""Membership in the nameserver over the broker websocket (docs/websocket.md).

On every (re)connection: register (full topic configs with their data version). Then: a
lightweight heartbeat every brokerHeartbeatInterval, a full registration every
registerNameServerPeriod, and pushed frames applied as they come (topic updates are stored and
registered at once, so routes follow within a round trip). The connection is retried with
exponential backoff (100 ms doubling to 1 s, jittered); every call has a timeout.

Requests (a pushed frame whose payload carries a ``requestId``, controlplane/broker_rpc.py) are
answered with one ``rpc_reply`` frame: ``{"requestId", "ok": true, "result"}`` or ``{"requestId",
"ok": false, "error": {"code", "name", "detail", "fields"?}}``; the handlers are ``on_request``'s.

Everything the link tells the rest of the broker it is given at construction (``LinkHooks``): the
handlers of pushed frames and requests, whether it may register, what to do with a registration
answer, and the water levels heartbeats carry.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import websockets

from mqrules.codes import CLOSE_BROKER_RECONNECTING, ResponseCode
from mqrules.topic_attributes import parse_attributes

from ..config import BrokerConfig
from ..retry import Backoff
from ..tasks import cancel_and_wait
from ..tls import control_plane_context
from ..topics import TopicConfig, TopicConfigManager

log = logging.getLogger("brokers.control")

CALL_TIMEOUT_S = 10.0
RESET_CLOSE_S = 2.0  # how long a reset waits for its close frame to go out
# Reconnecting: 0.1 s, doubling up to 1 s, each wait drawn from its upper half so that a fleet does not
# reconnect in step. The cap is short because every second the link is down after the control plane is
# back is a second the blindness guard cannot count against a dead master (docs/failover.md): with a
# 5 s cap, a 2 s web outage with the master killed delayed its election by up to 10 s (the soak).
BACKOFF_START_S, BACKOFF_MAX_S = 0.1, 1.0


class ControlPlaneError(RuntimeError):
    """A call the control plane did not answer with a result: ``code`` is its error frame's code
    (mqrules.codes.ResponseCode: 2000 CONTROLLER_FENCED_MASTER_EPOCH, ...), None when no answer came."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


class LinkDown(ControlPlaneError):
    """No answer because the link is down (not connected, or the connection was lost meanwhile)."""


class RequestRefused(Exception):
    """A request handler's refusal, answered as ``{"ok": false, "error": {...}}`` (codes:
    mqrules.codes.ResponseCode)."""

    def __init__(self, code: int, name: str, detail: str, fields: dict | None = None):
        super().__init__(f"{code} {name}: {detail}")
        self.code, self.name, self.detail, self.fields = int(code), name, detail, fields

    @classmethod
    def of(cls, code: ResponseCode, detail: str, fields: dict | None = None) -> RequestRefused:
        return cls(code, code.name, detail, fields)

    def wire(self) -> dict:
        error = {"code": self.code, "name": self.name, "detail": self.detail}
        if self.fields:
            error["fields"] = self.fields
        return error


REPLY_DETAIL_MAX = 200  # an unexpected failure's detail: short (the broker's log has the traceback)

PushHandler = Callable[[dict], Awaitable[None]]
RequestHandler = Callable[[dict], Awaitable[dict]]


def _always() -> bool:
    return True


@dataclass(frozen=True)
class LinkHooks:
    """What the link tells the rest of the broker, fixed when the link is built (brokers/broker.py)."""

    # Pushed frames: kind -> handler(payload), after the link applied what it owns (topic updates).
    pushes: Mapping[str, PushHandler] = field(default_factory=dict)
    # Requests with an answer (a pushed frame with a requestId): kind -> handler(payload) -> result;
    # a handler refuses with RequestRefused.
    requests: Mapping[str, RequestHandler] = field(default_factory=dict)
    registered: Callable[[dict], None] | None = None  # sees every registration answer
    # Whether it may register at all (not while fenced, reference §2.1 step 1; not in pre-online, §5.3).
    may_register: Callable[[], bool] = _always
    water_levels: Callable[[], dict] | None = None  # replication water levels for heartbeats
    connected: Callable[[], None] | None = None  # a (re)connected socket
    register_refused: Callable[[str], None] | None = None


class ControlPlane(Protocol):
    """The link as the parts that only ask the control plane see it."""

    connected: asyncio.Event
    broker_id: int

    async def call(self, kind: str, payload: dict, timeout: float | None = None) -> dict: ...


class NameserverLink:
    def __init__(self, config: BrokerConfig, topics: TopicConfigManager, hooks: LinkHooks = LinkHooks()):
        self.config = config
        self.topics = topics
        self.hooks = hooks
        self._ws = None
        self._seq = 0
        self._waiters: dict[int, asyncio.Future] = {}
        self._task: asyncio.Task | None = None
        self.connected = asyncio.Event()
        self.registered_once = asyncio.Event()
        self.min_broker: dict | None = None
        self.on_push: dict[str, PushHandler] = dict(hooks.pushes)
        self.on_request: dict[str, RequestHandler] = dict(hooks.requests)
        self._background: set[asyncio.Task] = set()
        # Controller mode: the id this broker registers with (0 as master, its controller id as a slave).
        self.broker_id = config.brokerId

    # --- life cycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="nameserver-link")

    async def stop(self, unregister: bool = True) -> None:
        if unregister and self._ws is not None:
            try:
                await self.call(
                    "unregister",
                    {
                        "clusterName": self.config.brokerClusterName,
                        "brokerAddr": self.config.broker_addr,
                        "brokerName": self.config.brokerName,
                    },
                    timeout=2,
                )
            except Exception:
                pass
        await cancel_and_wait(self._task, *self._background)

    @functools.cached_property
    def _tls(self) -> dict:
        """wss: the control plane's certificate checked against controlPlaneCaPath (brokers/tls.py)."""
        ctx = control_plane_context(self.config)
        return {} if ctx is None else {"ssl": ctx}

    def _ws_url(self) -> str:
        parts = urlsplit(self.config.controlPlaneUrl)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return f"{scheme}://{parts.netloc}/ws/broker/"

    async def _run(self) -> None:
        hooks = self.hooks
        backoff = Backoff(BACKOFF_START_S, BACKOFF_MAX_S, jitter=True)
        headers = {"Authorization": f"Bearer {self.config.token}", "Origin": self.config.controlPlaneUrl}
        while True:
            try:
                async with websockets.connect(
                    self._ws_url(), additional_headers=headers, open_timeout=CALL_TIMEOUT_S, max_queue=1024, **self._tls
                ) as ws:
                    self._ws = ws
                    reader = asyncio.create_task(self._read(ws))
                    try:
                        if hooks.may_register():
                            await self._register_or_log()
                        self.connected.set()
                        if hooks.connected is not None:
                            hooks.connected()
                        backoff.reset()
                        await self._beat_until_closed(reader)
                    except Exception:
                        await self._reset(ws)
                        raise
                    finally:
                        await cancel_and_wait(reader)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("control plane link down (%s); retrying within %.1f s", exc, backoff.current)
            finally:
                self._ws = None
                self.connected.clear()
                self._fail_waiters()
            await backoff.sleep()

    @staticmethod
    async def _reset(ws) -> None:
        """The link gives up (a call timed out): close with CLOSE_BROKER_RECONNECTING, so that the
        control plane does not take this broker for stopped (a master's close would elect another
        one) before it reconnects. A connection that cannot carry the close is left to the server."""
        try:
            await asyncio.wait_for(ws.close(CLOSE_BROKER_RECONNECTING, "link reset; reconnecting"), RESET_CLOSE_S)
        except (TimeoutError, websockets.WebSocketException, OSError):
            pass

    async def _beat_until_closed(self, reader: asyncio.Task) -> None:
        beat_s = self.config.brokerHeartbeatInterval / 1000
        register_s = self.config.registerNameServerPeriod / 1000
        loop = asyncio.get_running_loop()
        next_register = loop.time() + register_s
        hooks = self.hooks
        while not reader.done():
            await asyncio.sleep(beat_s)
            if not hooks.may_register():
                continue
            if loop.time() >= next_register or not self.registered_once.is_set():
                await self._register_or_log()
                next_register = loop.time() + register_s
                continue
            beat = {
                "clusterName": self.config.brokerClusterName,
                "brokerAddr": self.config.broker_addr,
                "brokerName": self.config.brokerName,
            }
            if hooks.water_levels is not None:
                beat["waterLevels"] = hooks.water_levels()
            reply = await self.call("heartbeat", beat, timeout=self.config.sendHeartbeatTimeoutMillis / 1000)
            if not reply.get("registered"):
                log.info("the nameserver forgot this broker; registering again")
                await self._register_or_log()
        await reader  # surfaces why the socket closed

    # --- frames -----------------------------------------------------------------------------------

    async def call(self, kind: str, payload: dict, timeout: float | None = None) -> dict:
        if self._ws is None:
            raise LinkDown("not connected")
        self._seq += 1
        seq = self._seq
        fut = asyncio.get_running_loop().create_future()
        self._waiters[seq] = fut
        try:
            try:
                await self._ws.send(json.dumps({"type": kind, "seq": seq, "payload": payload}))
            except websockets.ConnectionClosed as exc:
                raise LinkDown("connection lost") from exc
            frame = await asyncio.wait_for(fut, CALL_TIMEOUT_S if timeout is None else timeout)
        finally:
            self._waiters.pop(seq, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # failed by the reader while the send failed too: read, not logged as lost
        if frame["type"] == "error":
            p = frame["payload"]
            code = p.get("code")
            raise ControlPlaneError(
                f"{kind} refused: {code} {p.get('name')}: {p.get('detail')}", code if isinstance(code, int) else None
            )
        return frame["payload"]

    async def _read(self, ws) -> None:
        try:
            async for raw in ws:
                frame = json.loads(raw)
                kind = frame.get("type", "")
                if kind.endswith("_result") or kind == "error":
                    fut = self._waiters.get(frame.get("seq"))
                    if fut is not None and not fut.done():
                        fut.set_result(frame)
                    continue
                task = asyncio.get_running_loop().create_task(self._handle_push(kind, frame.get("payload") or {}))
                self._background.add(task)  # held (a task nobody references may be collected) and cancelled at stop
                task.add_done_callback(self._background.discard)
        finally:
            # No answer comes on a closed socket: a call waiting for one fails now rather than at its
            # timeout (10 s of silence, long enough for the controller to take this broker for dead).
            self._fail_waiters()

    def _fail_waiters(self) -> None:
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(LinkDown("connection lost"))
        self._waiters.clear()

    async def _handle_push(self, kind: str, payload: dict) -> None:
        if isinstance(payload, dict) and "requestId" in payload:
            await self._answer(kind, payload)
            return
        try:
            if kind == "update_topic":
                tc = TopicConfig(
                    payload["topicName"],
                    payload["readQueueNums"],
                    payload["writeQueueNums"],
                    payload["perm"],
                    payload.get("topicSysFlag", 0),
                    parse_attributes(payload.get("attributes", {})),  # the topic's whole set, as the control plane keeps it
                )
                if self.topics.update(tc):
                    await self.register()
            elif kind == "delete_topic":
                if self.topics.delete(payload["topicName"]):
                    await self.register()
            elif kind == "notify_min_broker_id_change":
                self.min_broker = payload
            handler = self.on_push.get(kind)
            if handler is not None:
                await handler(payload)
        except Exception:
            log.exception("handling pushed %s failed", kind)

    async def _answer(self, kind: str, payload: dict) -> None:
        """Run the request's handler and send its ``rpc_reply``; an unknown kind is refused (3), an
        unexpected failure answered as SYSTEM_ERROR with a short detail (and logged)."""
        request_id = payload["requestId"]
        handler = self.on_request.get(kind)
        try:
            if handler is None:
                raise RequestRefused.of(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"this broker takes no {kind[:64]!r} request")
            reply = {"requestId": request_id, "ok": True, "result": await handler(payload)}
        except RequestRefused as exc:
            reply = {"requestId": request_id, "ok": False, "error": exc.wire()}
        except Exception as exc:
            log.exception("request %s (%s) failed", kind, request_id)
            detail = f"{kind} failed: {type(exc).__name__}: {exc}"[:REPLY_DETAIL_MAX]
            reply = {"requestId": request_id, "ok": False, "error": RequestRefused.of(ResponseCode.SYSTEM_ERROR, detail).wire()}
        try:
            await self.call("rpc_reply", reply)
        except Exception as exc:  # the control plane answers the operator "unreachable" at its timeout
            log.warning("could not answer request %s (%s): %s", kind, request_id, exc)

    def register_soon(self) -> None:
        """Register now (topic configs changed) without waiting; if the link is down, the next
        connection registers anyway."""

        async def attempt() -> None:
            try:
                await self.register()
            except Exception as exc:  # the periodic registration retries
                log.info("registration after a topic change failed (%s); the next one carries it", exc)

        task = asyncio.get_running_loop().create_task(attempt(), name="register-soon")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _register_or_log(self) -> None:
        """A refused registration (e.g. 2000: a newer master holds id 0) must not drop the socket: the
        controller calls share it, and they are how a deposed master learns its new role."""
        try:
            await self.register()
        except LinkDown:
            raise
        except ControlPlaneError as exc:
            log.warning("%s", exc)
            if self.hooks.register_refused is not None:
                self.hooks.register_refused(str(exc))

    async def register(self) -> dict:
        c = self.config
        reply = await self.call(
            "register",
            {
                "clusterName": c.brokerClusterName,
                "brokerName": c.brokerName,
                "brokerAddr": c.broker_addr,
                "haServerAddr": c.ha_server_addr,
                "grpcAddr": c.grpc_addr,
                "brokerId": self.broker_id,
                "zoneName": c.zoneName,
                "heartbeatTimeoutMillis": c.heartbeat_timeout_millis,
                "enableActingMaster": c.enableSlaveActingMaster,
                "topicConfigWrapper": self.topics.wrapper(),
            },
        )
        self.registered_once.set()
        if self.hooks.registered is not None:
            self.hooks.registered(reply)
        return reply
