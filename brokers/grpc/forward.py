"""A replica that does not serve a request forwards it to its group's serving broker (issue 16): the
master, or the acting master of RIP-32 for what that one serves. Official clients keep a route for
30 s and send to whichever replica their channel reached; this is how every live replica answers for
its group without a proxy tier.

The serving broker's client endpoint comes from the group's own route (the nameserver's route of the
topic named after the broker set, ``brokerGrpcAddrs["0"]``), cached briefly and asked again after a
failed forward. While there is none (an election in progress) a request waits for one, and gives up
with a code the official clients retry on at once (INTERNAL_SERVER_ERROR, as RocketMQ's proxy
answers a broker it cannot reach) before the client's own deadline.

A forward to a master that stopped answering without closing its connections (SIGSTOP, a stalled VM)
is given up as soon as another master is known: when this broker is told of a role change
(``master_changed``, the controller's push), or when the route, asked again while the call waits,
names another serving broker. The call given up may still be carried out by the old master if it
resumes; a deposed master cannot have it acknowledged (its slaves follow the new master), and the
client gets the new master's answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import grpc
import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from .codes import status

log = logging.getLogger("brokers.grpc")

CACHE_S = 0.5  # a known serving broker is asked for again after this long
LOOKUP_STEP_S = 0.05  # while there is none, how often to look again
MARGIN_S = 0.3  # answer this long before the client's deadline
DEFAULT_DEADLINE_S = 3.0  # a request without a deadline (the clients' default request timeout)
MAX_WAIT_S = 10.0  # never hold a request longer, whatever the client's deadline
# One forward attempt waits at most this long: a master that stopped answering (SIGSTOP, a partition)
# is asked again (or given up for a new master, as soon as one is known) until the client's deadline.
# The client is not answered earlier: its retry would wait for the same election on another slave
# (see service.queue_addrs), and early answers spend its three attempts before there is a new master;
# held here, the request is served by the new master as soon as the controller elects one (within its
# heartbeat timeout).
ATTEMPT_S = 1.0
# A channel to a broker that was down for a while would wait out gRPC's reconnect backoff (growing to
# 120 s) after the broker is back, failing every forward with UNAVAILABLE meanwhile: reconnect within 1 s.
CHANNEL_OPTIONS = [
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class NoServingBroker(Exception):
    """No serving broker of the group was reachable before the deadline."""


class ServeHere(Exception):
    """This broker became the one that serves (it was elected) while the request waited."""


class Superseded(Exception):
    """Another master became known while a forward waited on this one."""


def _collect(task: asyncio.Future) -> None:
    """A call given up: its outcome is read, so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


class Forwarder:
    def __init__(
        self, broker_name: str, own_grpc_addr: str, http: httpx.AsyncClient, credentials: grpc.ChannelCredentials | None = None
    ):
        """``credentials``: TLS to the master's endpoint (brokers/tls.py ``grpc_channel_credentials``)."""
        self.broker_name = broker_name
        self.credentials = credentials
        self.own = own_grpc_addr
        self.http = http
        self._addr: str | None = None
        self._asked_at = -1.0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._changed = asyncio.Event()  # set (and replaced) when this broker is told of a new master

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    @staticmethod
    def deadline(context) -> float:
        """The monotonic time by which a forwarded answer must be back (the client's deadline less a margin)."""
        remaining = context.time_remaining() if context is not None else None
        if remaining is None:
            remaining = DEFAULT_DEADLINE_S
        return time.monotonic() + max(0.0, min(MAX_WAIT_S, remaining - MARGIN_S))

    async def _refresh(self) -> None:
        """Ask the group's route again. A control plane that cannot be asked (down, partitioned,
        answering 5xx) leaves the serving broker known in place: the route is only a cache of the
        controller's decision, and the controller is a weak dependency (seed 004), so its outage must
        not stop forwarding to a master that still serves."""
        self._asked_at = time.monotonic()
        try:
            r = await self.http.get(f"/api/v1/nameserver/routes/{self.broker_name}", timeout=1.0)
        except httpx.HTTPError:
            return
        if r.status_code >= 500:
            return
        self._addr = self._serving(r.json().get("brokerDatas", ()) if r.status_code == 200 else ())

    def _serving(self, broker_datas) -> str | None:
        for bd in broker_datas:
            if bd.get("brokerName") == self.broker_name:
                addr = bd.get("brokerGrpcAddrs", {}).get("0")
                return addr if addr and addr != self.own else None
        return None

    async def target(self, deadline: float, forwarding: Callable[[], bool] = lambda: True) -> str:
        """The serving broker's client endpoint, waiting for one until ``deadline``; ServeHere as soon
        as ``forwarding()`` turns false (this broker serves now)."""
        while True:
            if not forwarding():
                raise ServeHere()
            if self._addr is None or time.monotonic() - self._asked_at > CACHE_S:
                await self._refresh()
            if self._addr is not None:
                return self._addr
            if time.monotonic() + LOOKUP_STEP_S >= deadline:
                raise NoServingBroker(f"no serving broker of {self.broker_name} is known (an election may be under way)")
            await asyncio.sleep(LOOKUP_STEP_S)

    def failed(self, addr: str) -> None:
        if self._addr == addr:
            self._addr = None

    def master_changed(self) -> None:
        """The group has a new master (this broker was told its role): forget the one known and give
        up the calls waiting on it."""
        self._addr = None
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _superseded(self, addr: str) -> None:
        """Returns once a master other than ``addr`` is known; never while ``addr`` stays the one. The
        route is asked at most once per CACHE_S, however many calls wait (long polls do)."""
        changed = self._changed
        while True:
            try:
                await asyncio.wait_for(changed.wait(), CACHE_S)
                return
            except TimeoutError:
                pass
            if time.monotonic() - self._asked_at > CACHE_S:
                await self._refresh()
            if self._addr is not None and self._addr != addr:
                return

    async def _unless_superseded(self, addr: str, call, answer: Awaitable):
        """``answer`` (of the gRPC ``call`` to ``addr``), or Superseded if another master became known
        first: then the call is cancelled."""
        attempt = asyncio.ensure_future(answer)
        watch = asyncio.ensure_future(self._superseded(addr))
        try:
            done, _ = await asyncio.wait((attempt, watch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not attempt.done():  # superseded, or the caller itself was cancelled
                attempt.cancel()
                call.cancel()
                attempt.add_done_callback(_collect)
        if attempt in done:
            return attempt.result()
        raise Superseded(addr)

    def stub(self, addr: str) -> rpc.MessagingServiceStub:
        channel = self._channels.get(addr)
        if channel is None:
            channel = self._channels[addr] = (
                grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
                if self.credentials is None
                else grpc.aio.secure_channel(addr, self.credentials, options=CHANNEL_OPTIONS)
            )
        return rpc.MessagingServiceStub(channel)

    async def unary(self, method: str, request, context, forwarding: Callable[[], bool] = lambda: True, metadata=None):
        """Forward a unary call (with ``metadata``, gRPC headers); retried on another lookup while the
        deadline allows. Raises NoServingBroker when nothing answered in time, ServeHere when
        ``forwarding()`` turns false."""
        deadline = self.deadline(context)
        last: Exception | None = None
        while time.monotonic() < deadline:
            addr = await self.target(deadline, forwarding)
            try:
                timeout = max(0.05, min(ATTEMPT_S, deadline - time.monotonic()))
                call = getattr(self.stub(addr), method)(request, timeout=timeout, metadata=metadata)
                return await self._unless_superseded(addr, call, call)
            except Superseded:
                log.info("forwarding %s: %s was superseded by a new master; forwarding there", method, addr)
            except grpc.aio.AioRpcError as exc:
                last = exc
                self.failed(addr)
                log.info("forwarding %s to %s failed (%s); looking again", method, addr, exc.code().name)
                await asyncio.sleep(LOOKUP_STEP_S)
        raise NoServingBroker(f"forwarding {method} failed: {last}" if last else f"forwarding {method} timed out")

    async def forward(self, method: str, request, context, empty, forwarding: Callable[[], bool]):
        """Hand a unary call to the group's serving broker: its answer; nobody there in time:
        INTERNAL_SERVER_ERROR, which the clients retry (``empty``: the response type); None when this
        broker serves it after all (``forwarding()`` turned false: elected meanwhile)."""
        try:
            return await self.unary(method, request, context, forwarding)
        except NoServingBroker as exc:
            return empty(status=status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
        except ServeHere:
            return None

    async def stream(self, method: str, request, context, forwarding: Callable[[], bool] = lambda: True, metadata=None):
        """Forward a server-streaming call (ReceiveMessage): the serving broker's answers, as they come.
        A broker that fails before its first answer (the route still names a dead master) is given
        up for the next one the route names, while the deadline allows."""
        deadline = self.deadline(context)
        while True:
            addr = await self.target(deadline, forwarding)
            answered = False
            try:
                call = getattr(self.stub(addr), method)(
                    request, timeout=max(0.05, deadline - time.monotonic()), metadata=metadata
                )
                response = await self._unless_superseded(addr, call, call.read())
                while response is not grpc.aio.EOF:
                    answered = True
                    yield response
                    response = await call.read()
                return
            except Superseded:
                log.info("forwarding %s: %s was superseded by a new master; forwarding there", method, addr)
            except grpc.aio.AioRpcError as exc:
                self.failed(addr)
                if answered or time.monotonic() + LOOKUP_STEP_S >= deadline:
                    raise NoServingBroker(f"forwarding {method} to {addr} failed: {exc.code().name}") from None
                log.info("forwarding %s to %s failed (%s); looking again", method, addr, exc.code().name)
                await asyncio.sleep(LOOKUP_STEP_S)
