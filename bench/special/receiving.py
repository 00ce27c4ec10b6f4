"""Receiving in the special-message phases: chaos/consumers.py's pop consumers (one group), the
delivery time each timer carried, every delivery as a receipt or a CSV row, and the wait for the
messages a phase expects."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from bench.special.figures import Receipt
from chaos.consumers import ConsumerGroups, Delivery, GroupRecord, RouteCache
from chaos.harness import Harness
from chaos.replicas import GROUP

SETTLE_S = 1.0  # after the last message came: a second copy would show up meanwhile


class TimerConsumers(ConsumerGroups):
    """chaos/consumers.py's pop consumers, also keeping the delivery time each message carried."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stamps: dict[str, set[int | None]] = defaultdict(set)
        self._stamps_lock = threading.Lock()

    def _receive(self, addr: str, request: spb.ReceiveMessageRequest) -> tuple[list[pb.Message], str | None]:
        messages, problem = super()._receive(addr, request)
        with self._stamps_lock:
            for m in messages:
                sp = m.system_properties
                self.stamps[sp.message_id].add(
                    sp.delivery_timestamp.ToMilliseconds() if sp.HasField("delivery_timestamp") else None
                )
        return messages, problem

    @property
    def record(self) -> GroupRecord:
        """The record of the one consumer group a phase runs."""
        return next(iter(self.records.values()))

    def received(self, to_wall: float) -> list[Receipt]:
        """Every delivery so far, its time in ms of time.time() (``to_wall``: time.time() - time.monotonic())."""
        out = []
        for record in self.records.values():
            with record.lock:
                out += [receipt(d, to_wall) for d in record.deliveries]
        return out

    def received_ids(self) -> set[str]:
        return set().union(*(r.delivered_ids() for r in self.records.values()))


def receipt(d: Delivery, to_wall: float) -> Receipt:
    return Receipt(d.message_id, (d.at + to_wall) * 1000, (d.queue_id, d.queue_offset), d.attempt)


def write_deliveries(
    path: Path,
    due_ms: Mapping[str, int],
    consumers: TimerConsumers,
    to_wall: float,
    columns: tuple[str, str] = ("due_ms", "late_ms"),
) -> None:
    """Every delivery, with the due time of the timers ``due_ms`` names (ms of time.time()) and how
    late it came; ``columns`` names those two (a transaction's: its commit answer, and since then)."""
    with open(path, "w") as f:
        f.write(f"message_id,{columns[0]},received_ms,{columns[1]},queue_id,queue_offset,attempt,addr\n")
        for record in consumers.records.values():
            with record.lock:
                deliveries = list(record.deliveries)
            for d in deliveries:
                due, at = due_ms.get(d.message_id), (d.at + to_wall) * 1000
                late = "" if due is None else f"{at - due:.1f}"
                f.write(f"{d.message_id},{due or ''},{at:.1f},{late},{d.queue_id},{d.queue_offset},{d.attempt},{d.addr}\n")


def route_of(h: Harness, topic: str) -> RouteCache:
    api = h.new_api()
    return RouteCache(lambda: api.master_grpc_addr_from_route(topic, GROUP), refresh_s=2.0)


def wait_received(consumers: TimerConsumers, wanted: Iterable[str], until_wall: float) -> float | None:
    """Until every id in ``wanted`` came or ``until_wall`` (time.time()) passed, then SETTLE_S more;
    when the last one came (time.time()), or None."""
    wanted = set(wanted)
    done = None
    while time.time() < until_wall:
        if wanted <= consumers.received_ids():
            done = time.time()
            break
        time.sleep(0.5)
    time.sleep(SETTLE_S)
    return done
