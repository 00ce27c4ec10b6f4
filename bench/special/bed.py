"""The test bed of the special-message phases: the running three-replica group (chaos/harness.py),
the options, and what every phase does on it (topics, a baseline, consumers, deliveries written)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.special.receiving import TimerConsumers, route_of, write_deliveries
from bench.special.sending import Sent, message_ids, send_all, send_requests
from brokers.config import BrokerConfig
from chaos.harness import Harness
from chaos.replicas import GROUP, BrokerNode
from testkit.procs import wait_until

QUEUES = 8
SEGMENT_BYTES = 64 * 1024 * 1024
TOPIC_TIMEOUT_S = 60.0


def note(text: str) -> None:
    print(f"[special] {text}", file=sys.stderr, flush=True)


@dataclass
class Bed:
    """The running group and what the phases share."""

    h: Harness
    args: argparse.Namespace
    details: dict = field(default_factory=dict)  # report.json only
    after_stop: list[Callable[[], dict]] = field(default_factory=list)  # more figures, from the stopped brokers' stores

    @property
    def to_wall(self) -> float:
        return time.time() - time.monotonic()

    def create_topic(self, name: str, message_type: str) -> None:
        """Over REST, as an operator would; then on every replica and in the route."""
        h = self.h
        with httpx.Client(base_url=h.controlplane.url, headers={"Authorization": f"Bearer {h.admin_token}"}, timeout=10) as c:
            c.post(
                "/api/v1/nameserver/topics",
                json={
                    "topicName": name,
                    "brokerNames": [GROUP],
                    "readQueueNums": QUEUES,
                    "writeQueueNums": QUEUES,
                    "attributes": {"message.type": message_type},
                },
            ).raise_for_status()

        def everywhere() -> bool:
            for n in h.nodes:
                path = n.root / "config" / "topics.json"
                topic = json.loads(path.read_text())["topicConfigTable"].get(name) if path.exists() else None
                if topic is None or topic.get("attributes", {}).get("message.type", "NORMAL") != message_type:
                    return False
            return h.api.route(name) is not None

        took = wait_until(everywhere, TOPIC_TIMEOUT_S, f"topic {name} ({message_type}) on every replica and in the route")
        h.note(f"topic {name} ({message_type}, {QUEUES} queues) ready in {took:.2f} s")

    def longest_log(self) -> Path:
        """The commit log folder of the replica whose log reaches furthest (read once they are stopped)."""
        node = max(self.h.nodes, key=lambda n: n.log_span()[1])
        return node.root / "commitlog"

    def brokers(self) -> dict[str, int]:
        """Name (the master's marked) -> pid of every running broker."""
        master = self.h.master_node()
        return {f"{n.name}{' (master)' if n is master else ''}": n.process.pid for n in self.h.nodes if n.process.alive()}

    def txn_timing(self) -> tuple[int, int]:
        """(transactionTimeOut, transactionCheckInterval) the brokers run with, ms."""
        timeout = self.args.txn_timeout_ms
        interval = self.args.txn_check_interval_ms
        return (
            BrokerConfig.transactionTimeOut if timeout is None else timeout,
            BrokerConfig.transactionCheckInterval if interval is None else interval,
        )

    def whole(self) -> bool:
        master = self.h.master_node()
        return master is not None and all(self.h.in_sync(n) for n in self.h.nodes if n is not master)

    def consumers(
        self, topic: str, group: str, invisible_s: float, kind: type[TimerConsumers] = TimerConsumers
    ) -> TimerConsumers:
        """A pop consumer group on ``topic`` (``kind``: TimerConsumers or a subclass), started."""
        c = kind(
            topic,
            QUEUES,
            [group],
            route_of(self.h, topic),
            batch=self.args.receive_batch,
            invisible_s=invisible_s,
            long_polling_s=self.args.long_polling_s,
        )
        c.start()
        return c

    @contextmanager
    def consuming(self, topic: str, group: str, invisible_s: float) -> Iterator[TimerConsumers]:
        """``consumers`` until the block ends."""
        c = self.consumers(topic, group, invisible_s)
        try:
            yield c
        finally:
            c.stop()

    def baseline(
        self, topic: str, message_type: str, normal_topic: str, id_prefix: str, count: int
    ) -> tuple[BrokerNode, bytes, Sent]:
        """The start of a throughput phase: its topic (``message_type``) and a NORMAL topic created, the
        master, a message body, and the baseline: ``count`` normal messages (ids ``id_prefix``...) to
        ``normal_topic`` from the phase's sender (the same batches and requests in flight), to the
        master. Returns (master, body, what the baseline got back)."""
        self.create_topic(topic, message_type)
        self.create_topic(normal_topic, "NORMAL")
        master = self.h.master_node()
        body = os.urandom(self.args.body_size)
        normal = send_all(
            master.grpc_addr,
            send_requests(normal_topic, message_ids(id_prefix, count), body, self.args.batch),
            self.args.senders,
            self.brokers(),
        )
        note(
            f"baseline: {len(normal.accepted)} normal messages in {normal.seconds:.2f} s = {normal.per_s:.0f}/s "
            f"(failures {dict(normal.failures)})"
        )
        return master, body, normal

    def write_txn_deliveries(self, name: str, committed: Mapping[str, float], consumers: TimerConsumers) -> None:
        """Every delivery, with its transaction's commit answer (ms of time.time()); the commits never
        received, in report.json."""
        at_ms = {m: int(at * 1000) for m, at in committed.items()}
        write_deliveries(self.h.run_dir / name, at_ms, consumers, self.to_wall, ("committed_ms", "after_ms"))
        never = sorted(set(committed) - consumers.received_ids())
        self.details[name.removesuffix(".csv").replace("-", "_") + "_never_received"] = never[:100]
