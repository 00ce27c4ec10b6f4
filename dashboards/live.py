"""Live updates for open dashboard pages, over Channels.

Publishers (the broker websocket on water levels, the controller after a committed transition, the
dashboard's actions) hand updates to ``publish``; each server process sends at most one update per
second per replica group and kind (the latest wins; a pending one goes out when its second is up),
to the channel-layer groups ``dash.all`` and ``dash.g.<brokerName>``. Pages hold a websocket to
``/ws/dashboard/`` (``DashboardConsumer``) and subscribe to a group or to everything. No polling.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import weakref

from asgiref.sync import async_to_sync
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 1.0
ALL = "dash.all"


def group_channel(broker_name: str) -> str:
    # Channel-layer group names allow only [A-Za-z0-9._-] and < 100 chars: hash the rest away.
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in broker_name)[:60]
    return f"dash.g.{safe}.{hashlib.sha1(broker_name.encode()).hexdigest()[:10]}"


class _Throttle:
    """Per process: (kind, brokerName) -> last send time and the pending latest update."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str], float] = {}
        self.pending: dict[tuple[str, str], dict] = {}

    async def offer(self, message: dict) -> None:
        key = (message["kind"], message["brokerName"])
        now = time.monotonic()
        wait = self.last.get(key, 0.0) + MIN_INTERVAL_S - now
        if wait <= 0 and key not in self.pending:
            self.last[key] = now
            await _send(message)
            return
        first = key not in self.pending
        self.pending[key] = _merge(self.pending.get(key), message)
        if first:
            asyncio.get_running_loop().call_later(max(0.0, wait), lambda: asyncio.ensure_future(self._flush(key)))

    async def _flush(self, key: tuple[str, str]) -> None:
        message = self.pending.pop(key, None)
        if message is not None:
            self.last[key] = time.monotonic()
            await _send(message)


def _merge(old: dict | None, new: dict) -> dict:
    """Water-level reports of one group from several brokers: keep the latest per broker."""
    if old is None or new["kind"] != "water_levels":
        return new
    by_addr = {r.get("brokerAddr"): r for r in old["data"]["reports"]}
    by_addr.update({r.get("brokerAddr"): r for r in new["data"]["reports"]})
    return {**new, "data": {"reports": list(by_addr.values())}}


# Per event loop, held weakly: a loop's pending updates die with it. (Keyed by id(loop), a new loop
# could reuse a closed loop's id and inherit a pending entry whose flush never comes, so that
# group's updates would never be sent again.)
_throttles: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Throttle] = weakref.WeakKeyDictionary()


def _throttle() -> _Throttle:
    loop = asyncio.get_running_loop()
    throttle = _throttles.get(loop)
    if throttle is None:
        throttle = _throttles[loop] = _Throttle()
    return throttle


async def _send(message: dict) -> None:
    layer = get_channel_layer()
    event = {"type": "dashboard.update", "message": {**message, "sentAtMs": int(time.time() * 1000)}}
    try:
        await layer.group_send(ALL, event)
        await layer.group_send(group_channel(message["brokerName"]), event)
    except Exception:  # live updates are best effort: the page also renders the state on load
        log.exception("dashboard update not sent")


async def publish_async(kind: str, broker_name: str, data: dict) -> None:
    await _throttle().offer({"type": "update", "kind": kind, "brokerName": broker_name, "data": data,
                             "sentAtMs": int(time.time() * 1000)})


def publish(kind: str, broker_name: str, data: dict) -> None:
    """From synchronous code (services after commit, Celery): sent at once (a state change is rare
    and must not wait behind a throttle)."""
    message = {"type": "update", "kind": kind, "brokerName": broker_name, "data": data, "sentAtMs": int(time.time() * 1000)}
    try:
        async_to_sync(_send)(message)
    except Exception:
        log.exception("dashboard update not sent")


def publish_state(broker_name: str) -> None:
    from .selectors import group_state

    state = group_state(broker_name)
    if state is not None:
        publish("state", broker_name, state)


class DashboardConsumer(AsyncWebsocketConsumer):
    """One per open page; a logged-in user only. Messages in: {"subscribe": "<brokerName>" | "*"}."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.groups_joined: set[str] = set()
        await self.accept()

    async def disconnect(self, code) -> None:
        for g in getattr(self, "groups_joined", set()):
            await self.channel_layer.group_discard(g, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        try:
            target = json.loads(text_data or "{}").get("subscribe")
        except (ValueError, AttributeError):
            target = None
        if not isinstance(target, str) or not target or len(target) > 255:
            await self.send(json.dumps({"type": "error", "detail": 'send {"subscribe": "<brokerName>" | "*"}'}))
            return
        group = ALL if target == "*" else group_channel(target)
        if group not in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.add(group)
        await self.send(json.dumps({"type": "subscribed", "to": target}))

    async def dashboard_update(self, event: dict) -> None:
        await self.send(json.dumps(event["message"], default=str))
