"""Escape (RIP-32, reference §5.2 EscapeBridge): what an acting master must deliver but cannot write
to its own log (it is a slave of a dead master) goes to **another** master of the cluster.

The target is a master of another broker set that has the message's topic, from the topic's route
(the nameserver's, asked again after ``ROUTE_CACHE_S``), as brokers/core/escape.py chooses it. The
message is sent over the target's client endpoint (gRPC SendMessage) as its producer sent it, with
``TIMER_OUT_MS`` kept: a message that
already went through a timer wheel is stored at once (RocketMQ's rule); a committed transaction keeps
``__transactionId__`` and is stored at once too (brokers/transaction.py). No target, or a refusal:
PUT_TO_REMOTE_BROKER_FAIL, and the caller keeps the message for a later try.
"""

from __future__ import annotations

import logging
import time

import grpc
import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from ..core.escape import escape_target
from ..core.timer import TIMER_DELIVER_MS
from ..core.transaction import TRANSACTION_ID
from ..metrics import Traffic
from ..store.message import Message
from .messages import client_message

log = logging.getLogger("brokers.escape")

ROUTE_CACHE_S = 1.0
SEND_TIMEOUT_S = 3.0  # RocketMQ's escape send timeout
PUT_TO_REMOTE_BROKER_FAIL = "PUT_TO_REMOTE_BROKER_FAIL"
_HIDDEN = frozenset({"UNIQ_KEY", "TAGS", "KEYS", "BORN_HOST", TIMER_DELIVER_MS})  # carried as system properties


def escaped_message(m: Message) -> pb.Message:
    """``m`` as its producer sent it: a timer message with its delivery time and TIMER_OUT_MS, a
    committed transaction with ``__transactionId__`` (as the TRANSACTION type its topic takes)."""
    out = client_message(m, m.topic, m.queue_id, _HIDDEN)
    if TRANSACTION_ID in m.properties:
        out.system_properties.message_type = pb.MessageType.TRANSACTION
    return out


class EscapeBridge:
    def __init__(
        self, own_broker: str, http: httpx.AsyncClient, traffic: Traffic, credentials: grpc.ChannelCredentials | None = None
    ):
        """``credentials``: TLS to the other masters' endpoints (brokers/tls.py ``grpc_channel_credentials``)."""
        self.traffic = traffic  # rmqha_escaped_messages_total
        self.credentials = credentials
        self.own_broker = own_broker
        self.http = http
        self._routes: dict[str, tuple[float, dict | None]] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def _route(self, topic: str) -> dict | None:
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_CACHE_S:
            return cached[1]
        try:
            r = await self.http.get(f"/api/v1/nameserver/routes/{topic}", timeout=2.0)
            route = r.json() if r.status_code == 200 else None
        except httpx.HTTPError:
            route = None
        self._routes[topic] = (time.monotonic(), route)
        return route

    async def put(self, messages: list[Message]) -> list[str | None]:
        """Send each message to another master: per message None (stored there) or why not
        (PUT_TO_REMOTE_BROKER_FAIL and the reason)."""
        by_target: dict[str, list[int]] = {}
        out: list[str | None] = [None] * len(messages)
        for i, m in enumerate(messages):
            route = await self._route(m.topic)
            target = escape_target(route, m.topic, self.own_broker) if route else None
            if target is None:
                out[i] = f"{PUT_TO_REMOTE_BROKER_FAIL}: no other master takes topic {m.topic}"
            else:
                by_target.setdefault(target, []).append(i)
        for target, indexes in by_target.items():
            channel = self._channels.get(target)
            if channel is None:
                channel = self._channels[target] = (
                    grpc.aio.insecure_channel(target)
                    if self.credentials is None
                    else grpc.aio.secure_channel(target, self.credentials)
                )
            request = spb.SendMessageRequest(messages=[escaped_message(messages[i]) for i in indexes])
            try:
                response = await rpc.MessagingServiceStub(channel).SendMessage(request, timeout=SEND_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                for i in indexes:
                    out[i] = f"{PUT_TO_REMOTE_BROKER_FAIL}: {target} {exc.code().name}"
                self._routes.pop(messages[indexes[0]].topic, None)
                continue
            entries = list(response.entries)
            for n, i in enumerate(indexes):
                status = entries[n].status if n < len(entries) else response.status
                if status.code != pb.Code.OK:
                    out[i] = f"{PUT_TO_REMOTE_BROKER_FAIL}: {target} {pb.Code.Name(status.code)} {status.message}"
                else:
                    self.traffic.escaped += 1
        return out
