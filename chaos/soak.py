"""``python -m chaos.soak --faults N``: a randomized schedule of faults against one replica group in
controller mode under the official RocketMQ client's load, then the checks and a report.

The bed: a Redis and a PostgreSQL of the soak's own (testkit/services.py, so that restarting them
touches nobody else), the control plane (uvicorn, a Celery worker, beat), three brokers with
allAckInSyncStateSet=true, and the official client's Producer and SimpleConsumer in processes of
their own (chaos/official_client.py), each given every replica's gRPC address.

The faults (``--kinds`` picks some; every kind comes once before any comes twice, in a seeded
random order, then they are drawn at random):

  kill9-master            kill -9 of the master; restarted, back as an in-sync slave
  kill9-slave             kill -9 of a slave; restarted
  sigstop-master          SIGSTOP of the master for 1.5 x its heartbeat timeout, then SIGCONT
  cut-ha-link             the HA sockets between the master and a slave destroyed, three times
  kill-with-controlplane  kill -9 of the master and of uvicorn at once; uvicorn back after 2 s
  kill-web                kill -9 of uvicorn; back after 1-3 s
  kill-worker             kill -9 of the Celery worker; back after 1-3 s
  kill-beat               kill -9 of Celery beat; back after 1-3 s
  redis-restart           the Redis server stopped (everything in it lost) and started again
  postgres-restart        PostgreSQL stopped (fast, or immediate: a crash) and started again
  pg-terminate            pg_terminate_backend of every connection to the control plane's database
  disk-full               one broker's store filesystem (a tmpfs of its own) filled; freed after
                          3 s; the broker repairs its store by itself (needs root for the mounts)
  disk-full-master        the same on the master: it steps down, repairs its store, follows
  partition-master-cp     real partitions (chaos/partition.py; every broker then runs in a network
  partition-slave-master  namespace of its own, testkit/netns.py, which needs root): the master from
  partition-cp-minority   the control plane, a slave from the master, the control plane from one
  partition-cp-majority   slave, the control plane from the master and a slave; then healed

Each fault is injected, recovered (an acknowledged send after it), healed (the group whole again:
a master, every slave in the SyncStateSet; after a Redis restart also the liveness record warm
again), and then the next comes after ``--settle-s``.

Figures (the last line printed is one JSON object, also in ``report.json``):
  faults                          faults injected
  acked_lost                      sends the client saw acknowledged that the final master does not
                                  hold (read back from its log at the end)
  acked_undelivered               acknowledged sends the consumer never received (drained at the end)
  masters_per_epoch_max           most masters any epoch had, in the controller's history or in the
                                  brokers' own reports (1 is right)
  logs_identical                  the replicas' commit logs byte-identical over their common span
  rto_median_s, rto_p99_s         per fault: the longest time without an acknowledged send from the
                                  fault until it was healed (counted from the fault)
  spurious_elections              elections (with or without a new master) committed while a fault
                                  of the control plane itself was in progress (kill-web/worker/beat,
                                  Redis, Postgres, pg-terminate, partition-cp-majority), plus any
                                  beyond the one a kill-with-controlplane needs
  control_plane_outage_depositions  of those, the ones that replaced the master
  burnt_epochs                    elections that found no master
  invariants_ok                   ``manage.py check_controller_invariants`` at the end
  failed_faults                   faults that did not recover or heal in time
  failed_sends_after_retries      the client's "fail" events: sends given up after its own retries
  failed_sends_while_writable     of those, the ones given up at a moment (the event's time) when a
                                  member of the controller's SyncStateSet was up: the last set the
                                  monitor saw by then (the whole group before its first view), less
                                  the replica a fault had taken out (killed, frozen or its store
                                  full: kill9-*, sigstop-master, kill-with-controlplane, disk-full,
                                  from the fault to its heal). Not counted: the only in-sync
                                  replica's disk full, the whole set down, a kill-with-controlplane
                                  until the control plane answered (no controller to elect anyone). Counted: a kill -9 of the
                                  master that the client's retries did not bridge (an in-sync slave
                                  could have been elected), a full master's disk while its slaves
                                  were in sync, any send lost to a control-plane fault alone.
                                  The first 20 with time, error, the members that were up and the
                                  fault (``first_failed_sends_while_writable``), and per fault kind
  truncations                     every cut of a commit log a broker logged (``log cut: cause=...``):
                                  node, time, cause, at, end, bytes, confirm, allowed, detail, and
                                  for a cut of more than 0 bytes the fault under way then (or null);
                                  ``truncations_by_cause`` counts them
  refused_cuts                    cuts a broker refused (``allowed=no``: acknowledged data at stake)
  guard_errors                    broker log lines carrying ``[acked-data-guard]``
  unreadable_cut_lines            lines announcing a cut that the parser cannot read (a format drift
                                  must not hide cuts; the first 5 in ``first_unreadable_cut_lines``)

The report (``report.json``, ``faults.jsonl``, ``rto.html``: RTO per fault, by kind) and every log
go to ``test-artifacts/soak/<time>/``. Exit code 0 when every check passed, 1 otherwise (``goals``:
0 acked_lost, acked_undelivered, failed_faults, failed_sends_while_writable, refused_cuts,
guard_errors, unreadable_cut_lines and unexpected, spurious or burnt elections; one master per epoch,
identical logs, the invariants clean; a figure the run never measured fails too).

    python -m chaos.soak --faults 100 [--seed 7] [--kinds kill9-master,redis-restart]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

from brokers.core.pop import QueueState
from brokers.grpc.forward import CACHE_S as FORWARD_ROUTE_CACHE_S
from brokers.store.offsets import ConsumerOffsets
from testkit.controlplane import clear_redis_prefix, fresh_database, standalone_env
from testkit.netns import Network
from testkit.procs import ARTIFACTS, Process, wait_until
from testkit.services import OwnedPostgres, OwnedRedis
from testkit.stats import rounded_percentile

from .checks import (
    BrokerLogScan,
    ReplicaOut,
    compare_logs,
    elections,
    failed_while_writable,
    masters_per_epoch_in_history,
    masters_per_epoch_reported,
    scan_broker_log,
    wall_time,
)
from .client_load import ClientKill9, ClientSide, ClientSigStop, drain, group_whole, longest_quiet, stop_clients
from .faults import CutHaLink, Fault, FaultRecord, KillWithControlPlane
from .harness import GROUP, QUEUES, TOPIC, Harness
from .official_client import EventLog, client_process
from .partition import SHAPES
from .replicas import BrokerNode, GroupSettings
from .workload import Producer, read_back

CONSUMER_GROUP = "soak"
# A replica that forwards sends learns of a new master from the controller's push, or else from the
# group's route, asked again after this long (brokers/grpc/forward.py).
ROUTE_LAG_S = FORWARD_ROUTE_CACHE_S
CONTROL_PLANE_KINDS = ("kill-web", "kill-worker", "kill-beat", "redis-restart", "postgres-restart", "pg-terminate")
KINDS = (
    "kill9-master",
    "kill9-slave",
    "sigstop-master",
    "cut-ha-link",
    "kill-with-controlplane",
    *CONTROL_PLANE_KINDS,
    "disk-full",
    "disk-full-master",
)
PARTITIONS = {  # soak kind -> chaos/partition.py shape
    "partition-master-cp": "master-from-controlplane",
    "partition-slave-master": "slave-from-master",
    "partition-cp-minority": "controlplane-from-minority",
    "partition-cp-majority": "controlplane-from-majority",
}
KINDS = (*KINDS, *PARTITIONS)
CONTROL_PLANE_KINDS = (*CONTROL_PLANE_KINDS, "partition-cp-majority")  # the control plane's own outage
MASTER_FAULTS = ("kill9-master", "sigstop-master", "kill-with-controlplane", "partition-master-cp")  # one election each
DISK_FULL_KINDS = ("disk-full", "disk-full-master")
NEEDS_ROOT = (*DISK_FULL_KINDS, *PARTITIONS)
# the faults that leave the replica they hit unable to take a write (killed, frozen, its store full)
# from the fault until its heal; a partition or a cut HA link leaves every replica able to
REPLICA_OUT_KINDS = ("kill9-master", "kill9-slave", "sigstop-master", "kill-with-controlplane", *DISK_FULL_KINDS)
FIRST_FAILED_SENDS = 20
START_TIMEOUT_S = 90.0
WHOLE_TIMEOUT_S = 90.0
HEARING_WARM_S = 11.0  # the liveness record's warm-up after a Redis restart (10 s) and a beat tick
STORE_TMPFS = "256m"


# --- the faults the soak adds to chaos/faults.py's -------------------------------------------------------


class Soak:
    """What the soak's own faults reach beyond a Harness: its servers, a random source, the load."""

    def __init__(self, h: Harness, redis: OwnedRedis, pg: OwnedPostgres, database: str, rng: random.Random):
        self.h, self.redis, self.pg, self.database, self.rng = h, redis, pg, database, rng
        self.tmpfs: dict[str, Path] = {}  # node name -> its store's mount point (disk-full)
        self.prober = Producer(TOPIC, lambda: None, id_prefix="P")  # direct probes of deposed masters


class SoakFault(ClientSide, Fault):
    """A fault that keeps the master: recovered once a send is acknowledged after it; healed once the
    group is whole again."""

    changes_master = False

    def __init__(self, soak: Soak, producer: EventLog):
        super().__init__(soak.h, producer)
        self.soak = soak

    def recover(self) -> None:
        r = self.record
        wait_until(lambda: self.producer.first_ack_after(r.at), 45.0, "an acknowledged send after the fault")
        r.rto_s = self.producer.first_ack_after(r.at).at - r.at

    def heal(self) -> None:
        self.heal_started = time.time()
        try:
            started = time.monotonic()
            self.mend()
            wait_until(lambda: group_whole(self.h), WHOLE_TIMEOUT_S, "the group whole again")
            self.record.heal_s = time.monotonic() - started
        finally:
            self.healed = time.time()

    def mend(self) -> None:
        """What the heal repairs before the group can be whole (nothing, by default)."""

    def _begin_on_master(self, what: str) -> FaultRecord:
        master = self._master()
        self.h.note(f"{self.kind}: {what}")
        return self._begin(master, master)


class KillSlave(SoakFault):
    kind = "kill9-slave"

    def inject(self) -> None:
        master = self._master()
        slave = self.soak.rng.choice([n for n in self.h.nodes if n is not master])
        self._begin(slave, master)
        slave.process.kill9()
        self.h.note(f"kill -9 of the slave {slave.name}")

    def mend(self) -> None:
        self.target.process.start()
        wait_until(lambda: self.h.rejoined_as_slave(self.target), WHOLE_TIMEOUT_S, f"{self.target.name} back in sync")


class ClientCutHaLink(ClientSide, CutHaLink):
    """The HA sockets destroyed (``ss -K``): the master changes in no case."""


class ClientKillWithControlPlane(ClientSide, KillWithControlPlane):
    pass


class ControlPlaneKill(SoakFault):
    """kill -9 of one control-plane process; started again after 1-3 s, back once it answers (the web
    server), takes tasks (the worker) or runs (beat)."""

    def __init__(self, soak: Soak, producer: EventLog, which: str):
        super().__init__(soak, producer)
        self.which = which
        self.kind = f"kill-{which}"

    def inject(self) -> None:
        cp = self.h.controlplane
        process = {"web": cp.web, "worker": cp.worker, "beat": cp.beat}[self.which]
        self._begin_on_master(f"kill -9 of {process.name}")
        process.kill9()
        time.sleep(self.soak.rng.uniform(1.0, 3.0))
        if self.which == "web":
            cp.start_web()
        else:
            process.start()
            # a worker counts as back once it takes tasks (elections after a closed socket are its
            # tasks): under load it starts in seconds, and the next fault must not fall in that gap
            back = cp.worker_ready if self.which == "worker" else process.check_alive
            wait_until(back, 30.0, f"{process.name} running again")
        self.h.note(f"{process.name} started again {time.monotonic() - self.record.at:.2f} s after the kill")


class RedisRestart(SoakFault):
    kind = "redis-restart"

    def inject(self) -> None:
        self._begin_on_master("Redis stopped, everything in it lost")
        self.soak.redis.restart(down_s=1.0)
        self.restarted = time.monotonic()
        self.h.note(f"Redis answering again {self.restarted - self.record.at:.2f} s after the stop")

    def mend(self) -> None:
        """The heal lasts until the liveness record is warm again: elections decided in the warm-up
        are the ones a restart could make spurious, so they belong to this fault's window."""
        time.sleep(max(0.0, self.restarted + HEARING_WARM_S - time.monotonic()))


class PostgresRestart(SoakFault):
    kind = "postgres-restart"

    def inject(self) -> None:
        mode = self.soak.rng.choice(("fast", "immediate"))
        self._begin_on_master(f"PostgreSQL stopped ({mode})")
        self.soak.pg.restart(mode=mode, down_s=1.0)
        self.h.note(f"PostgreSQL answering again {time.monotonic() - self.record.at:.2f} s after the stop")


class PgTerminate(SoakFault):
    kind = "pg-terminate"

    def inject(self) -> None:
        self._begin_on_master("pg_terminate_backend of the control plane's connections")
        n = self.soak.pg.terminate_backends(self.soak.database)
        self.h.note(f"{n} connection(s) terminated")


class DiskFull(SoakFault):
    """One broker's store filesystem filled to the last byte; after ``hold_s`` the ballast is removed.
    A master whose write fails steps down at once (the controller elects an in-sync replica: the
    election and the RTO count it); the broker repairs its store by itself once its disk takes writes
    and comes back as a slave (or as master, when nobody else could be elected). Nothing restarts it:
    a broker that does not come back by itself fails the fault."""

    kind = "disk-full"
    hold_s = 3.0

    def _target(self, master):
        return self.soak.rng.choice(self.h.nodes)

    # What a master whose store failed logs as it steps down, and once it is back (brokers/control/replicas.py).
    STEPPING_DOWN = b"the store stopped taking writes: stepping down"
    BACK = b"back after the store failure as "

    def inject(self) -> None:
        master = self._master()
        node = self._target(master)
        self._begin(node, master)
        self.log_from = node.log.stat().st_size if node.log.exists() else 0
        self.ballast = self.soak.tmpfs[node.name] / "ballast"
        filled = fill(self.ballast)
        self.h.note(f"{node.name}'s store filled ({filled >> 20} MiB of ballast)")

    def recover(self) -> None:
        """A full master acknowledges nothing until the heal: recovery is only looked for afterwards."""
        time.sleep(self.hold_s)

    def _logged(self, what: bytes) -> bool:
        with open(self.target.log, "rb") as f:
            f.seek(self.log_from)
            return what in f.read()

    def mend(self) -> None:
        node = self.target
        self.ballast.unlink(missing_ok=True)
        self.h.note(f"ballast removed from {node.name}'s store")
        if self._logged(self.STEPPING_DOWN):
            # A master that stepped down is mended once it is back (its election, delayed while the
            # control plane could not hear, belongs to this fault, not to the next one).
            wait_until(lambda: self._logged(self.BACK), WHOLE_TIMEOUT_S, f"{node.name} back after stepping down")
            # Back as master: nobody was elected (no replica in sync, or a control plane that could
            # not hear most brokers left the master to expiry, controlplane/blindness.py), and none was due.
            self.resumed_as_master = self._logged(self.BACK + b"MASTER")
        wait_until(lambda: self.h.rejoined_as_slave(node) or self.h.master_node() is node, WHOLE_TIMEOUT_S, f"{node.name} back")


class DiskFullMaster(DiskFull):
    """``disk-full`` on the master, every time: its step-down (issue 33) is run on every soak, not
    only when the draw falls on it."""

    kind = "disk-full-master"

    def _target(self, master):
        return master


class ClientLoad:
    """The official client's events for what a fault waits on, and a chaos.workload.Producer (never
    started) for what it sends itself: the direct probes of a deposed master (chaos/partition.py),
    whose acks are checked at the end like the client's."""

    def __init__(self, events: EventLog, prober: Producer):
        self.events, self.prober = events, prober

    def first_ack_after(self, t: float, exclude_node: str | None = None):
        return self.events.first_ack_after(t, exclude_node)

    def acks_snapshot(self) -> dict:
        return self.events.acks_snapshot() | self.prober.acks_snapshot()

    def probe(self, node: str, addr: str, count: int) -> dict[str, int]:
        return self.prober.probe(node, addr, count)


def fill(path: Path, chunk: int = 1 << 20) -> int:
    """Write zeros to ``path`` until its filesystem is full; returns the bytes written."""
    written = 0
    block = b"\0" * chunk
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(block)
            except OSError:
                if chunk == 1:
                    return written
                block = block[: len(block) // 2]
                chunk = len(block)


def make_fault(kind: str, soak: Soak, producer: EventLog) -> Fault:
    h = soak.h
    if kind == "kill9-master":
        return ClientKill9(h, producer)
    if kind == "sigstop-master":
        return ClientSigStop(h, producer)
    if kind == "kill9-slave":
        return KillSlave(soak, producer)
    if kind == "cut-ha-link":
        master = h.master_node()
        return ClientCutHaLink(h, producer, soak.rng.choice([n for n in h.nodes if n is not master]))
    if kind == "kill-with-controlplane":
        return ClientKillWithControlPlane(h, producer)
    if kind.startswith("kill-"):
        return ControlPlaneKill(soak, producer, kind.removeprefix("kill-"))
    if kind == "redis-restart":
        return RedisRestart(soak, producer)
    if kind == "postgres-restart":
        return PostgresRestart(soak, producer)
    if kind == "pg-terminate":
        return PgTerminate(soak, producer)
    if kind == "disk-full":
        return DiskFull(soak, producer)
    if kind == "disk-full-master":
        return DiskFullMaster(soak, producer)
    if kind in PARTITIONS:
        shape = SHAPES[PARTITIONS[kind]]
        return type(f"Client{shape.__name__}", (ClientSide, shape), {})(h, ClientLoad(producer, soak.prober))
    raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(KINDS)}")


def schedule(kinds: list[str], n: int, rng: random.Random) -> list[str]:
    """Every kind once (shuffled) before any twice, then random draws; ``n`` in all."""
    first = list(kinds)
    rng.shuffle(first)
    return (first + [rng.choice(kinds) for _ in range(max(0, n - len(first)))])[:n]


# --- figures (pure) --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One fault as the report counts it; times are time.time()."""

    kind: str
    node: str
    at: float
    healed: float
    rto_s: float | None = None
    on_master: bool = False  # the broker hit was the master
    elections: int = 0  # election rows committed in [at, healed]
    new_masters: int = 0  # of those, the ones that moved the master
    no_master: int = 0  # of those, the ones that found nobody
    problems: list[str] = field(default_factory=list)
    controller_back: float | None = None  # master and control plane killed together: when it answered again
    new_master_at: float | None = None  # the first election in [at, healed] that found a new master
    resumed_as_master: bool = False  # a full master that stepped down came back as master: nobody was elected

    @property
    def expected_elections(self) -> int:
        """A fault of the master needs one; a full disk does when it hit the master (its step-down is
        what moves the writes), unless the master came back as master: then nobody was elected."""
        if self.kind in MASTER_FAULTS:
            return 1
        return int(self.kind in DISK_FULL_KINDS and self.on_master and not self.resumed_as_master)

    @property
    def spurious(self) -> int:
        if self.kind in CONTROL_PLANE_KINDS:
            return self.elections
        return max(0, self.elections - 1) if self.kind == "kill-with-controlplane" else 0

    @property
    def depositions(self) -> int:
        if self.kind in CONTROL_PLANE_KINDS:
            return self.new_masters
        return max(0, self.new_masters - 1) if self.kind == "kill-with-controlplane" else 0


def attribute_elections(outcomes: list[Outcome], history: list[dict]) -> None:
    """Count each election row (successful or not) against the fault whose window it fell in."""
    rows = [t for t in history if t["kind"] == "elect"]
    for o in outcomes:
        for t in rows:
            at = wall_time(t["createdAt"])
            if o.at <= at <= o.healed:
                o.elections += 1
                found = t.get("responseCode", 0) == 0 and t.get("newMasterBrokerId") is not None
                o.new_masters += found
                o.no_master += not found
                if found and o.new_master_at is None:
                    o.new_master_at = at


def rto(ack_times: list[float], o: Outcome) -> float:
    return round(longest_quiet(ack_times, o.at, o.healed)[0], 3)


HEADLINE = ("acked_lost", "acked_undelivered", "masters_per_epoch_max", "logs_identical")


def summary(outcomes: list[Outcome], checks: dict) -> dict:
    rtos = [o.rto_s for o in outcomes if o.rto_s is not None]
    return {
        "faults": len(outcomes),
        "faults_by_kind": dict(Counter(o.kind for o in outcomes)),
        **{k: checks.get(k) for k in HEADLINE},
        "rto_median_s": rounded_percentile(rtos, 50),
        "rto_p99_s": rounded_percentile(rtos, 99),
        "rto_max_s": max(rtos, default=None),
        "rto_median_s_by_kind": {
            k: rounded_percentile([o.rto_s for o in outcomes if o.kind == k and o.rto_s is not None], 50)
            for k in sorted({o.kind for o in outcomes})
        },
        "spurious_elections": sum(o.spurious for o in outcomes),
        "control_plane_outage_depositions": sum(o.depositions for o in outcomes),
        "burnt_epochs": sum(o.no_master for o in outcomes),
        "expected_elections": sum(o.expected_elections for o in outcomes),
        "unexpected_elections": sum(max(0, o.elections - o.expected_elections) for o in outcomes),
        "failed_faults": sum(1 for o in outcomes if o.problems),
        **{k: v for k, v in checks.items() if k not in HEADLINE},
    }


MUST_BE_ZERO = (
    "acked_lost",
    "acked_undelivered",
    "failed_faults",
    "failed_sends_while_writable",
    "refused_cuts",
    "guard_errors",
    "unreadable_cut_lines",
    "spurious_elections",
    "control_plane_outage_depositions",
    "burnt_epochs",
    "unexpected_elections",
)


@dataclass(frozen=True)
class Goal:
    name: str
    met: bool
    failure: str  # how failures() names it when it is not met


def goals(s: dict) -> list[Goal]:
    """Every check of a run's figures: the one rule behind the exit code of ``python -m chaos.soak``
    and of bench/soak.py (whose goals these are). A figure that is missing (the run stopped before
    it was measured) fails its goal: a check cannot pass by not running."""
    masters, invariants, logs = s.get("masters_per_epoch_max"), s.get("invariants_ok"), s.get("logs_identical")
    checker = "failed" if invariants is False else "not run"
    return [
        *(Goal(f"{k}_zero", s.get(k) == 0, f"{k} {s.get(k)}") for k in MUST_BE_ZERO),
        Goal("one_master_per_epoch", masters == 1, f"masters_per_epoch_max {masters}"),
        Goal("logs_identical", logs is True, "commit logs differ" if logs is False else "commit logs not compared"),
        Goal("invariants_ok", invariants is True, f"check_controller_invariants {checker}"),
    ]


def failures(s: dict) -> list[str]:
    return [g.failure for g in goals(s) if not g.met] + list(s.get("problems", []))


def fault_at(outcomes: Sequence[Outcome], t: float) -> dict | None:
    """The fault whose window (from the fault to its heal) holds ``t``: its number (from 1), kind
    and the broker it hit."""
    return next(({"n": i, "kind": o.kind, "node": o.node} for i, o in enumerate(outcomes, 1) if o.at <= t <= o.healed), None)


def cut_figures(scans: Iterable[BrokerLogScan], outcomes: Sequence[Outcome]) -> dict:
    """Every cut of a commit log the brokers logged, oldest first, each one that removed bytes with
    the fault under way when it came (None between faults)."""
    scans = list(scans)
    cuts = sorted((c for scan in scans for c in scan.cuts), key=lambda c: c.t)
    unreadable = [line for scan in scans for line in scan.unreadable]
    return {
        "truncations": [asdict(c) | {"fault": fault_at(outcomes, c.t) if c.bytes > 0 else None} for c in cuts],
        "truncations_by_cause": dict(Counter(c.cause for c in cuts)),
        "refused_cuts": sum(not c.allowed for c in cuts),
        "guard_errors": sum(scan.guard_errors for scan in scans),
        "unreadable_cut_lines": len(unreadable),
        "first_unreadable_cut_lines": unreadable[:5],
    }


def replicas_out(outcomes: Iterable[Outcome]) -> list[ReplicaOut]:
    """The replica each fault of a broker left unable to write, from the fault to its heal."""
    return [ReplicaOut(o.node, o.at, o.healed) for o in outcomes if o.kind in REPLICA_OUT_KINDS]


def unelectable(outcomes: Iterable[Outcome]) -> list[tuple[float, float]]:
    """The spans in which no replica could take a write: a kill-with-controlplane from the kill until
    the control plane answered again, and on until its election of a new master was known to the
    replicas that forward sends (ROUTE_LAG_S after it). The controller back elects only once the dead
    master's heartbeats have lapsed, as RocketMQ's does: it never heard the master die."""
    return [
        (o.at, max(o.controller_back, o.new_master_at + ROUTE_LAG_S if o.new_master_at is not None else 0.0))
        for o in outcomes
        if o.controller_back is not None
    ]


def failed_send_figures(
    fails: Sequence[dict], sync_state_sets: Sequence[tuple[float, frozenset[str]]], outcomes: Sequence[Outcome]
) -> dict:
    """The sends the client gave up on after its own retries, and those of them given up while a
    member of the SyncStateSet could have taken them (chaos.checks.failed_while_writable), with the
    first few and the fault each came in."""
    counted = failed_while_writable(fails, sync_state_sets, replicas_out(outcomes), unelectable(outcomes))
    faults = [fault_at(outcomes, f["t"]) for f in counted]
    return {
        "failed_sends_after_retries": len(fails),
        "failed_sends_while_writable": len(counted),
        "failed_sends_while_writable_by_fault": dict(Counter(fault["kind"] if fault else "between faults" for fault in faults)),
        "first_failed_sends_while_writable": [
            {"t": f["t"], "id": f.get("id"), "error": f.get("error"), "writable": f["writable"], "fault": fault}
            for f, fault in zip(counted[:FIRST_FAILED_SENDS], faults, strict=False)
        ],
    }


def rto_plot(outcomes: list[Outcome], path: Path) -> None:
    """RTO per fault, in order, one colour per kind: a self-contained HTML page (plotly)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for kind in sorted({o.kind for o in outcomes}):
        idx = [i + 1 for i, o in enumerate(outcomes) if o.kind == kind]
        fig.add_trace(go.Bar(x=idx, y=[outcomes[i - 1].rto_s for i in idx], name=kind))
    fig.update_layout(
        title="RTO per fault: the longest time without an acknowledged send, from the fault to its heal",
        xaxis_title="fault #",
        yaxis_title="seconds",
        barmode="overlay",
    )
    fig.write_html(path, include_plotlyjs=True, full_html=True)


# --- the run ---------------------------------------------------------------------------------------------


def mount_stores(nodes: list[BrokerNode]) -> dict[str, Path]:
    """A tmpfs of its own under each broker's store (disk-full fills one)."""
    mounted: dict[str, Path] = {}
    for n in nodes:
        n.root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STORE_TMPFS}", "tmpfs", str(n.root)], check=True)
        mounted[n.name] = n.root
    return mounted


def unmount(points: dict[str, Path]) -> None:
    for name, point in points.items():
        keep = point.parent / f"{name}-store"
        try:
            shutil.copytree(point, keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("ballast"))
        except OSError as exc:
            print(f"keeping {name}'s store: {exc!r}", file=sys.stderr)
        subprocess.run(["umount", "-l", str(point)], check=False)


def run(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    rng = random.Random(args.seed)
    kinds = args.kinds
    notes: list[str] = []
    if os.geteuid() != 0:
        dropped = [k for k in kinds if k in NEEDS_ROOT]
        kinds = [k for k in kinds if k not in NEEDS_ROOT]
        if dropped:
            notes.append(f"not root: {', '.join(dropped)} left out (they mount a tmpfs per broker)")
            print(f"soak: {notes[-1]}", file=sys.stderr)
    plan = schedule(kinds, args.faults, rng)
    run_dir = args.run_dir or ARTIFACTS / "soak" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=True)
    logs = run_dir / "logs"
    outcomes: list[Outcome] = []
    checks: dict = {"problems": [], "notes": notes, "seed": args.seed}
    clients: list[Process] = []
    producer_log, consumer_log = EventLog(run_dir / "producer.jsonl"), EventLog(run_dir / "consumer.jsonl")
    mounted: dict[str, Path] = {}
    with OwnedRedis(run_dir / "redis") as redis, OwnedPostgres(run_dir / "postgres") as pg:
        database = "soak"
        env = standalone_env("soak")
        env.update(DATABASE_URL=pg.url(database), REDIS_URL=redis.url, REDIS_KEY_PREFIX="soak:")
        fresh_database(env)
        clear_redis_prefix(env)
        settings = GroupSettings(replicas=3, all_ack=True, heartbeat_timeout_ms=args.heartbeat_timeout_ms)
        network = Network() if any(k in PARTITIONS for k in kinds) else None
        h = Harness(settings, run_dir, env, scan_interval_ms=1000, verbose=not args.quiet, network=network)
        soak = Soak(h, redis, pg, database, rng)
        try:
            if any(k in DISK_FULL_KINDS for k in kinds):
                mounted = soak.tmpfs = mount_stores(h.nodes)
            h.start()
            access = ";".join(n.grpc_addr for n in h.nodes)
            common = ("--access", access, "--topic", TOPIC)
            consumer = client_process(
                "consume", "client-consumer", logs, env, *common, "--group", CONSUMER_GROUP, "--out", str(consumer_log.path)
            )
            producer = client_process(
                "produce", "client-producer", logs, env, *common, "--out", str(producer_log.path), "--interval-ms", "5"
            )
            clients += [consumer.start(), producer.start()]
            wait_until(lambda: producer.check_alive() and producer_log.of("ack"), START_TIMEOUT_S, "the client's first ack")
            wait_until(lambda: consumer.check_alive() and consumer_log.of("delivery"), START_TIMEOUT_S, "the first delivery")
            h.note(f"official client load running; {len(plan)} faults: {dict(Counter(plan))}")
            with open(run_dir / "faults.jsonl", "w") as record_file:
                for i, kind in enumerate(plan, 1):
                    for c in clients:
                        c.check_alive()
                    outcome = inject_one(make_fault(kind, soak, producer_log), kind, producer_log)
                    outcomes.append(outcome)
                    record_file.write(json.dumps(outcome.__dict__) + "\n")
                    record_file.flush()
                    print(
                        f"soak fault {i}/{len(plan)} {kind} on {outcome.node}: rto {outcome.rto_s} s"
                        + (f", problems {outcome.problems}" if outcome.problems else ""),
                        file=sys.stderr,
                        flush=True,
                    )
                    time.sleep(args.settle_s)
            producer.stop()
            h.note(f"producer stopped: {len(producer_log.of('ack'))} acknowledged; draining the consumer")
            drained = drain(producer_log, consumer_log, args.drain_s)
            consumer.stop()
            checks["drain_s"] = drained
            final_checks(h, producer_log, consumer_log, soak.prober, outcomes, checks)
        except (RuntimeError, TimeoutError, OSError, subprocess.CalledProcessError) as exc:
            checks["problems"].append(f"the soak stopped early: {exc!r}")
        finally:
            stop_clients(clients)
            h.stop()
            unmount(mounted)
            soak.prober.stubs.close()
            if network is not None:
                network.close()
    # read from what the run left, so that they are there even when it stopped early
    checks |= cut_figures(scan_broker_logs(h.nodes), outcomes)
    checks |= failed_send_figures(producer_log.of("fail"), sync_state_sets(h), outcomes)
    checks["elapsed_s"] = round(time.monotonic() - started, 1)
    checks["run_dir"] = str(run_dir)
    out = summary(outcomes, checks)
    out["failures"] = failures(out)
    out["ok"] = not out["failures"]
    (run_dir / "report.json").write_text(json.dumps(out, indent=2) + "\n")
    # written as the faults came (progress), now again with the elections each one's window held
    (run_dir / "faults.jsonl").write_text("".join(json.dumps(o.__dict__) + "\n" for o in outcomes))
    if outcomes:
        rto_plot(outcomes, run_dir / "rto.html")
    return out


UNDELIVERED_SHOWN = 5


def undelivered_detail(
    missing: Sequence[dict], where: dict[str, tuple[int, int]], nodes: Sequence[BrokerNode], outcomes: Sequence[Outcome]
) -> list[str]:
    """Where the first acknowledged messages the consumer never received stand: the fault under way
    at the acknowledgement, the queue and offset the final master holds each at, and the consumer
    group's state of that queue on every replica (its persisted pop table, read with the brokers
    stopped). A CI log then says which rule let the message go."""
    lines = []
    for e in missing[:UNDELIVERED_SHOWN]:
        fault = fault_at(outcomes, e["t"])
        place = where.get(e["msg_id"])
        head = f"undelivered {e['id']} (acknowledged during {fault['kind'] + ' #' + str(fault['n']) if fault else 'no fault'})"
        if place is None:
            lines.append(f"{head}: not served by the final master")
            continue
        queue_id, offset = place
        states = "; ".join(f"{n.name}: {pop_state_of(n, queue_id, offset)}" for n in nodes)
        lines.append(f"{head} at queue {queue_id} offset {offset}: {states}")
    return lines


def pop_state_of(node: BrokerNode, queue_id: int, offset: int) -> str:
    """What ``node``'s persisted pop table says of the consumer group's ``offset`` in ``queue_id``."""
    path = node.root / "config" / "consumerOffset.json"
    try:
        raw = json.loads(path.read_text()).get("popTable", {}).get(ConsumerOffsets.key(CONSUMER_GROUP, TOPIC, queue_id))
        q = None if raw is None else QueueState.from_wire(raw)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return f"no pop table ({exc.__class__.__name__})"
    if q is None:
        return "the group has no state for the queue"
    if offset in q.in_flight:
        state = f"in flight (attempt {q.in_flight[offset].attempt})"
    elif offset in q.done:
        state = "done"
    elif offset < q.acked_below:
        state = "below ackedBelow"
    elif offset >= q.pop_offset:
        state = "not popped yet"
    else:
        state = "popped, neither in flight nor done"
    return f"popOffset {q.pop_offset} ackedBelow {q.acked_below}: {state}"


def scan_broker_logs(nodes: list[BrokerNode]) -> list[BrokerLogScan]:
    """Each broker's log file(s) (``logs/broker-<node>.log``, and any rotated ``.log.N``), scanned for
    cuts of its commit log and guard lines."""
    scans = []
    for n in nodes:
        log = n.process.log_path
        for path in sorted(log.parent.glob(f"{log.name}*")):
            with open(path, encoding="utf-8", errors="replace") as f:
                scans.append(scan_broker_log(n.name, f))
    return scans


def sync_state_sets(h: Harness) -> list[tuple[float, frozenset[str]]]:
    """The controller's SyncStateSet through the run as the monitor saw it change (wall clock, node
    names), oldest first; before its first view the whole group (the harness starts it whole)."""
    wall_minus_monotonic = time.time() - time.monotonic()
    names = {n.addr: n.name for n in h.nodes}
    timeline = [(float("-inf"), frozenset(names.values()))]
    for view in h.monitor.views if h.monitor is not None else []:
        members = frozenset(names.get(view.info.members.get(i, ""), f"broker {i}") for i in view.info.sync_state_set)
        timeline.append((view.at + wall_minus_monotonic, members))
    return timeline


def inject_one(fault: Fault, kind: str, producer_log: EventLog) -> Outcome:
    fault.run()
    r = fault.record
    healed = getattr(fault, "healed", None) or time.time()
    outcome = Outcome(kind, r.node, r.at_wall, healed, on_master=r.node == r.old_master, problems=list(r.problems))
    outcome.controller_back = getattr(fault, "controlplane_back", None)
    outcome.resumed_as_master = getattr(fault, "resumed_as_master", False)
    outcome.rto_s = rto(sorted(e["t"] for e in producer_log.of("ack")), outcome)
    return outcome


def final_checks(
    h: Harness, producer_log: EventLog, consumer_log: EventLog, prober: Producer, outcomes: list[Outcome], checks: dict
) -> None:
    """Converge, read everything back from the master, compare the logs, count the elections."""
    acked = {e["id"] for e in producer_log.of("ack")}
    delivered = {e["id"] for e in consumer_log.of("delivery")}
    where: dict[str, tuple[int, int]] = {}  # message id -> (queue id, queue offset) on the final master
    checks["acked"], checks["delivered"] = len(acked), len(delivered)
    checks["acked_undelivered"] = len(acked - delivered)
    try:
        wait_until(h.converged, 60.0, "every replica at the same max offset", interval_s=0.25)
    except TimeoutError as exc:
        checks["problems"].append(f"drain: {exc}: {h.levels()}")
    master = h.master_node()
    if master is None:
        checks["problems"].append("no master at the end")
    else:
        try:
            received = read_back(master.grpc_addr, TOPIC, QUEUES, timeout_s=300.0)
            where = {m.message_id: (m.queue_id, m.queue_offset) for m in received}
            stored = set(where)
            lost = sorted(e["id"] for e in producer_log.of("ack") if e["msg_id"] not in stored)
            probes = prober.acks_snapshot()  # probes a deposed master acknowledged must be there too
            lost += sorted(i for i in probes if i not in stored)
            checks["acked_lost"], checks["first_lost"] = len(lost), lost[:10]
            checks["probes_acked"] = len(probes)
        except (RuntimeError, TimeoutError, grpc.RpcError, grpc.FutureTimeoutError) as exc:
            checks["problems"].append(f"reading back from {master.name} failed: {exc!r}")
    history = election_rows(h.env["DATABASE_URL"])
    (h.run_dir / "elections.json").write_text(json.dumps(history, indent=2) + "\n")
    attribute_elections(outcomes, history)
    per_epoch = masters_per_epoch_in_history(history)
    reported: dict = {}
    if h.monitor is not None:
        h.monitor.stop()
        reported = masters_per_epoch_reported(h.monitor.reported())
    checks["elections"] = len(elections(history))
    checks["masters_per_epoch_max"] = max((len(m) for m in [*per_epoch.values(), *reported.values()]), default=0)
    checker = h.controlplane.manage("check_controller_invariants", GROUP, check=False)
    checks["invariants_ok"] = checker.returncode == 0
    if checker.returncode:
        checks["problems"].append(f"check_controller_invariants: {(checker.stdout + checker.stderr).strip()[:500]}")
    h.stop_brokers()
    if checks["acked_undelivered"]:
        missing = [e for e in producer_log.of("ack") if e["id"] not in delivered]
        checks["problems"] += undelivered_detail(missing, where, h.nodes, outcomes)
    logs = compare_logs(
        {n.name: n.log_span() for n in h.nodes}, lambda name, lo, hi: next(n for n in h.nodes if n.name == name).read_log(lo, hi)
    )
    checks["logs_identical"] = logs.identical
    checks["logs_compared_bytes"] = logs.compared_bytes


def election_rows(database_url: str) -> list[dict]:
    """Every election row of the group, in the REST history's shape: read from the soak's own
    database, as the history endpoint pages at most 1000 transitions of every kind."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT new_master_broker_id, new_master_epoch, response_code, trigger, created_at FROM controlplane_transition "
            "WHERE broker_name = %s AND kind = 'elect' ORDER BY id",
            (GROUP,),
        ).fetchall()
    return [
        {
            "kind": "elect",
            "newMasterBrokerId": broker_id,
            "newMasterEpoch": epoch,
            "responseCode": code,
            "trigger": trigger,
            "createdAt": created.isoformat(),
        }
        for broker_id, epoch, code, trigger, created in rows
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", type=int, default=100, help="how many faults (default 100)")
    p.add_argument("--seed", type=int, default=None, help="the schedule's random seed (default: random, printed)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated fault kinds (default all: {','.join(KINDS)})")
    p.add_argument("--settle-s", type=float, default=1.0, help="load on the whole group between faults (default 1)")
    p.add_argument("--drain-s", type=float, default=120.0, help="how long the consumer may take to drain at the end")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=3000, help="controllerHeartBeatTimeoutMills")
    p.add_argument("--run-dir", type=Path)
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    a.kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    unknown = [k for k in a.kinds if k not in KINDS]
    if unknown or not a.kinds:
        p.error(f"unknown fault kind(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(KINDS)}")
    if a.faults < 1:
        p.error("--faults must be at least 1")
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    return a


def _terminate(signum, frame):  # SIGTERM: the same clean-up as Ctrl-C
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    print(f"soak: {args.faults} faults, seed {args.seed}", file=sys.stderr)
    try:
        out = run(args)
    except KeyboardInterrupt:
        print("interrupted: every process the soak started has been stopped", file=sys.stderr)
        return 130
    return finish(out)


def finish(out: dict) -> int:
    """Print the failures and the report's JSON line (the last line); the exit code: 0 when no check
    failed (``failures``), 1 otherwise. bench/soak.py ends the same way."""
    for f in out["failures"]:
        print(f"soak FAILED: {f}", file=sys.stderr)
    print(f"soak report: {out['run_dir']}/report.json, RTO plot {out['run_dir']}/rto.html", file=sys.stderr)
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
