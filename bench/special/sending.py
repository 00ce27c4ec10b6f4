"""The raw gRPC sends of the special-message phases: SendMessage requests of normal, timer and half
messages built before the clock starts, sent to the master with several requests in flight, and what
came back (the ids accepted, failures per code, the CPU the sends cost)."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from bench.common import process_cpu_s
from chaos.workload import CHANNEL_OPTIONS, code_name

CHANNELS = 4  # gRPC channels the sender spreads its requests over
SEND_TIMEOUT_S = 30.0


def message_ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:0{32 - len(prefix)}X}" for i in range(count)]


def send_requests(
    topic: str,
    ids: list[str],
    body: bytes,
    batch: int,
    due_ms: Mapping[str, int] | None = None,
    *,
    transaction: bool = False,
) -> list[spb.SendMessageRequest]:
    """SendMessage requests of ``batch`` messages each: timer messages when ``due_ms`` gives their
    delivery times, half messages of transactions with ``transaction``, normal ones otherwise."""
    if transaction and due_ms is not None:
        raise ValueError("a transactional message has no delivery time")
    kind = pb.MessageType.TRANSACTION if transaction else pb.MessageType.NORMAL if due_ms is None else pb.MessageType.DELAY
    messages = []
    for message_id in ids:
        sp = pb.SystemProperties(message_id=message_id, body_encoding=pb.Encoding.IDENTITY, message_type=kind)
        if due_ms is not None:
            sp.delivery_timestamp.FromMilliseconds(due_ms[message_id])
        messages.append(pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp))
    return [spb.SendMessageRequest(messages=messages[i : i + batch]) for i in range(0, len(messages), batch)]


@dataclass
class Sent:
    """What one run of sends got back."""

    accepted: dict[str, float]  # message id -> when its send was answered OK (time.time())
    failures: Counter  # code name -> messages
    seconds: float  # first send -> last answer
    cpu_s: dict[str, float]  # CPU seconds meanwhile: "client" (this process) and each process watched

    @property
    def per_s(self) -> float:
        return len(self.accepted) / self.seconds if self.seconds > 0 else 0.0

    def cpu_share(self) -> dict[str, float]:
        """CPU seconds per second of the sends, per process (1.0: one core busy throughout)."""
        return cpu_share(self.cpu_s, self.seconds)


def cpu_share(cpu_s: Mapping[str, float], seconds: float) -> dict[str, float]:
    """CPU seconds per second of ``seconds``, per process (1.0: one core busy throughout)."""
    return {name: round(s / seconds, 2) for name, s in cpu_s.items()} if seconds > 0 else {}


def cpu_now(watch: Mapping[str, int]) -> dict[str, float | None]:
    return {"client": time.process_time(), **{name: process_cpu_s(pid) for name, pid in watch.items()}}


def accepted_entries(response: spb.SendMessageResponse, sent: int, failures: Counter) -> list[spb.SendResultEntry]:
    """The entries of a SendMessage answer that say OK; the others counted in ``failures`` by code
    (all ``sent`` messages when the request was refused whole: no entries)."""
    if not response.entries:
        failures[code_name(response.status.code)] += sent
    accepted = []
    for e in response.entries:
        if e.status.code == pb.Code.OK:
            accepted.append(e)
        else:
            failures[code_name(e.status.code)] += 1
    return accepted


async def in_flight(
    addr: str,
    requests: list[spb.SendMessageRequest],
    concurrency: int,
    watch: Mapping[str, int],
    one: Callable[[rpc.MessagingServiceStub, spb.SendMessageRequest], Awaitable[None]],
) -> tuple[float, dict[str, float]]:
    """``one(stub, request)`` for every request in order, ``concurrency`` at a time over up to CHANNELS
    gRPC channels to ``addr`` (opened before the clock starts); the seconds that took, and the CPU
    seconds meanwhile of this process ("client") and of each process ``watch`` names (name -> pid)."""
    channels = [grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS) for _ in range(min(concurrency, CHANNELS))]
    todo = list(reversed(requests))
    try:
        await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 30) for c in channels))
        stubs = [rpc.MessagingServiceStub(c) for c in channels]

        async def worker(stub: rpc.MessagingServiceStub) -> None:
            while todo:
                await one(stub, todo.pop())

        cpu0, t0 = cpu_now(watch), time.perf_counter()
        await asyncio.gather(*(worker(stubs[i % len(stubs)]) for i in range(concurrency)))
        seconds = time.perf_counter() - t0
        cpu1 = cpu_now(watch)
    finally:
        for c in channels:
            await c.close()
    return seconds, {k: cpu1[k] - v for k, v in cpu0.items() if v is not None and cpu1[k] is not None}


async def _send_all(addr: str, requests: list[spb.SendMessageRequest], senders: int, watch: Mapping[str, int]) -> Sent:
    accepted: dict[str, float] = {}
    failures: Counter = Counter()

    async def send(stub: rpc.MessagingServiceStub, request: spb.SendMessageRequest) -> None:
        try:
            response = await stub.SendMessage(request, timeout=SEND_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            failures[f"RPC_{exc.code().name}"] += len(request.messages)
            return
        now = time.time()
        for e in accepted_entries(response, len(request.messages), failures):
            accepted[e.message_id] = now

    seconds, cpu_s = await in_flight(addr, requests, senders, watch, send)
    return Sent(accepted, failures, seconds, cpu_s)


def send_all(addr: str, requests: list[spb.SendMessageRequest], senders: int, watch: Mapping[str, int] | None = None) -> Sent:
    """Every request to ``addr``, ``senders`` in flight; a message not accepted is not sent again.
    ``watch``: name -> pid of processes whose CPU time is measured meanwhile."""
    return asyncio.run(_send_all(addr, requests, senders, watch or {}))


def spread_due(ids: list[str], start_ms: int, window_ms: int, seed: int) -> dict[str, int]:
    """Due times uniformly over [start_ms, start_ms + window_ms), in ms."""
    rng = random.Random(seed)
    return {m: start_ms + int(rng.random() * window_ms) for m in ids}
