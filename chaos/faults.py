"""The faults a run injects, each with what it measures and how it heals.

Each ``Fault`` acts on the *current* master (or its link to a slave), so one harness can take many
in a row (bench/failover.py). ``inject`` breaks something; ``recover`` waits until writes are
acknowledged again and measures how long that took; ``heal`` repairs what the fault broke and waits
until the group is whole again."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field

from testkit.procs import wait_until

from .checks import first_election_after, wall_time
from .harness import GROUP, Harness
from .replicas import BrokerNode
from .workload import Producer

RECOVERY_TIMEOUT_S = 45.0
HEAL_TIMEOUT_S = 60.0


@dataclass
class FaultRecord:
    """What one fault cost; times in seconds, None when it did not happen (see ``problems``)."""

    kind: str
    node: str  # the broker hit (the slave, for a cut HA link)
    old_master: str  # the master when the fault came
    old_master_id: int | None
    old_epoch: int
    at: float  # time.monotonic() of the fault
    at_wall: float
    new_master: str | None = None
    new_master_id: int | None = None
    new_epoch: int | None = None
    detect_s: float | None = None  # fault -> the controller's election committed (history createdAt)
    elect_s: float | None = None  # that commit -> first acknowledged write on the new master
    rto_s: float | None = None  # fault -> first acknowledged write on the new master
    longest_write_gap_s: float | None = None  # longest failed-send window during the fault
    heal_s: float | None = None  # heal started -> the hit broker back in sync
    stale_probe_codes: dict[str, int] = field(default_factory=dict)  # what a deposed master answered
    # cut-ha-link: writes acknowledged while the cut slave could not have them but was still in the
    # SyncStateSet (black hole start + 0.5 s -> the alter that dropped it, or the heal); and when it was dropped
    acks_while_member_cut: int | None = None
    sync_state_set_shrunk_s: float | None = None
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("at", "at_wall")}


class Fault:
    kind = ""
    changes_master = True

    def __init__(self, h: Harness, producer: Producer):
        self.h = h
        self.producer = producer
        self.record: FaultRecord | None = None
        self.target: BrokerNode | None = None

    def run(self) -> FaultRecord:
        """inject, recover, heal; a timeout becomes a problem on the record, not an exception."""
        self.inject()
        classic = self.changes_master and not self.h.controller_mode
        try:
            self.recover_classic() if classic else self.recover()
        except TimeoutError as exc:
            self.record.problems.append(f"recovery: {exc}")
        try:
            self.heal_classic() if classic else self.heal()
        except TimeoutError as exc:
            self.record.problems.append(f"heal: {exc}")
        return self.record

    # Classic mode has no failover: the master itself comes back, the harness checking itself.

    def restore(self) -> None:
        self.target.process.start()

    def recover_classic(self) -> None:
        r = self.record
        self.restore()
        self.h.note(f"classic mode: {self.target.name} restored")
        wait_until(lambda: self.producer.first_ack_after(r.at), RECOVERY_TIMEOUT_S, "an acknowledged write")
        ack = self.producer.first_ack_after(r.at)
        r.new_master, r.rto_s = ack.node, ack.at - r.at
        r.longest_write_gap_s = self._longest_gap()

    def heal_classic(self) -> None:
        started = time.monotonic()
        wait_until(lambda: all(self.h.in_sync(n) for n in self.h.nodes[1:]), HEAL_TIMEOUT_S, "every slave in sync")
        self.record.heal_s = time.monotonic() - started

    def _begin(self, node: BrokerNode, master: BrokerNode) -> FaultRecord:
        info = self.h.api.replica_info(GROUP) if self.h.controller_mode else None
        self.target = node
        self.record = FaultRecord(
            self.kind,
            node.name,
            master.name,
            info.master_broker_id if info else 0,
            info.master_epoch if info else 0,
            time.monotonic(),
            time.time(),
        )
        return self.record

    def _master(self) -> BrokerNode:
        master = self.h.master_node()
        if master is None:
            raise RuntimeError("no master to hit")
        return master

    def inject(self) -> None:
        raise NotImplementedError

    def recover(self) -> None:
        """Wait for the first write acknowledged by another broker than the one hit; then read the
        election from the controller's history."""
        self._wait_new_master_ack()
        self._read_election()
        self.record.longest_write_gap_s = self._longest_gap()

    def _wait_new_master_ack(self) -> None:
        r = self.record
        left = RECOVERY_TIMEOUT_S - (time.monotonic() - r.at)
        wait_until(
            lambda: self.producer.first_ack_after(r.at, exclude_node=r.node),
            max(1.0, left),
            "an acknowledged write on a new master",
        )
        ack = self.producer.first_ack_after(r.at, exclude_node=r.node)
        r.new_master, r.rto_s = ack.node, ack.at - r.at
        if r.detect_s is not None:
            r.elect_s = r.rto_s - r.detect_s
        self.h.note(f"first write acknowledged by {ack.node} {r.rto_s:.3f} s after the fault")

    def _read_election(self, timeout_s: float = 10.0) -> None:
        r, h = self.record, self.h
        if not h.controller_mode or r.detect_s is not None:
            return
        try:
            wait_until(
                lambda: first_election_after(h.api.history(GROUP, 50), r.at_wall, r.old_master_id),
                timeout_s,
                "the election in the history",
            )
        except TimeoutError as exc:
            r.problems.append(str(exc))
            return
        t = first_election_after(h.api.history(GROUP, 50), r.at_wall, r.old_master_id)
        r.new_master_id, r.new_epoch = t["newMasterBrokerId"], t["newMasterEpoch"]
        r.detect_s = wall_time(t["createdAt"]) - r.at_wall
        if r.rto_s is not None:
            r.elect_s = r.rto_s - r.detect_s
        h.note(
            f"election committed {r.detect_s:.3f} s after the fault: broker {r.new_master_id} master at epoch "
            f"{r.new_epoch} (trigger {t['trigger']}, candidates {t.get('candidates')})"
        )

    def _longest_gap(self) -> float | None:
        gaps = [
            (w.end or time.monotonic()) - w.start
            for w in self.producer.stats.windows
            if (w.end or time.monotonic()) >= self.record.at
        ]
        return max(gaps, default=0.0)

    def heal(self) -> None:
        """Restart the broker that was hit; it must rejoin as a slave and get back in sync."""
        node, r = self.target, self.record
        started = time.monotonic()
        node.process.start()
        self.h.note(f"restarted {node.name}")
        epoch = r.new_epoch if self.h.controller_mode else None
        wait_until(lambda: self.h.rejoined_as_slave(node, epoch), HEAL_TIMEOUT_S, f"{node.name} back as an in-sync slave")
        r.heal_s = time.monotonic() - started
        self.h.note(f"{node.name} is an in-sync slave again {r.heal_s:.2f} s after its restart")


class Kill9(Fault):
    kind = "kill9"

    def inject(self) -> None:
        master = self._master()
        self._begin(master, master)
        master.process.kill9()
        self.h.note(f"kill -9 of the master {master.name} (broker {self.record.old_master_id}, epoch {self.record.old_epoch})")


class SigStop(Fault):
    """The master freezes (SIGSTOP) for longer than its heartbeat timeout: its websocket stays open,
    so only missing heartbeats can tell. Then SIGCONT: it must find out it was deposed and follow."""

    kind = "sigstop"

    def inject(self) -> None:
        master = self._master()
        self._begin(master, master)
        master.process.pause()
        self.h.note(f"SIGSTOP of the master {master.name} (broker {self.record.old_master_id})")

    def __init__(self, h: Harness, producer: Producer, stop_s: float | None = None):
        super().__init__(h, producer)
        self.stop_s = stop_s  # how long the master stays stopped; default 1.5 x its heartbeat timeout

    def recover(self) -> None:
        """Keep the master stopped until the controller elected another one (or gave up) and at
        least ``stop_s``; SIGCONT; probe the deposed master; then wait for writes on the new one."""
        r, timeout_s = self.record, self.h.settings.heartbeat_timeout_ms / 1000
        try:
            self._read_election(timeout_s + 20)
        finally:
            hold_until = max(r.at + (self.stop_s if self.stop_s is not None else timeout_s * 1.5), time.monotonic() + 0.5)
            time.sleep(max(0.0, hold_until - time.monotonic()))
            self.target.process.resume()
            self.h.note(f"SIGCONT of {self.target.name} after {time.monotonic() - r.at:.2f} s")
        self._probe_deposed()
        self._wait_new_master_ack()
        r.longest_write_gap_s = self._longest_gap()

    def restore(self) -> None:
        self.target.process.resume()

    def _probe_deposed(self) -> None:
        """A deposed master that still acknowledges writes is a split brain: send it a few batches
        at once and count what it answers (its acks are checked like any other)."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for code, n in self.producer.probe(self.target.name, self.target.grpc_addr, 4).items():
                self.record.stale_probe_codes[code] = self.record.stale_probe_codes.get(code, 0) + n
            time.sleep(0.2)
        self.h.note(f"the deposed master answered {self.record.stale_probe_codes}")

    def heal(self) -> None:
        node, r = self.target, self.record
        started = time.monotonic()
        epoch = r.new_epoch if self.h.controller_mode else None
        wait_until(lambda: self.h.rejoined_as_slave(node, epoch), HEAL_TIMEOUT_S, f"{node.name} back as an in-sync slave")
        r.heal_s = time.monotonic() - started
        self.h.note(f"{node.name} is an in-sync slave again {r.heal_s:.2f} s after SIGCONT + probes")


class KillWithControlPlane(Fault):
    """kill -9 of the master and of the web server at once: no websocket close reaches anyone; the
    controller can only notice the missing heartbeats (Celery keeps scanning). The web server comes
    back after ``down_s`` on the same port."""

    kind = "kill-with-controlplane"

    def __init__(self, h: Harness, producer: Producer, down_s: float = 2.0):
        super().__init__(h, producer)
        self.down_s = down_s
        self.controlplane_back: float | None = None

    def inject(self) -> None:
        master = self._master()
        self._begin(master, master)
        master.process.kill9()
        self.h.controlplane.web.kill9()
        self.h.note(f"kill -9 of the master {master.name} and of uvicorn")
        time.sleep(self.down_s)
        took = self.h.controlplane.start_web()
        self.controlplane_back = time.time()  # wall clock: until then no replica could be made master
        self.h.note(f"uvicorn restarted ({took:.2f} s to answer), {time.monotonic() - self.record.at:.2f} s after the kill")


class CutHaLink(Fault):
    """The HA link between the master and one slave breaks: three cuts (RST both ways) half a second
    apart, then a black hole longer than haHousekeepingInterval, then the link heals. No master change
    is expected; writes may stall while the master waits for the cut slave.

    Needs the slave to reach the master through ``proxy`` (a testkit.faultproxy.FaultProxy); without
    one, the cuts are made by destroying the sockets (``ss -K``) and there is no black hole."""

    kind = "cut-ha-link"
    changes_master = False

    def __init__(self, h: Harness, producer: Producer, slave: BrokerNode, proxy=None, black_hole_s: float = 4.0):
        super().__init__(h, producer)
        self.slave = slave
        self.proxy = proxy
        self.black_hole_s = black_hole_s
        self.healed_at = 0.0
        self.black_hole: tuple[float, float] | None = None  # (monotonic, wall) when it started

    def inject(self) -> None:
        master = self._master()
        self._begin(self.slave, master)
        if self.proxy is not None:
            for _ in range(3):
                n = self.proxy.cut()
                self.h.note(f"cut the HA link {self.slave.name} -> {master.name} ({n} connection(s))")
                time.sleep(0.5)
            self.proxy.drop(True)
            self.black_hole = (time.monotonic(), time.time())
            self.h.note(f"black hole on the HA link for {self.black_hole_s:g} s")
            time.sleep(self.black_hole_s)
            self.proxy.drop(False)
            self.healed_at = time.monotonic()
        else:
            for _ in range(3):
                out = subprocess.run(
                    [
                        "ss",
                        "-K",
                        "-t",
                        "state",
                        "established",
                        "(",
                        "sport",
                        "=",
                        f":{master.ha_port}",
                        "or",
                        "dport",
                        "=",
                        f":{master.ha_port}",
                        ")",
                    ],
                    capture_output=True,
                    text=True,
                )
                self.h.note(f"destroyed the HA sockets of {master.name}: {max(0, len(out.stdout.splitlines()) - 1)} line(s)")
                time.sleep(0.5)
            self.healed_at = time.monotonic()
        self.h.note("the HA link is healed")

    def recover(self) -> None:
        """Writes must flow again (on the same master); the cost is the longest failed-send window."""
        at = time.monotonic()
        wait_until(lambda: self.producer.first_ack_after(at), RECOVERY_TIMEOUT_S, "writes acknowledged after the cut")
        self.record.new_master = self.producer.first_ack_after(at).node
        self.record.longest_write_gap_s = self._longest_gap()
        if self.black_hole is not None and self.h.controller_mode:
            self._acks_while_cut()

    def _acks_while_cut(self) -> None:
        """allAckInSyncStateSet promises that an acknowledged write is on every SyncStateSet member.
        From the black hole's start (+0.5 s for writes the slave had already) until the alter that
        dropped the slave from the set, nothing it could not have may be acknowledged."""
        r, h = self.record, self.h
        start_mono, start_wall = self.black_hole
        slave_id = h.broker_id(self.slave)
        shrink = next(
            (
                t
                for t in h.api.history(GROUP, 100)
                if t["kind"] == "alter"
                and t.get("responseCode", 0) == 0
                and wall_time(t["createdAt"]) >= start_wall
                and slave_id not in t["newSyncStateSet"]
            ),
            None,
        )
        until = self.healed_at
        if shrink is not None:
            r.sync_state_set_shrunk_s = wall_time(shrink["createdAt"]) - start_wall
            until = min(until, start_mono + r.sync_state_set_shrunk_s)
        acks = self.producer.acks_snapshot().values()
        r.acks_while_member_cut = sum(1 for a in acks if start_mono + 0.5 < a.at < until and not a.stale_probe)
        self.h.note(
            f"SyncStateSet dropped {self.slave.name} "
            + (f"{r.sync_state_set_shrunk_s:.2f} s into the black hole" if shrink else "never")
            + f"; {r.acks_while_member_cut} write(s) acknowledged meanwhile"
        )

    def heal(self) -> None:
        r = self.record
        wait_until(lambda: self.h.in_sync(self.slave), HEAL_TIMEOUT_S, f"{self.slave.name} back in sync")
        r.heal_s = time.monotonic() - self.healed_at
        self.h.note(f"{self.slave.name} in sync again {r.heal_s:.2f} s after the link healed")
