"""The clients connected to this broker now, for the ``broker_status`` report's ``clients``
(docs/messages.md §4): the gRPC clients this module keeps, as their calls describe them (the
``x-mq-client-id``, ``x-mq-language`` and ``x-mq-client-version`` metadata; Heartbeat's group; the
Telemetry settings' groups, topics and subscriptions; the queues they receive from), and the remoting
clients brokers/remoting/clients.py keeps from HEART_BEAT.

A gRPC client is forgotten when its Telemetry stream closes, when NotifyClientTermination arrives, or
when nothing was heard of it for CLIENT_EXPIRY_S (as RocketMQ's proxy forgets a channel). A gRPC
producer's groups are the topics it publishes to (the proxy registers it so); a consumer's, its group.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

CLIENT_EXPIRY_S = 120.0
CLIENT_ID_KEY = "x-mq-client-id"
HELD_S = 60.0  # a queue received from this recently is held by the client (a long poll lasts 30 s at most)


def wall_ms(monotonic_s: float) -> int:
    """A time.monotonic() instant as ms since the epoch."""
    return int((time.time() - (time.monotonic() - monotonic_s)) * 1000)


@dataclass
class GrpcClient:
    client_id: str
    language: str = ""
    version: str = ""
    address: str = ""
    seen: float = field(default_factory=time.monotonic)
    producer_groups: set[str] = field(default_factory=set)
    consumer_groups: set[str] = field(default_factory=set)
    topics: set[str] = field(default_factory=set)
    subscriptions: dict[str, list[dict]] = field(default_factory=dict)  # group -> [{topic, expression, type}]
    queues: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (group, topic, queueId) -> last receive
    streams: int = 0  # Telemetry streams open
    # What its Telemetry settings' user agent says (pb.Language's name, its version): preferred to the
    # metadata, which the Node.js client sets to "HTTP" for every call.
    agent: tuple[str, str] | None = None

    def report(self, now: float) -> dict:
        held: dict[str, list[list]] = {}
        for (group, topic, queue_id), at in sorted(self.queues.items()):
            if now - at <= HELD_S:
                held.setdefault(group, []).append([topic, queue_id])
        language, version = self.agent or (self.language, self.version)
        return {
            "clientId": self.client_id,
            "language": language,
            "version": version,
            "address": self.address,
            "protocol": "grpc",
            "lastSeenMs": wall_ms(self.seen),
            "producerGroups": sorted(self.producer_groups),
            "consumerGroups": sorted(self.consumer_groups),
            "topics": sorted(self.topics),
            "subscriptions": {g: list(s) for g, s in sorted(self.subscriptions.items())},
            "queues": held,
        }


@dataclass(frozen=True)
class Caller:
    """Who made a gRPC call, as its metadata and peer say."""

    client_id: str
    language: str
    version: str
    address: str


class GrpcClients:
    def __init__(self) -> None:
        self.clients: dict[str, GrpcClient] = {}

    def heard(self, caller: Caller) -> GrpcClient | None:
        """A call from ``caller``: the client, seen now (None for a call that names no client id)."""
        if not caller.client_id:
            return None
        c = self.clients.get(caller.client_id)
        if c is None:
            c = self.clients[caller.client_id] = GrpcClient(caller.client_id)
        c.language = caller.language or c.language
        c.version = caller.version or c.version
        c.address = caller.address or c.address
        c.seen = time.monotonic()
        return c

    def heartbeat(self, caller: Caller, group: str, consumer: bool) -> None:
        c = self.heard(caller)
        if c is not None and group:
            (c.consumer_groups if consumer else c.producer_groups).add(group)

    def stream_opened(self, caller: Caller) -> None:
        c = self.heard(caller)
        if c is not None:
            c.streams += 1

    def settings(
        self, caller: Caller, publishing: Iterable[str], group: str, subscriptions: list[dict], agent: tuple[str, str] | None
    ) -> None:
        """A Telemetry settings command: a producer's topics (its groups too), a consumer's group and
        subscriptions, and its user agent (language, version) when it names one."""
        c = self.heard(caller)
        if c is None:
            return
        c.agent = agent or c.agent
        published = set(publishing)
        c.producer_groups |= published
        c.topics |= published | {s["topic"] for s in subscriptions}
        if group:
            c.consumer_groups.add(group)
            c.subscriptions[group] = subscriptions

    def received(self, caller: Caller, group: str, topic: str, queue_id: int) -> None:
        c = self.heard(caller)
        if c is not None:
            c.consumer_groups.add(group)
            c.topics.add(topic)
            c.queues[(group, topic, queue_id)] = time.monotonic()

    def stream_closed(self, client_id: str) -> None:
        c = self.clients.get(client_id)
        if c is not None:
            c.streams -= 1
            if c.streams <= 0:
                self.clients.pop(client_id, None)

    def terminated(self, client_id: str) -> None:
        self.clients.pop(client_id, None)

    def report(self) -> list[dict]:
        now = time.monotonic()
        for cid in [cid for cid, c in self.clients.items() if now - c.seen > CLIENT_EXPIRY_S]:
            self.clients.pop(cid, None)
        return [c.report(now) for _, c in sorted(self.clients.items())]


class ReportsClients(Protocol):
    def report(self) -> list[dict]: ...


def connected_clients(*registries: ReportsClients | None) -> list[dict]:
    """Every client connected now, of every protocol: the ``clients`` of the broker_status report."""
    return [entry for r in registries if r is not None for entry in r.report()]


def caller_of(context) -> Caller:
    """The caller of a gRPC call (``context``: its grpc.aio ServicerContext): the official clients'
    metadata, and the peer's address (``ipv4:127.0.0.1:5000`` read as ``127.0.0.1:5000``)."""
    meta = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)} if context is not None else {}
    peer = context.peer() if context is not None else ""
    address = peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer
    return Caller(
        meta.get(CLIENT_ID_KEY, ""),
        meta.get("x-mq-language", "").upper(),
        meta.get("x-mq-client-version", ""),
        address.replace("%5B", "[").replace("%5D", "]"),
    )
