"""The load of a chaos run: a paced producer that sends with the RocketMQ 5 gRPC stub to whichever
broker is the master now and records every acknowledged message, and a read-back consumer
(ReceiveMessage / AckMessage) that reads every queue of the topic from one broker."""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from testkit.pacing import Pace

CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.enable_retries", 0),
]
RETRY_PAUSE_S = 0.05
WATCH_S = 0.25  # a send slower than this re-resolves the master every WATCH_S while it waits


class MasterChanged(Exception):
    """A send was still waiting when the control plane named another master: given up (the old
    master may still store it: the ids count as uncertain)."""


@dataclass(frozen=True)
class Ack:
    node: str  # which broker answered OK
    queue_offset: int
    at: float  # time.monotonic()
    stale_probe: bool = False  # sent on purpose to a broker that was the master before a fault


@dataclass
class FailedWindow:
    """From the first failed send to the next acknowledged one."""

    start: float
    end: float | None = None
    node_before: str | None = None
    node_after: str | None = None
    failures: int = 0

    @property
    def seconds(self) -> float | None:
        return None if self.end is None else self.end - self.start


@dataclass
class ProducerStats:
    acks: dict[str, Ack] = field(default_factory=dict)
    failed_codes: Counter = field(default_factory=Counter)  # code name -> messages that got it (per attempt)
    uncertain: set[str] = field(default_factory=set)  # ids with a failed attempt: possibly stored anyway
    abandoned: list[str] = field(default_factory=list)  # never acknowledged when the producer stopped
    windows: list[FailedWindow] = field(default_factory=list)
    requests: int = 0


def message(topic: str, message_id: str, body_size: int) -> pb.Message:
    body = (message_id.encode() * (body_size // len(message_id) + 1))[:body_size]
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=message_id, body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
        ),
    )


class Stubs:
    """One channel per broker endpoint, reused across the run (reconnects within 0.5 s)."""

    def __init__(self) -> None:
        self._channels: dict[str, tuple[grpc.Channel, rpc.MessagingServiceStub]] = {}
        self._lock = threading.Lock()

    def get(self, addr: str) -> rpc.MessagingServiceStub:
        with self._lock:
            if addr not in self._channels:
                channel = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
                self._channels[addr] = (channel, rpc.MessagingServiceStub(channel))
            return self._channels[addr][1]

    def close(self) -> None:
        with self._lock:
            for channel, _ in self._channels.values():
                channel.close()
            self._channels.clear()


def send_batch(
    stub: rpc.MessagingServiceStub, messages: list[pb.Message], timeout_s: float, still_master: Callable[[], bool] | None = None
) -> dict[str, tuple[int, int]]:
    """SendMessage; returns message id -> (gRPC Code, queue offset). Raises grpc.RpcError, or
    MasterChanged when ``still_master`` (asked every WATCH_S while the send waits) says no: a client
    that learns of a new master does not sit out its send timeout on a frozen one."""
    request = spb.SendMessageRequest(messages=messages)
    if still_master is None:
        resp = stub.SendMessage(request, timeout=timeout_s)
    else:
        call = stub.SendMessage.future(request, timeout=timeout_s)
        while True:
            try:
                resp = call.result(timeout=WATCH_S)
                break
            except grpc.FutureTimeoutError:
                if not still_master():
                    call.cancel()
                    raise MasterChanged() from None
    out = {e.message_id: (e.status.code, e.offset) for e in resp.entries}
    for m in messages:  # a refusal of the whole request (e.g. fenced) carries no entries
        out.setdefault(m.system_properties.message_id, (resp.status.code, -1))
    return out


def code_name(code: int) -> str:
    try:
        return pb.Code.Name(code)
    except ValueError:
        return str(code)


class Producer(threading.Thread):
    """Sends ``batch`` messages per request at ``rate`` messages/s to ``resolve()``'s broker (node
    name, gRPC address). A message not acknowledged is sent again, same id, after re-resolving: at
    least once, as a real client retries."""

    def __init__(
        self,
        topic: str,
        resolve: Callable[[], tuple[str, str] | None],
        *,
        rate: float = 400,
        batch: int = 8,
        body_size: int = 512,
        send_timeout_s: float = 5.0,
        id_prefix: str = "C",
    ):
        super().__init__(name="chaos-producer", daemon=True)
        self.topic = topic
        self.resolve = resolve
        self.rate = rate
        self.batch = batch
        self.body_size = body_size
        self.send_timeout_s = send_timeout_s
        self.id_prefix = id_prefix
        self.stats = ProducerStats()
        self.stubs = Stubs()
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._give_up_at: float | None = None
        self._next_id = 0
        self._target: tuple[str, str] | None = None
        self._in_order: list[Ack] = []  # every ack, by time

    # --- control ----------------------------------------------------------------------------------

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop taking new messages; a batch not yet acknowledged is retried for ``grace_s`` more."""
        self._give_up_at = time.monotonic() + grace_s
        self._halt.set()
        self.join(grace_s + self.send_timeout_s + 5)
        self.stubs.close()
        if self.error is not None:
            raise RuntimeError("the producer failed") from self.error

    def halt(self) -> None:
        """Stop at once, if running (a run's clean-up after an error): a batch not yet acknowledged is
        not retried."""
        if self.is_alive():
            self.stop(grace_s=0)

    def new_ids(self, n: int) -> list[str]:
        with self._lock:
            first, self._next_id = self._next_id, self._next_id + n
        return [f"{self.id_prefix}{i:031X}" for i in range(first, first + n)]

    def acks_snapshot(self) -> dict[str, Ack]:
        with self._lock:
            return dict(self.stats.acks)

    def first_ack_after(self, t: float, exclude_node: str | None = None) -> Ack | None:
        """The first ack after ``t`` (time.monotonic()) by another broker than ``exclude_node``,
        probes of a deposed master aside."""
        with self._lock:
            for a in self._in_order[bisect.bisect_right(self._in_order, t, key=lambda a: a.at) :]:
                if a.node != exclude_node and not a.stale_probe:
                    return a
        return None

    def _record_ack(self, message_id: str, ack: Ack) -> None:
        """Under self._lock."""
        self.stats.acks[message_id] = ack
        self._in_order.append(ack)

    # --- sending ------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            pace = Pace(self.batch / self.rate, time.monotonic(), catch_up_s=1.0)
            while not self._halt.is_set():
                self._deliver(self.new_ids(self.batch))
                pace.advance(time.monotonic())
                delay = pace.wait_s(time.monotonic())
                if delay > 0:
                    self._halt.wait(delay)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def _deliver(self, ids: list[str]) -> None:
        pending = list(ids)
        while pending:
            if self._give_up_at is not None and time.monotonic() > self._give_up_at:
                with self._lock:
                    self.stats.abandoned += pending
                return
            if self._target is None:
                self._target = self.resolve()
                if self._target is None:
                    self._failed(pending, "NO_MASTER_KNOWN", None)
                    continue
            node, addr = self._target
            try:
                results = send_batch(
                    self.stubs.get(addr),
                    [message(self.topic, i, self.body_size) for i in pending],
                    self.send_timeout_s,
                    lambda: self.resolve() in (self._target, None),
                )
            except grpc.RpcError as exc:
                self._failed(pending, f"RPC_{exc.code().name}", node)
                continue
            except MasterChanged:
                self._failed(pending, "GAVE_UP_MASTER_CHANGED", node)
                continue
            now = time.monotonic()
            acked = [i for i in pending if results[i][0] == pb.Code.OK]
            with self._lock:
                self.stats.requests += 1
                for i in acked:
                    self._record_ack(i, Ack(node, results[i][1], now))
                if acked and self.stats.windows and self.stats.windows[-1].end is None:
                    w = self.stats.windows[-1]
                    w.end, w.node_after = now, node
            rest = [i for i in pending if results[i][0] != pb.Code.OK]
            if rest:
                for i in rest:
                    self._count_failure(i, code_name(results[i][0]))
                self._failed(rest, None, node)
            pending = rest

    def _count_failure(self, message_id: str, reason: str) -> None:
        with self._lock:
            self.stats.failed_codes[reason] += 1
            self.stats.uncertain.add(message_id)

    def _failed(self, ids: list[str], reason: str | None, node: str | None) -> None:
        now = time.monotonic()
        with self._lock:
            if reason is not None:
                self.stats.failed_codes[reason] += len(ids)
                self.stats.uncertain.update(ids)
            if not self.stats.windows or self.stats.windows[-1].end is not None:
                self.stats.windows.append(FailedWindow(now, node_before=node))
            self.stats.windows[-1].failures += 1
        self._target = None  # re-resolve: the master may have changed
        time.sleep(RETRY_PAUSE_S)

    def probe(self, node: str, addr: str, count: int) -> dict[str, int]:
        """Send ``count`` new messages straight to ``node`` (e.g. a deposed master just resumed);
        every one it acknowledges is recorded like any other ack. Returns {code name: messages}."""
        ids = self.new_ids(count)
        codes: Counter = Counter()
        try:
            results = send_batch(self.stubs.get(addr), [message(self.topic, i, self.body_size) for i in ids], self.send_timeout_s)
        except grpc.RpcError as exc:
            codes[f"RPC_{exc.code().name}"] += count
            return dict(codes)
        now = time.monotonic()
        with self._lock:
            for i in ids:
                code, offset = results[i]
                codes[code_name(code)] += 1
                if code == pb.Code.OK:
                    self._record_ack(i, Ack(node, offset, now, stale_probe=True))
                else:
                    self.stats.uncertain.add(i)
        return dict(codes)


@dataclass(frozen=True)
class Received:
    message_id: str
    queue_id: int
    queue_offset: int


def read_back(
    addr: str, topic: str, queues: int, group: str = "chaos-verify", idle_polls: int = 1, timeout_s: float = 120.0
) -> list[Received]:
    """Every message of ``topic`` the broker at ``addr`` serves (up to its confirm offset), read with
    ReceiveMessage queue by queue and acknowledged; a queue is done after ``idle_polls`` empty polls."""
    out: list[Received] = []
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = rpc.MessagingServiceStub(channel)
        for qid in range(queues):
            idle = 0
            while idle < idle_polls:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic} back from {addr} took over {timeout_s:g} s")
                req = spb.ReceiveMessageRequest(
                    group=pb.Resource(name=group),
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=qid),
                    filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                    batch_size=1024,
                    invisible_duration=Duration(seconds=600),
                    long_polling_timeout=Duration(seconds=1),
                    auto_renew=False,
                )
                got = []
                for resp in stub.ReceiveMessage(req, timeout=10):
                    if resp.HasField("message"):
                        got.append(resp.message)
                    elif resp.HasField("status") and resp.status.code not in (pb.Code.OK, pb.Code.MESSAGE_NOT_FOUND):
                        raise RuntimeError(f"ReceiveMessage from {addr}: {code_name(resp.status.code)} {resp.status.message}")
                if not got:
                    idle += 1
                    continue
                idle = 0
                out += [Received(m.system_properties.message_id, qid, m.system_properties.queue_offset) for m in got]
                ack = stub.AckMessage(
                    spb.AckMessageRequest(
                        group=pb.Resource(name=group),
                        topic=pb.Resource(name=topic),
                        entries=[
                            spb.AckMessageEntry(
                                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
                            )
                            for m in got
                        ],
                    ),
                    timeout=10,
                )
                if ack.status.code != pb.Code.OK:
                    raise RuntimeError(f"AckMessage to {addr}: {code_name(ack.status.code)} {ack.status.message}")
    return out
