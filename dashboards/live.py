"""Live updates for open dashboard pages, over Channels.

Publishers hand updates to ``publish_async`` (the broker websocket, on water levels: each server
process sends at most one update per second per replica group and kind, the latest wins; a pending one
goes out when its second is up) or ``publish``, to the channel-layer groups ``dash.all`` and
``dash.g.<brokerName>``. Pages hold a websocket to ``/ws/dashboard/`` (``DashboardConsumer``) and
subscribe to a group or to everything; a page that reads slowly gets the latest update per group, and
one that reads nothing is closed (``DASHBOARD_WS_STALL_SECONDS``, 1013).

The controller does not call this module: it announces ``replica_group_changed`` after a committed
transition. ``on_replica_group_changed`` (connected in ``DashboardsConfig.ready``) only notes the
group's name; a thread of the electing process hands the noted names to a Redis set and publishes a
wake-up on a Redis channel (paced: ``NOTE_BURST`` at once, then ``NOTE_RATE_PER_S``), and a process that serves
pages, woken by it, takes the names from the set and publishes those groups' states. When no page is
open, no state is read or sent at all.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
import weakref

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from controlplane.budget import TokenBucket
from controlplane.redis import async_client, key, sync_client

from .selectors import group_state, group_states

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 1.0
# An electing process hands its noted names over at once while it is quiet, and paced under load (a
# token bucket): a burst of NOTE_BURST hand-overs, then NOTE_RATE_PER_S. Each hand-over is one Redis round
# trip from a thread of the electing process; paced, they cost the election path nothing measurable
# (bench/elections.py), while an operator's click still reaches the pages at once (bench/dashboard.py).
NOTE_RATE_PER_S = 4.0
NOTE_BURST = 32
STATE_SAFETY_S = 1.0  # a page-serving process also looks for noted names this often (a lost wake-up)
STATE_BATCH_MAX = 1000  # groups per batch (a bigger backlog takes several)
CHANGED_TTL_S = 60
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
    await _throttle().offer(
        {"type": "update", "kind": kind, "brokerName": broker_name, "data": data, "sentAtMs": int(time.time() * 1000)}
    )


def publish(kind: str, broker_name: str, data: dict) -> None:
    """From synchronous code (services after commit, Celery): sent at once (a state change is rare
    and must not wait behind a throttle)."""
    message = {"type": "update", "kind": kind, "brokerName": broker_name, "data": data, "sentAtMs": int(time.time() * 1000)}
    try:
        async_to_sync(_send)(message)
    except Exception:
        log.exception("dashboard update not sent")


def publish_state(broker_name: str) -> None:
    """The group's state, now, from the caller's thread (the state publisher does it in batches)."""
    state = group_state(broker_name)
    if state is not None:
        publish("state", broker_name, state)


def _state_message(broker_name: str, state: dict) -> dict:
    return {"type": "update", "kind": "state", "brokerName": broker_name, "data": state, "sentAtMs": int(time.time() * 1000)}


def _changed_key() -> str:
    return key("dash", "changed")


def _wake_channel() -> str:
    return key("dash", "changed-wake")


class ChangeNotes:
    """The electing side: names of replica groups whose state changed, handed to Redis (one set, shared
    by every process) with a wake-up for the pages' processes, from a daemon thread of this process,
    paced by a token bucket (``NOTE_BURST``, ``NOTE_RATE_PER_S``).
    ``note`` is a set insert under a lock, cheap enough for the thread that has just committed an
    election; no selector and no channel-layer send runs in this process for it."""

    def __init__(self, rate_per_s: float = NOTE_RATE_PER_S, burst: int = NOTE_BURST) -> None:
        self.rate_per_s, self.burst = rate_per_s, burst
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.handed = 0  # names handed to Redis by this process (the election benchmark reports it)

    def note(self, broker_name: str) -> None:
        with self._lock:
            self._pending.add(broker_name)
            if self._thread is None or not self._thread.is_alive():  # also after a fork (Celery's prefork)
                self._thread = threading.Thread(target=self._run, name="dashboard-change-notes", daemon=True)
                self._thread.start()
        self._wake.set()

    def _take(self) -> list[str]:
        with self._lock:
            names, self._pending = self._pending, set()
        return sorted(names)

    def _run(self) -> None:
        bucket = TokenBucket(self.rate_per_s, self.burst, time.monotonic())
        while True:
            self._wake.wait()
            wait = bucket.take_waiting(time.monotonic())
            if wait:  # under load: let the notes gather until the next token
                time.sleep(wait)
            self._wake.clear()
            names = self._take()
            if names:
                self._hand_over(names)

    def _hand_over(self, names: list[str]) -> None:
        try:
            pipe = sync_client().pipeline(transaction=False)
            pipe.sadd(_changed_key(), *names)
            pipe.expire(_changed_key(), CHANGED_TTL_S)  # no page open anywhere: the names age out
            pipe.publish(_wake_channel(), "1")
            pipe.execute()
            self.handed += len(names)
        except Exception:  # best effort: a page also renders the state on load
            log.exception("dashboard change notes not handed over")


change_notes = ChangeNotes()


def on_replica_group_changed(sender, broker_name: str, **kwargs) -> None:
    """Receiver of the controller's ``replica_group_changed``: note the name, publish later."""
    change_notes.note(broker_name)


class _StatePublisher:
    """The page side: while this process serves at least one page (on this event loop), take the noted
    names from Redis whenever an electing process wakes it (and every ``STATE_SAFETY_S`` in case a
    wake-up was lost; SPOP: each name goes to one process) and send those groups' states, read in one
    selector call, to every page through the channel layer."""

    def __init__(self) -> None:
        self.pages = 0
        self.task: asyncio.Task | None = None

    def attach(self) -> None:
        self.pages += 1
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def detach(self) -> None:
        self.pages = max(0, self.pages - 1)
        if self.pages == 0 and self.task is not None:
            self.task.cancel()
            self.task = None

    async def _run(self) -> None:
        pubsub = None
        while self.pages > 0:
            try:
                if pubsub is None:
                    pubsub = async_client().pubsub(ignore_subscribe_messages=True)
                    await pubsub.subscribe(_wake_channel())
                await self.publish_noted()  # also what was noted before the subscription
                await pubsub.get_message(timeout=STATE_SAFETY_S)  # a wake-up, or the safety interval
            except asyncio.CancelledError:
                if pubsub is not None:
                    await pubsub.aclose()
                raise
            except Exception:  # best effort: a page also renders the state on load
                log.exception("dashboard state updates not sent")
                if pubsub is not None:
                    await pubsub.aclose()
                    pubsub = None
                await asyncio.sleep(STATE_SAFETY_S)
        if pubsub is not None:
            await pubsub.aclose()

    async def publish_noted(self) -> int:
        names = await async_client().spop(_changed_key(), STATE_BATCH_MAX)
        if not names:
            return 0
        states = await database_sync_to_async(group_states)(sorted(names))
        await asyncio.gather(*(_send(_state_message(name, state)) for name, state in states.items()))
        return len(states)


_publishers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _StatePublisher] = weakref.WeakKeyDictionary()


def _publisher() -> _StatePublisher:
    loop = asyncio.get_running_loop()
    publisher = _publishers.get(loop)
    if publisher is None:
        publisher = _publishers[loop] = _StatePublisher()
    return publisher


CLOSE_TRY_AGAIN_LATER = 1013  # RFC 6455: a page that read nothing for DASHBOARD_WS_STALL_SECONDS


class DashboardConsumer(AsyncWebsocketConsumer):
    """One per open page; a logged-in user only. Messages in: {"subscribe": "<brokerName>" | "*"}.

    A page that reads slowly costs a bounded amount: updates wait in an outbox holding the latest per
    (kind, replica group), which a writer task sends one at a time, so the consumer itself never waits
    on the page and the channel layer never queues for it. A page whose socket takes nothing for
    ``DASHBOARD_WS_STALL_SECONDS`` (the server's send buffer stays full) leaves its groups, loses its
    pending updates and is closed with 1013; its script reconnects. This leans on the ASGI server's
    flow control (uvicorn's send waits while the peer's buffer is full)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.groups_joined: set[str] = set()
        self.outbox: dict[tuple[str, str], dict] = {}
        self.outbox_filled = asyncio.Event()
        self.stalled = False
        await self.accept()
        self.writer = asyncio.get_running_loop().create_task(self._write())
        _publisher().attach()
        self.attached = True

    async def disconnect(self, code) -> None:
        if getattr(self, "attached", False):
            self.attached = False
            _publisher().detach()
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.cancel()
        await self._leave_groups()

    async def _leave_groups(self) -> None:
        groups: set[str] = getattr(self, "groups_joined", set())
        self.groups_joined = set()
        for g in groups:
            await self.channel_layer.group_discard(g, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if self.stalled:
            return
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
        if self.stalled:
            return
        message = event["message"]
        key = (message["kind"], message["brokerName"])
        self.outbox[key] = _merge(self.outbox.get(key), message)
        self.outbox_filled.set()

    async def _write(self) -> None:
        """The outbox to the page, oldest group first, one send at a time."""
        stall_s = settings.DASHBOARD_WS_STALL_SECONDS
        try:
            while True:
                await self.outbox_filled.wait()
                self.outbox_filled.clear()
                while self.outbox:
                    message = self.outbox.pop(next(iter(self.outbox)))
                    try:
                        await asyncio.wait_for(self.send(json.dumps(message, default=str)), stall_s)
                    except TimeoutError:
                        await self._give_up(stall_s)
                        return
        except OSError:  # uvicorn's ClientDisconnected: the page is gone; its disconnect cleans up
            return

    async def _give_up(self, stall_s: float) -> None:
        self.stalled = True
        dropped = len(self.outbox) + 1
        self.outbox.clear()
        await self._leave_groups()
        log.warning(
            "a dashboard socket took nothing for %g s: %d pending updates dropped, no more sent, closed with %d",
            stall_s,
            dropped,
            CLOSE_TRY_AGAIN_LATER,
        )
        # The close frame goes out behind what the server still buffers: the page sees it once it reads.
        await self.close(code=CLOSE_TRY_AGAIN_LATER)
