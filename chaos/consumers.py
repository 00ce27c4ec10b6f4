"""Consumer groups of a chaos run: pop consumers (RocketMQ 5 ``ReceiveMessage`` / ``AckMessage`` with
the raw gRPC stubs) that read every queue of a topic for several groups at once, acknowledge every
message they receive, and record each delivery and each acknowledgement the broker answered OK; and
the pure figures drawn from those records (redeliveries after an ack, stalls, what never came).

The official Python client keeps a topic's route for 30 s and cannot reach a new master before
then, so these consumers find the master themselves: a :class:`RouteCache` asks the control plane's
route (``/api/v1/nameserver/routes/<topic>``, id 0 of ``brokerGrpcAddrs``) again after any failed
call, and every ``refresh_s`` in any case (a consumer that found an acting master must come back to
the master once it returns).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from .workload import Stubs, code_name

FAILURE_PAUSE_S = 0.1  # after a failed call, before the next one (the route is asked again)
NO_ROUTE_RETRY_S = 0.2  # how often a missing route is asked for again, whoever asks
RECEIVE_MARGIN_S = 3.0  # a receive's deadline beyond its long-polling time
ACK_TIMEOUT_S = 5.0


class RouteCache:
    """The master's gRPC address as ``lookup()`` (e.g. the control plane's route) names it, shared by
    every consumer thread: asked again after ``failed(addr)`` and every ``refresh_s``."""

    def __init__(self, lookup: Callable[[], str | None], refresh_s: float = 2.0):
        self._lookup = lookup
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._addr: str | None = None
        self._asked_at = -math.inf
        self.lookups = 0

    def get(self) -> str | None:
        with self._lock:
            age = time.monotonic() - self._asked_at
            if age < (self.refresh_s if self._addr is not None else NO_ROUTE_RETRY_S):
                return self._addr
            self.lookups += 1
            try:
                self._addr = self._lookup()
            except Exception:  # the control plane restarting, a timeout: no route for now
                self._addr = None
            self._asked_at = time.monotonic()
            return self._addr

    def failed(self, addr: str) -> None:
        """A call to ``addr`` failed: the next ``get`` asks again (unless another thread already did)."""
        with self._lock:
            if self._addr == addr:
                self._asked_at = -math.inf


@dataclass(frozen=True, slots=True)
class Delivery:
    started: float  # time.monotonic() when the ReceiveMessage call began
    at: float  # ... when its answer arrived
    message_id: str
    queue_id: int
    queue_offset: int  # in the topic's queue for a first attempt, in the retry topic's after a revive
    attempt: int  # delivery_attempt: 1 from the topic itself, > 1 from the group's retry topic
    addr: str  # the broker that delivered it


@dataclass
class GroupRecord:
    """What one consumer group saw; appended to by its threads under ``lock``."""

    group: str
    deliveries: list[Delivery] = field(default_factory=list)
    first_ok_ack: dict[str, float] = field(default_factory=dict)  # message id -> first ack answered OK (monotonic)
    acks_ok: int = 0
    ack_failures: Counter = field(default_factory=Counter)  # code name -> entries (RPC errors per attempt)
    acks_given_up: int = 0  # entries whose ack never got an answer before their invisible time passed
    receive_failures: Counter = field(default_factory=Counter)  # code name -> calls
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def delivered_ids(self) -> set[str]:
        with self.lock:
            return {d.message_id for d in self.deliveries}

    def first_delivery(self) -> dict[str, float]:
        """message id -> when it first reached this group."""
        with self.lock:
            out: dict[str, float] = {}
            for d in self.deliveries:
                if d.at < out.get(d.message_id, math.inf):
                    out[d.message_id] = d.at
            return out


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromMilliseconds(int(seconds * 1000))
    return d


class ConsumerGroups:
    """One thread per (group, queue): ReceiveMessage from the master ``route`` names, then AckMessage
    of everything received, to the broker that delivered it (or, when that call fails, to whichever
    broker the route names then, until the message's invisible time has passed)."""

    def __init__(
        self,
        topic: str,
        queues: int,
        groups: Sequence[str],
        route: RouteCache,
        *,
        batch: int = 16,
        invisible_s: float = 10.0,
        long_polling_s: float = 1.5,
    ):
        self.topic = topic
        self.route = route
        self.batch = batch
        self.invisible_s = invisible_s
        self.long_polling_s = long_polling_s
        self.records = {g: GroupRecord(g) for g in groups}
        self.stubs = Stubs()
        self.errors: list[BaseException] = []
        self._halt = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._threads = [
            threading.Thread(target=self._guarded, args=(g, q), name=f"consumer-{g}-{q}", daemon=True)
            for g in groups
            for q in range(queues)
        ]

    # --- control ----------------------------------------------------------------------------------

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def pause(self) -> None:
        """No new receives (those under way finish and are acknowledged): a backlog builds up."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._halt.set()
        self._running.set()
        for t in self._threads:
            t.join(self.long_polling_s + RECEIVE_MARGIN_S + ACK_TIMEOUT_S + 1)
        self.stubs.close()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} consumer thread(s) failed") from self.errors[0]

    def deliveries(self) -> int:
        return sum(len(r.deliveries) for r in self.records.values())

    # --- one queue of one group -------------------------------------------------------------------

    def _guarded(self, group: str, queue_id: int) -> None:
        try:
            self._consume(group, queue_id)
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)

    def _consume(self, group: str, queue_id: int) -> None:
        record = self.records[group]
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=self.topic), id=queue_id),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
            batch_size=self.batch,
            invisible_duration=_duration(self.invisible_s),
            long_polling_timeout=_duration(self.long_polling_s),
            auto_renew=False,
        )
        while not self._halt.is_set():
            if not self._running.wait(0.2):
                continue
            addr = self.route.get()
            if addr is None:
                self._failed(record, record.receive_failures, "NO_ROUTE", None)
                continue
            started = time.monotonic()
            messages, problem = self._receive(addr, request)
            at = time.monotonic()
            if messages:
                with record.lock:
                    record.deliveries += [
                        Delivery(
                            started,
                            at,
                            m.system_properties.message_id,
                            queue_id,
                            m.system_properties.queue_offset,
                            m.system_properties.delivery_attempt,
                            addr,
                        )
                        for m in messages
                    ]
                self._ack(record, addr, messages, at)
            if problem is not None:
                self._failed(record, record.receive_failures, problem, addr)

    def _receive(self, addr: str, request: spb.ReceiveMessageRequest) -> tuple[list[pb.Message], str | None]:
        """The messages received (also those that came before the stream broke) and what went wrong."""
        messages: list[pb.Message] = []
        try:
            for response in self.stubs.get(addr).ReceiveMessage(request, timeout=self.long_polling_s + RECEIVE_MARGIN_S):
                if response.HasField("message"):
                    messages.append(response.message)
                elif response.HasField("status") and response.status.code not in (pb.Code.OK, pb.Code.MESSAGE_NOT_FOUND):
                    return messages, code_name(response.status.code)
        except grpc.RpcError as exc:
            return messages, f"RPC_{exc.code().name}"
        return messages, None

    def _ack(self, record: GroupRecord, addr: str, messages: list[pb.Message], delivered_at: float) -> None:
        entries = [
            spb.AckMessageEntry(message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
            for m in messages
        ]
        request = spb.AckMessageRequest(group=pb.Resource(name=record.group), topic=pb.Resource(name=self.topic), entries=entries)
        give_up_at = delivered_at + self.invisible_s
        target: str | None = addr
        while True:
            if target is not None:
                try:
                    response = self.stubs.get(target).AckMessage(request, timeout=ACK_TIMEOUT_S)
                    break
                except grpc.RpcError as exc:
                    self._failed(record, record.ack_failures, f"RPC_{exc.code().name}", target, len(entries))
            else:
                self._halt.wait(FAILURE_PAUSE_S)
            if self._halt.is_set() or time.monotonic() >= give_up_at:
                with record.lock:
                    record.acks_given_up += len(entries)
                return
            target = self.route.get()
        answered = time.monotonic()
        codes = {e.receipt_handle: e.status.code for e in response.entries}
        with record.lock:
            for e in entries:
                code = codes.get(e.receipt_handle, response.status.code)
                if code == pb.Code.OK:
                    record.acks_ok += 1
                    record.first_ok_ack.setdefault(e.message_id, answered)
                else:
                    record.ack_failures[code_name(code)] += 1

    def _failed(self, record: GroupRecord, counter: Counter, reason: str, addr: str | None, n: int = 1) -> None:
        with record.lock:
            counter[reason] += n
        if addr is not None:
            self.route.failed(addr)
        self._halt.wait(FAILURE_PAUSE_S)


# --- figures (pure) ---------------------------------------------------------------------------------


def redeliveries_after_ack(deliveries: Iterable[Delivery], first_ok_ack: Mapping[str, float]) -> tuple[int, int]:
    """(deliveries of a message to a group whose receive began after that group's ack of it had been
    answered OK, first deliveries of another stored copy of an id the group had already received).

    A copy is (message id, queue, queue offset) of a first attempt: a producer that sends a message
    again after a failed attempt may have stored it twice, and the second copy is a new message to the
    broker, not a redelivery. Replicas share queue offsets, so a new master handing out a copy again
    from a stale offset is a redelivery; so is anything from the retry topic (attempt > 1)."""
    seen_copies: set[tuple[str, int, int]] = set()
    seen_ids: set[str] = set()
    again = copies = 0
    for d in sorted(deliveries, key=lambda d: d.started):
        copy = (d.message_id, d.queue_id, d.queue_offset)
        new_copy = d.attempt <= 1 and copy not in seen_copies
        if new_copy:
            copies += d.message_id in seen_ids
            seen_copies.add(copy)
        seen_ids.add(d.message_id)
        acked = first_ok_ack.get(d.message_id)
        if not new_copy and acked is not None and acked < d.started:
            again += 1
    return again, copies


def longest_pause(delivered_at: Iterable[float], start: float, end: float) -> float:
    """The longest time within [start, end] without a delivery."""
    marks = [start, *sorted(t for t in delivered_at if start < t < end), end]
    return max(b - a for a, b in zip(marks, marks[1:], strict=False))


def longest_stall(delivered_at: Iterable[float], waiting: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """The longest time within [start, end] during which a group received nothing although a message
    was waiting for it: ``waiting`` holds (acknowledged to the producer at, first delivered to the
    group at, ``math.inf`` if never) per message. A pause with nothing to consume is not a stall."""
    marks = [start, *sorted(t for t in delivered_at if start < t < end), end]
    # Swept from the end: `earliest` is the earliest ack among the messages first delivered after `lo`.
    pending = sorted(((a, d) for a, d in waiting if d > start and a < end), key=lambda p: p[1], reverse=True)
    earliest, i, best = math.inf, 0, 0.0
    for lo, hi in reversed(list(zip(marks, marks[1:], strict=False))):
        while i < len(pending) and pending[i][1] > lo:
            earliest = min(earliest, pending[i][0])
            i += 1
        waiting_from = max(lo, earliest)
        if waiting_from < hi:
            best = max(best, hi - waiting_from)
    return best


def missing(acked: Iterable[str], delivered: set[str]) -> list[str]:
    """Acknowledged message ids a group never received."""
    return [m for m in acked if m not in delivered]
