"""The broker websocket (/ws/broker/): one socket per broker carries heartbeats up and pushes down.

This module is the router and nothing more: the consumer, the frame format, authentication, and a
registry of frame handlers. Each app registers the frames it handles when it is ready
(``register(frame_type, handler)`` in its AppConfig.ready: ``nameserver.frames``,
``controlplane.controller.frames``, ``audits.frames``) and, if it binds brokers to the socket, a hook
for when the socket closes (``on_close``).

Frames are JSON objects ``{"type": str, "seq": int, "payload": object}`` in text frames
(docs/websocket.md). Every request frame gets exactly one reply: ``<type>_result`` with the same
``seq``, or ``error`` with the same ``seq``. A frame type nobody registered gets an error frame; the
socket stays open. Pushes from the control plane carry their own increasing ``seq``.

A peer is held to limits (docs/websocket.md, "Limits"): a frame over ``BROKER_WS_MAX_FRAME_BYTES``
is refused unparsed, and a socket sending more than its frame budget (a token bucket,
``BROKER_WS_FRAMES_PER_SECOND`` and ``BROKER_WS_FRAME_BURST``) has the excess answered with 2
SYSTEM_BUSY and is read no faster than the budget refills: its work stays bounded, and the other
sockets of the process are heard as before.

Handlers that hit Redis for every frame submit to a ``Coalescer`` (``coalescer(kind, flush)``): the
calls of all sockets of this process go together, one Redis call per round trip.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from rest_framework.exceptions import ValidationError

from controlplane.auth import Caller, TokenPrincipal, bearer_token, principal_for
from controlplane.budget import TokenBucket
from controlplane.errors import ApiError, ResponseCode, error_body
from mqrules.codes import CLOSE_BROKER_RECONNECTING
from mqrules.validation import LONG_MAX, Invalid, RefusedValues, parse_json

log = logging.getLogger(__name__)

# Close codes (4000-4999 are the application's): the handshake is refused before accept for these.
CLOSE_UNAUTHORIZED = 4401
CLOSE_SERVER_RESTART = 1012  # RFC 6455 "service restart": what uvicorn sends its sockets on shutdown
# What the server's websocket layer closes a peer's socket with, before the app sees the frame: text
# that is not UTF-8, a frame over uvicorn's --ws-max-size (16 MiB by default).
PROTOCOL_CLOSES = {1007: "a text frame that is not UTF-8", 1009: "a frame over the server's --ws-max-size"}


SEQ_RULE = f"required: an integer from 0 to {LONG_MAX}"
SHOWN_TYPE_CHARS = 64  # an unknown frame type is echoed this far: an error never repeats a peer's megabyte


class FrameError(Exception):
    """An error frame's content; ``seq``: the refused frame's, when the frame could not be read whole."""

    def __init__(self, code: ResponseCode, detail: str, fields: dict | None = None, *, seq: int | None = None):
        super().__init__(detail)
        self.code, self.detail, self.fields, self.seq = code, detail, fields, seq


# --- the registry ----------------------------------------------------------------------------------

FrameHandler = Callable[["BrokerConsumer", dict], Awaitable[object]]
CloseHook = Callable[["BrokerConsumer"], Awaitable[None]]

_handlers: dict[str, FrameHandler] = {}
_close_hooks: list[CloseHook] = []


def register(frame_type: str, handler: FrameHandler) -> None:
    """Route request frames of ``frame_type`` to ``handler(connection, payload) -> reply payload``.
    A handler raises ``FrameError``, ``ApiError``, ``validation.Invalid`` or DRF's ValidationError to
    answer with an error frame. Registering the same handler twice is harmless; a second handler for
    a taken type is a bug."""
    current = _handlers.get(frame_type)
    if current is not None and current is not handler:
        raise ValueError(f"frame type {frame_type!r} is already handled by {current.__module__}.{current.__qualname__}")
    _handlers[frame_type] = handler


def on_close(hook: CloseHook) -> None:
    """Run ``hook(connection)`` when a broker's socket closes (after the handshake was accepted)."""
    if hook not in _close_hooks:
        _close_hooks.append(hook)


def frame_types() -> list[str]:
    """The request frame types this process answers."""
    return sorted(_handlers)


async def _ping(connection: BrokerConsumer, payload: dict) -> dict:
    return {}


register("ping", _ping)


# --- coalescing ------------------------------------------------------------------------------------


class Coalescer:
    """Coalesces calls from all sockets on one event loop: while one Redis call is in flight the
    next ones queue up and go together (group commit for liveness). ``flush`` takes a list of
    items and returns one result per item."""

    MAX_BATCH = 2000

    def __init__(self, flush: Callable[[list], Awaitable[list]]) -> None:
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


def without_results(store: Callable[[list], Awaitable[object]]) -> Callable[[list], Awaitable[list]]:
    """A ``Coalescer`` flush for a store that answers nothing per item."""

    async def flush(items: list) -> list:
        await store(items)
        return [None] * len(items)

    return flush


_coalescers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Coalescer]] = weakref.WeakKeyDictionary()


def coalescer(kind: str, flush: Callable[[list], Awaitable[list]]) -> Coalescer:
    """This event loop's coalescer for ``kind`` (created with ``flush`` on first use)."""
    per_loop = _coalescers.setdefault(asyncio.get_running_loop(), {})
    found = per_loop.get(kind)
    if found is None:
        found = per_loop[kind] = Coalescer(flush)
    return found


# --- the frame format ------------------------------------------------------------------------------


def _parse_frame(text_data: str | None) -> tuple[int, object, dict]:
    """``seq``, ``type`` and ``payload`` of a request frame (``text_data`` None: a binary frame), or
    ``FrameError`` (29 INVALID_PARAMETER) carrying the ``seq`` when it could be read. A frame over the
    size limit is refused before it is parsed: parsing megabytes would hold up every socket of this
    event loop."""
    if text_data is None:
        raise FrameError(ResponseCode.INVALID_PARAMETER, "binary frame: frames are JSON in text frames")
    limit = settings.BROKER_WS_MAX_FRAME_BYTES
    if _utf8_length_over(text_data, limit):
        raise FrameError(ResponseCode.INVALID_PARAMETER, f"frame over {limit} bytes (BROKER_WS_MAX_FRAME_BYTES): not read")
    try:
        frame = parse_json(text_data)
    except Invalid as exc:  # the REST bodies' rule: not JSON, too deep, NaN, NUL, lone surrogates
        fields, seq = exc.fields, None
        if isinstance(exc, RefusedValues) and isinstance(exc.value, dict) and isinstance(fields, dict):
            if "seq" not in fields and _is_seq(exc.value.get("seq")):
                seq = exc.value["seq"]
            fields = fields["payload"] if set(fields) == {"payload"} else fields  # the payload's fields
        raise FrameError(ResponseCode.INVALID_PARAMETER, "invalid frame", fields, seq=seq) from None
    if not isinstance(frame, dict):
        raise FrameError(ResponseCode.INVALID_PARAMETER, "frame must be a JSON object")
    seq = frame.get("seq")
    if not _is_seq(seq):
        raise FrameError(ResponseCode.INVALID_PARAMETER, "invalid frame", {"seq": [SEQ_RULE]})
    payload = frame.get("payload") or {}
    if not isinstance(payload, dict):
        raise FrameError(ResponseCode.INVALID_PARAMETER, "payload must be a JSON object", seq=seq)
    return seq, frame.get("type"), payload


def _utf8_length_over(text: str, limit: int) -> bool:
    if len(text) > limit:
        return True
    return len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit  # short text: no copy


def _is_seq(value: object) -> bool:
    return type(value) is int and 0 <= value <= LONG_MAX


# --- the consumer ----------------------------------------------------------------------------------


class BrokerConsumer(AsyncWebsocketConsumer):
    """One broker's socket. Handlers see it as their ``connection``: ``principal``, ``caller`` (the
    token as the shared operations see it), ``check_binding``, ``bound(kind)`` (what this socket stands
    for, per app) and ``channel_name``."""

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
        self._bound: dict[str, set[str]] = {}
        self._own_broker_sets: set[str] = set()  # found in the token's cluster (check_binding, remember)
        self.push_seq = 0
        self.frame_budget = TokenBucket(settings.BROKER_WS_FRAMES_PER_SECOND, settings.BROKER_WS_FRAME_BURST, time.monotonic())
        await self.accept()

    def _token(self) -> str | None:
        headers = dict(self.scope.get("headers") or [])
        raw = bearer_token((headers.get(b"authorization") or b"").decode("latin-1"))
        if raw:
            return raw
        query = parse_qs((self.scope.get("query_string") or b"").decode())
        return (query.get("token") or [None])[0]

    # --- what handlers use ---------------------------------------------------------------------

    @property
    def caller(self) -> Caller:
        return self.principal.caller

    async def check_binding(
        self, *, clusters: Iterable[str | None] = (), broker_sets: Iterable[str | None] = (), remember: bool = False
    ) -> None:
        """``Caller.check`` for a frame (an error frame with 16 NO_PERMISSION), the look-up off the
        event loop. ``remember``: broker sets found in the token's cluster are not looked up again on
        this socket, for the frames a broker sends every second whose effects stay keyed by their own
        (checked) clusterName: heartbeats and offset events."""
        caller = self.caller
        if not caller.bound_cluster:
            return
        caller.check(clusters=clusters)  # no look-up
        names = [n for n in broker_sets if n and not (remember and n in self._own_broker_sets)]
        if names:
            known = await database_sync_to_async(caller.check)(broker_sets=names)
            if remember:
                self._own_broker_sets |= known

    def bound(self, kind: str) -> set[str]:
        """The members of ``kind`` (an app's own key) this socket stands for; the app adds and removes."""
        return self._bound.setdefault(kind, set())

    # --- frames --------------------------------------------------------------------------------

    async def receive(self, text_data=None, bytes_data=None) -> None:
        within_budget = self.frame_budget.take(time.monotonic())
        seq = None
        try:
            seq, kind, payload = _parse_frame(text_data)
            if not within_budget:
                raise FrameError(
                    ResponseCode.SYSTEM_BUSY,
                    f"more than {settings.BROKER_WS_FRAMES_PER_SECOND:g} frames a second on this socket "
                    f"(a burst of {settings.BROKER_WS_FRAME_BURST}): frame refused, slow down",
                )
            handler = _handlers.get(kind) if isinstance(kind, str) else None
            if handler is None:
                shown = kind[:SHOWN_TYPE_CHARS] + "…" if isinstance(kind, str) and len(kind) > SHOWN_TYPE_CHARS else kind
                raise FrameError(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"unknown frame type {shown!r}")
            result = await handler(self, payload)
            await self._send_frame({"type": f"{kind}_result", "seq": seq, "payload": result})
        except FrameError as exc:
            await self._send_error(seq if seq is not None else exc.seq, exc.code, exc.detail, exc.fields)
        except ApiError as exc:
            await self._send_error(seq, exc.rocketmq_code, str(exc.detail), exc.extra or None)
        except Invalid as exc:
            await self._send_error(seq, ResponseCode.INVALID_PARAMETER, "invalid request", exc.fields)
        except ValidationError as exc:
            await self._send_error(seq, ResponseCode.INVALID_PARAMETER, "invalid request", exc.detail)
        except Exception:
            log.exception("broker frame failed")
            await self._send_error(seq, ResponseCode.SYSTEM_ERROR, "internal error; see the server log")
        if not within_budget:
            # Back-pressure: this socket is not read again before its next token. The frames it sent
            # meanwhile wait in its TCP buffers (the server reads no further), not in this process.
            await asyncio.sleep(self.frame_budget.refill_s())

    async def _send_error(self, seq, code: ResponseCode, detail: str, fields=None) -> None:
        body = error_body(code, detail, **({"fields": fields} if fields else {}))
        await self._send_frame({"type": "error", "seq": seq, "payload": body})

    async def _send_frame(self, frame: dict) -> None:
        """An answer to a broker that is gone (its process died while its frame was handled) is
        dropped: raising here would end this consumer before the server's disconnect event, and the
        close hooks (the immediate unregister and election) would never run."""
        try:
            await self.send(text_data=json.dumps(frame))
        except OSError as exc:  # uvicorn's ClientDisconnected
            log.info("a broker closed its socket before its %s answer (%s)", frame.get("type"), type(exc).__name__)

    # --- pushes from the control plane ---------------------------------------------------------

    async def broker_push(self, event: dict) -> None:
        self.push_seq += 1
        await self.send(text_data=json.dumps({"type": event["frame_type"], "seq": self.push_seq, "payload": event["payload"]}))

    async def disconnect(self, code: int) -> None:
        if not hasattr(self, "_bound"):  # refused at the handshake
            return
        if code in PROTOCOL_CLOSES:
            log.warning("a broker socket was closed with %s: %s", code, PROTOCOL_CLOSES[code])
        if code in (CLOSE_SERVER_RESTART, CLOSE_BROKER_RECONNECTING):
            # This process is shutting down, or the broker resets its link, not the broker stopping:
            # it reconnects and beats on; liveness judges it as usual (the blindness guard,
            # docs/failover.md).
            log.info("close %s: the close hooks do not run for this broker socket", code)
            return
        for hook in list(_close_hooks):
            try:
                await hook(self)
            except Exception:
                log.exception("a close hook of the broker websocket failed (%s)", getattr(hook, "__qualname__", hook))
