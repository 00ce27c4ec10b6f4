"""FIFO messages over raw gRPC: ids that name a message's group and sequence number, a producer of
many groups with one send in flight per group, pop consumers that check the group handed back, and
the order check on what they received (pure)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from bench.special.receiving import TimerConsumers
from bench.special.sending import SEND_TIMEOUT_S, accepted_entries
from bench.special.transactions import END_RETRY_PAUSE_S, END_TIMEOUT_S
from chaos.consumers import Delivery, RouteCache
from chaos.workload import CHANNEL_OPTIONS
from testkit.pacing import Pace


def fifo_group_name(group: int) -> str:
    return f"fifo-{group:03d}"


def fifo_message_id(group: int, seq: int) -> str:
    """A FIFO message's id names its group and its sequence number within the group (32 characters)."""
    return f"Q{group:03d}{seq:028X}"


def fifo_key(message_id: str) -> tuple[int, int]:
    """(group, sequence number) of an id ``fifo_message_id`` made."""
    return int(message_id[1:4]), int(message_id[4:], 16)


def fifo_request(topic: str, group: int, seqs: Sequence[int], body: bytes) -> spb.SendMessageRequest:
    """One SendMessage of a group's next messages, in order: message_type FIFO, the group as
    ``system_properties.message_group``, the sequence number also as the user property ``seq``."""
    name = fifo_group_name(group)
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=topic),
                body=body,
                user_properties={"seq": str(s)},
                system_properties=pb.SystemProperties(
                    message_id=fifo_message_id(group, s),
                    body_encoding=pb.Encoding.IDENTITY,
                    message_type=pb.MessageType.FIFO,
                    message_group=name,
                ),
            )
            for s in seqs
        ]
    )


class FifoProducer(threading.Thread):
    """``groups`` message groups sending at once, each one request of its next ``batch`` messages at
    a time, the next only once every message of the last is accepted (a FIFO producer: one send in
    flight per group). A message not accepted is sent again, same id, to the master the route names
    then, until accepted or the producer stops. ``rate`` (messages/s over every group) paces them;
    None: as fast as they are answered."""

    def __init__(self, topic: str, groups: int, route: RouteCache, body: bytes, batch: int):
        super().__init__(name="fifo-producer", daemon=True)
        self.topic, self.groups, self.route, self.body, self.batch = topic, groups, route, body, batch
        self.rate: float | None = None
        self.accepted: dict[str, float] = {}  # message id -> its send answered OK (time.time())
        self.failures: Counter = Counter()  # code name -> messages (every attempt)
        self.failed_at: list[float] = []  # time.time() of each failed attempt (per request)
        self.abandoned: list[str] = []  # not accepted when the producer stopped
        self._halt = threading.Event()

    def run(self) -> None:
        asyncio.run(self._main())

    def stop(self, timeout_s: float = SEND_TIMEOUT_S) -> None:
        self._halt.set()
        self.join(timeout_s)

    async def _main(self) -> None:
        channels: dict[str, tuple[grpc.aio.Channel, rpc.MessagingServiceStub]] = {}

        def stub(addr: str) -> rpc.MessagingServiceStub:
            if addr not in channels:
                channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
                channels[addr] = (channel, rpc.MessagingServiceStub(channel))
            return channels[addr][1]

        try:
            await asyncio.gather(*(self._group(g, stub) for g in range(self.groups)))
        finally:
            for channel, _ in channels.values():
                await channel.close()

    async def _group(self, group: int, stub: Callable[[str], rpc.MessagingServiceStub]) -> None:
        seq = 0
        pace: Pace | None = None  # unpaced until a rate is set (once)
        while not self._halt.is_set():
            if self.rate:
                if pace is None:
                    pace = Pace(self.batch * self.groups / self.rate, time.monotonic())
                await asyncio.sleep(pace.wait_s(time.monotonic()))
                pace.advance(time.monotonic())
            if self._halt.is_set():
                return
            todo = list(range(seq, seq + self.batch))
            while todo and not self._halt.is_set():
                todo = await self._send(group, todo, stub)
            self.abandoned += [fifo_message_id(group, s) for s in todo]
            seq += self.batch

    async def _send(self, group: int, seqs: list[int], stub: Callable[[str], rpc.MessagingServiceStub]) -> list[int]:
        """One attempt; the sequence numbers still to send (in order)."""
        addr = await asyncio.to_thread(self.route.get)
        if addr is None:
            self.failures["NO_ROUTE"] += len(seqs)
        else:
            try:
                response = await stub(addr).SendMessage(fifo_request(self.topic, group, seqs, self.body), timeout=END_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                self.failures[f"RPC_{exc.code().name}"] += len(seqs)
            else:
                now = time.time()
                ok = {e.message_id for e in accepted_entries(response, len(seqs), self.failures)}
                for s in seqs:
                    if (m := fifo_message_id(group, s)) in ok:
                        self.accepted[m] = now
                seqs = [s for s in seqs if fifo_message_id(group, s) not in ok]
                if not seqs:
                    return []
            self.route.failed(addr)
        self.failed_at.append(time.time())
        await asyncio.sleep(END_RETRY_PAUSE_S)
        return seqs


class FifoConsumers(TimerConsumers):
    """The pop consumers, also counting messages that came back with a message group other than the
    one their id names (the broker must hand the group back as ``system_properties.message_group``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.group_mismatch = 0
        self._mismatch_lock = threading.Lock()

    def _receive(self, addr: str, request: spb.ReceiveMessageRequest) -> tuple[list[pb.Message], str | None]:
        messages, problem = super()._receive(addr, request)
        wrong = sum(
            1
            for m in messages
            if m.system_properties.message_group != fifo_group_name(fifo_key(m.system_properties.message_id)[0])
        )
        if wrong:
            with self._mismatch_lock:
                self.group_mismatch += wrong
        return messages, problem


@dataclass(frozen=True)
class FifoReceipt:
    """One delivery of a FIFO message; times are time.monotonic() of the consumer."""

    message_id: str
    group: int
    seq: int
    offset: int  # its queue offset (a message is handed out again in place: the same copy, the same offset)
    started: float  # the ReceiveMessage call began
    at: float  # its answer arrived
    attempt: int


def fifo_receipts(deliveries: Iterable[Delivery]) -> list[FifoReceipt]:
    out = []
    for d in deliveries:
        group, seq = fifo_key(d.message_id)
        out.append(FifoReceipt(d.message_id, group, seq, d.queue_offset, d.started, d.at, d.attempt))
    return out


def acked_copies(receipts: Iterable[FifoReceipt], first_ok_ack: Mapping[str, float]) -> list[tuple[FifoReceipt, float]]:
    """(the delivery acked, when the ack was answered OK) for each message acked: the consumer acks
    what a receive brought right after it, so the acked copy is the message's delivery that arrived
    last before the answer. Only a message's first OK ack is known (a later copy's ack is not)."""
    acked: dict[str, FifoReceipt] = {}
    for r in receipts:
        at = first_ok_ack.get(r.message_id)
        if at is not None and r.at <= at and (r.message_id not in acked or r.at > acked[r.message_id].at):
            acked[r.message_id] = r
    return [(r, first_ok_ack[m]) for m, r in acked.items()]


def fifo_order_violations(receipts: Iterable[FifoReceipt], acks: Iterable[tuple[FifoReceipt, float]]) -> list[FifoReceipt]:
    """The deliveries that break a message group's order: a delivery of (group, seq, offset) whose
    ReceiveMessage began after an ack had been answered OK for a message of the same group with a
    greater sequence number **and** a greater queue offset. A message handed out again before any
    later one of its group was acked is a redelivery in place, not a violation; so is a copy stored
    after the acked message (the producer sent the message again after an attempt it could not
    tell had worked: a new store at a greater offset); an ack whose answer was lost proves nothing."""
    by_group: dict[int, list[tuple[float, int, int]]] = defaultdict(list)  # group -> (acked at, seq, offset)
    for r, at in acks:
        by_group[r.group].append((at, r.seq, r.offset))
    received: dict[int, list[FifoReceipt]] = defaultdict(list)
    for r in sorted(receipts, key=lambda r: r.started):
        received[r.group].append(r)
    found = []
    for group, acked in by_group.items():
        acked.sort()
        # Fenwick tree over descending sequence numbers: the greatest offset acked among seq > s.
        top = max(seq for _, seq, _ in acked) + 2
        tree = [-1] * (top + 1)
        i = 0
        for r in received[group]:
            while i < len(acked) and acked[i][0] < r.started:
                _, seq, offset = acked[i]
                k = top - seq
                while k <= top:
                    tree[k] = max(tree[k], offset)
                    k += k & -k
                i += 1
            best, k = -1, top - r.seq - 1  # seq > r.seq: indices 1 .. top - r.seq - 1
            while k > 0:
                best = max(best, tree[k])
                k -= k & -k
            if best > r.offset:
                found.append(r)
    return sorted(found, key=lambda r: r.started)


def fifo_figures(
    accepted: Collection[str],
    receipts: Sequence[FifoReceipt],
    violations: Sequence[FifoReceipt],
    acks: Iterable[tuple[FifoReceipt, float]],
) -> dict:
    """What became of the FIFO messages ``accepted`` names (their sends answered OK): ``redelivered``
    counts deliveries beyond a message's first (whatever the cause); ``redelivered_after_ack`` those
    of the acked copy (same queue offset) whose receive began after its ack was answered OK;
    ``stored_twice`` messages received from two queue offsets (the producer sent them again after an
    attempt whose answer it did not get)."""
    mine = [r for r in receipts if r.message_id in accepted]
    ids = {r.message_id for r in mine}
    acked = {a.message_id: (a.offset, at) for a, at in acks}
    offsets: dict[str, set[int]] = defaultdict(set)
    for r in mine:
        offsets[r.message_id].add(r.offset)
    return {
        "received": len(ids),
        "lost": sum(1 for m in accepted if m not in ids),
        "redelivered": len(mine) - len(ids),
        "redelivered_after_ack": sum(
            1 for r in mine if r.message_id in acked and acked[r.message_id][0] == r.offset and acked[r.message_id][1] < r.started
        ),
        "stored_twice": sum(1 for o in offsets.values() if len(o) > 1),
        "order_violations": sum(1 for r in violations if r.message_id in accepted),
    }


def write_fifo_deliveries(
    path: Path,
    receipts: Sequence[FifoReceipt],
    first_ok_ack: Mapping[str, float],
    violations: Collection[FifoReceipt],
    to_wall: float,
) -> None:
    """Every delivery with its group, sequence number, queue offset, when its receive began and
    arrived, its message's first OK ack (ms of time.time()) and whether it broke its group's order."""
    bad = set(violations)
    with open(path, "w") as f:
        f.write("message_id,group,seq,queue_offset,attempt,receive_started_ms,received_ms,acked_ms,violation\n")
        for r in sorted(receipts, key=lambda r: r.started):
            ack = first_ok_ack.get(r.message_id)
            acked = "" if ack is None else f"{(ack + to_wall) * 1000:.1f}"
            f.write(
                f"{r.message_id},{r.group},{r.seq},{r.offset},{r.attempt},{(r.started + to_wall) * 1000:.1f},"
                f"{(r.at + to_wall) * 1000:.1f},{acked},{int(r in bad)}\n"
            )
