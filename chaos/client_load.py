"""The official RocketMQ client's processes (chaos/official_client.py) as the load of a chaos run:
chaos/faults.py's faults with an :class:`~chaos.official_client.EventLog` standing for
chaos.workload.Producer, and the figures read from the client's own events. Shared by
bench/client_failover.py and chaos/soak.py."""

from __future__ import annotations

import bisect
import sys
import time

from testkit.procs import Process, wait_until

from .faults import Kill9, SigStop
from .harness import Harness
from .official_client import EventLog


class ClientSide:
    """What a chaos/faults.py fault needs changed when the load is the official client's processes
    (an EventLog stands for chaos.workload.Producer): the send gaps are measured afterwards from the
    client's events, and the heal's start and end are kept (wall clock) to name phases."""

    heal_started: float | None = None
    healed: float | None = None

    def _longest_gap(self) -> float | None:
        return None

    def heal(self) -> None:
        self.heal_started = time.time()
        try:
            super().heal()
        finally:
            self.healed = time.time()


class ClientKill9(ClientSide, Kill9):
    pass


class ClientSigStop(ClientSide, SigStop):
    resumed: float | None = None

    def _probe_deposed(self) -> None:
        """SigStop.recover calls this right after SIGCONT: that moment is kept. The deposed master is
        not probed with raw stubs here; the load is the client's alone."""
        self.resumed = time.time()


def group_whole(h: Harness) -> bool:
    master = h.master_node()
    return master is not None and all(h.in_sync(n) for n in h.nodes if n is not master)


def longest_quiet(times: list[float], start: float, end: float) -> tuple[float, float]:
    """(the longest time within [start, end] without an event, when it began); ``times`` sorted."""
    lo, hi = bisect.bisect_right(times, start), bisect.bisect_left(times, end)
    marks = [start, *times[lo:hi], end]
    return max(((b - a, a) for a, b in zip(marks, marks[1:], strict=False)), default=(0.0, start))


def drain(producer: EventLog, consumer: EventLog, timeout_s: float) -> float | None:
    """Wait until every acknowledged id was delivered; the seconds that took, None on timeout."""
    acked = {e["id"] for e in producer.of("ack")}
    try:
        return round(
            wait_until(
                lambda: acked <= {e["id"] for e in consumer.of("delivery")},
                timeout_s,
                "every acknowledged message delivered",
                0.5,
            ),
            3,
        )
    except TimeoutError:
        return None


def stop_clients(clients: list[Process]) -> None:
    """Stop the client processes (each even when another fails to stop)."""
    for c in clients:
        try:
            c.stop()
        except Exception as exc:
            print(f"stopping {c.name}: {exc!r}", file=sys.stderr)
