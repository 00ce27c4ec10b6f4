"""Real network partitions as chaos faults: packets between hosts of a testkit.netns network are
dropped silently on its bridge (no RST, no ICMP), then the network heals.

They need a harness whose brokers and control plane run on hosts of a network::

    with Network() as net:                                   # testkit.netns
        h = Harness(settings, run_dir, env, network=net)     # brokers on n1..nN, control plane on cp
        h.start()
        producer = Producer(TOPIC, lambda: h.resolve(api))   # the test process reaches every host
        producer.start()
        record = MasterFromControlPlane(h, producer).run()  # or partition_fault("master-from-controlplane", h, producer)
        ...
        h.stop()                                             # then the network closes

Each fault acts on the group as it is when it comes (the current master, a slave of it), so a soak
may take many in a row; ``run()`` always heals the network before it returns, also after an error.
The four shapes (``SHAPES``) and what each must show, under allAckInSyncStateSet=true:

* ``master-from-controlplane``: the master cannot reach the control plane, its slaves still can.
  The controller, which still hears the majority, elects a slave once the master's heartbeats are
  past their timeout. The deposed master does not know it, but it cannot acknowledge a write: its
  SyncStateSet still names the slaves, which now follow the new master, and it cannot shrink the
  set without the controller. It is probed directly while cut off (``stale_probe_codes``: no OK
  allowed). On heal it learns the new epoch, becomes a slave, truncates what it wrote alone, and
  catches up.
* ``slave-from-master``: a slave cannot reach the master (both still reach the control plane). The
  master drops it from the SyncStateSet once its HA link is silent past haHousekeepingInterval,
  and writes go on; nothing is acknowledged that the cut slave lacks while it is still a member
  (``acks_while_member_cut``). On heal it reconnects, catches up and is taken back in.
* ``controlplane-from-minority``: the control plane cannot reach one slave. It still hears most
  brokers, so it is not blind (docs/failover.md, "When the control plane is blind"): the slave's
  silence counts, the nameserver unregisters it (``declared_dead_s``), and nothing else happens.
  No election, the master and its epoch stay, writes go on (the slave still replicates). On heal
  it registers again.
* ``controlplane-from-majority``: the control plane cannot reach the master and one slave, most of
  its brokers. Its silence is its own blindness: nobody is unregistered, nobody deposed, no epoch
  spent; the brokers serve with the roles they have and writes go on. On heal the group is whole
  with the same master and epoch.

For the two cuts of the control plane, the partition lasts until the control plane has heard every
broker again after the heal: connections silent through a cut come back at their next TCP
retransmission, which backs off exponentially, or when the broker gives up on them (a 10 s call
timeout), and an election in that aftermath counts (``elections_during``). A cut from the majority
longer than about 6 s can depose the master then (docs/chaos.md, "Real partitions").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from testkit.netns import Host
from testkit.procs import wait_until

from .checks import elections, wall_time
from .faults import HEAL_TIMEOUT_S, RECOVERY_TIMEOUT_S, CutHaLink, Fault, FaultRecord
from .harness import GROUP, Harness
from .replicas import CLUSTER, BrokerNode
from .workload import Producer

WATCH_S = 0.25  # how often a hold looks at the controller and the nameserver
PROBE_MESSAGES = 4


@dataclass
class PartitionRecord(FaultRecord):
    """A FaultRecord and what the partition itself showed."""

    sides: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # host names cut apart
    declared_dead_s: float | None = None  # cut -> the nameserver dropped the cut broker (not blind)
    elections_during: int | None = None  # elections from the cut until the control plane heard every broker again
    unregistered_during: list[str] = field(default_factory=list)  # brokers the nameserver dropped meanwhile
    dropped_packets: int | None = None  # what the cut dropped on the bridge
    healed_at_wall: float | None = None  # time.time() of the heal
    own_writes_cut_bytes: int | None = None  # master-from-controlplane: what the deposed master wrote alone, cut on rejoin


class Partition(Fault):
    """A partition between hosts of ``h.network`` (base of the shapes): ``hold_s`` is how long the
    cut lasts at least (default twice the heartbeat timeout, so that a silence is judged)."""

    kind = "partition"
    changes_master = False

    def __init__(self, h: Harness, producer: Producer, hold_s: float | None = None):
        super().__init__(h, producer)
        self._on_network(h, hold_s)

    def _on_network(self, h: Harness, hold_s: float | None) -> None:
        if h.network is None or h.controlplane_host is None:
            raise ValueError("a partition needs a Harness made with network= (testkit.netns.Network)")
        self.net = h.network
        self.hold_s = hold_s if hold_s is not None else 2 * h.settings.heartbeat_timeout_ms / 1000

    def run(self) -> FaultRecord:
        try:
            return super().run()
        finally:
            self.net.heal()  # a soak must never go on with a cut left in place

    # --- helpers ------------------------------------------------------------------------------------

    def _host(self, member: BrokerNode | str) -> Host:
        return self.h.controlplane_host if member == "cp" else member.host

    def _cut(self, node: BrokerNode, master: BrokerNode, a: list, b: list) -> PartitionRecord:
        """Start the record (``node`` hit, ``master`` the master now), then cut ``a`` from ``b`` (nodes or "cp")."""
        base = self._begin(node, master)
        names = tuple(m if m == "cp" else m.name for m in a), tuple(m if m == "cp" else m.name for m in b)
        self.record = r = PartitionRecord(**vars(base), sides=names)
        self.net.partition([self._host(m) for m in a], [self._host(m) for m in b])
        self.h.note(f"partition {' '.join(names[0])} | {' '.join(names[1])} (master {master.name}, epoch {r.old_epoch})")
        return r

    def _a_slave(self, master: BrokerNode) -> BrokerNode:
        """The last replica (by name) in the SyncStateSet that is not the master."""
        info = self.h.api.replica_info(GROUP)
        members = set(info.sync_state_set) if info else set()
        slaves = [n for n in self.h.nodes if n is not master and self.h.broker_id(n) in members]
        if not slaves:
            raise RuntimeError(f"no in-sync slave of {master.name} to cut")
        return slaves[-1]

    def _heal_network(self) -> float:
        self.record.dropped_packets = self.net.dropped_packets()
        self.net.heal()
        self.record.healed_at_wall = time.time()
        self.h.note(f"healed the partition ({self.record.dropped_packets} packets dropped)")
        return time.monotonic()

    def _elections_since_cut(self) -> int:
        return sum(1 for t in elections(self.h.api.history(GROUP, 100)) if wall_time(t["createdAt"]) >= self.record.at_wall)

    def _registered(self) -> set[str]:
        return set(self.h.api.cluster_members(CLUSTER, GROUP).values())

    def _cut_nodes(self) -> list[BrokerNode]:
        names = set(self.record.sides[0]) | set(self.record.sides[1])
        return [n for n in self.h.nodes if n.name in names]

    def _hold(self, watch: list[BrokerNode]) -> None:
        """Until the hold is over: the master and its epoch must stay, and (for ``watch``) the
        nameserver must keep the brokers registered; what happens otherwise is recorded."""
        r, h = self.record, self.h
        while time.monotonic() < r.at + self.hold_s:
            info = h.api.replica_info(GROUP)
            if info is not None and info.master_epoch != r.old_epoch:
                r.problems.append(f"master epoch {r.old_epoch} -> {info.master_epoch} during the partition")
                break
            gone = [n.name for n in watch if n.addr not in self._registered() and n.name not in r.unregistered_during]
            r.unregistered_during += gone
            time.sleep(WATCH_S)
        if r.unregistered_during:
            r.problems.append(f"the blind control plane unregistered {r.unregistered_during}")
        ack = self.producer.first_ack_after(r.at)
        if ack is None:
            r.problems.append("no write acknowledged during the partition")
        else:
            r.new_master, r.new_master_id, r.new_epoch = ack.node, r.old_master_id, r.old_epoch
            r.rto_s = ack.at - r.at
        r.longest_write_gap_s = self._longest_gap()

    def _heard_since_heal(self, nodes: list[BrokerNode]) -> bool:
        """The control plane has a heartbeat of each of ``nodes`` from after the heal (water-level
        reports ride the brokers' heartbeats; both stamps are this machine's clock)."""
        levels = self.h.levels()
        return all(levels.get(n.addr, {}).get("reportedAtMs", 0) >= self.record.healed_at_wall * 1000 for n in nodes)

    def _wait_whole(self, healed_at: float) -> None:
        """The control plane hears every broker cut off again, every broker is registered, every
        slave in sync; no election from the cut until then. A connection silent through a long cut
        comes back only at its next TCP retransmission (exponential backoff) or when the broker gives
        up on it, so the aftermath of a cut is part of the partition."""
        h, r = self.h, self.record
        master = h.master_node()
        wait_until(
            lambda: (
                self._heard_since_heal(self._cut_nodes())
                and self._registered() >= {n.addr for n in h.nodes}
                and all(h.in_sync(n) for n in h.nodes if n is not master)
            ),
            HEAL_TIMEOUT_S,
            "every broker heard, registered and in sync after the heal",
        )
        r.heal_s = time.monotonic() - healed_at
        r.elections_during = self._elections_since_cut()
        if r.elections_during:
            r.problems.append(
                f"{r.elections_during} election(s) between the cut and the control plane hearing every broker again"
            )
        h.note(f"the group is whole again {r.heal_s:.2f} s after the heal ({r.elections_during} election(s) since the cut)")


class MasterFromControlPlane(Partition):
    kind = "partition-master-from-controlplane"
    changes_master = True

    def inject(self) -> None:
        master = self._master()
        self._cut(master, master, ["cp"], [master])

    def recover(self) -> None:
        """The election, the first write on the new master, then a probe of the deposed master while
        it is still cut off from the control plane."""
        r = self.record
        self._read_election(self.h.settings.heartbeat_timeout_ms / 1000 + 20)
        self._wait_new_master_ack()
        codes = self.producer.probe(self.target.name, self.target.grpc_addr, PROBE_MESSAGES)
        r.stale_probe_codes = codes
        self.h.note(f"the deposed master {self.target.name}, still cut off, answered direct sends with {codes}")
        if codes.get("OK"):
            r.problems.append(f"the deposed master acknowledged {codes['OK']} write(s) while cut off")
        r.longest_write_gap_s = self._longest_gap()
        r.elections_during = self._elections_since_cut()

    def heal(self) -> None:
        """It must rejoin as a slave of the new epoch, its log cut back to where that epoch began."""
        node, r = self.target, self.record
        end_alone = node.log_span()[1]
        healed_at = self._heal_network()
        wait_until(lambda: self.h.rejoined_as_slave(node, r.new_epoch), HEAL_TIMEOUT_S, f"{node.name} back as an in-sync slave")
        r.heal_s = time.monotonic() - healed_at
        entries = node.epoch_entries()
        fork = next((e.start_offset for e in entries if e.epoch == r.new_epoch), None) if isinstance(entries, list) else None
        r.own_writes_cut_bytes = None if fork is None else max(0, end_alone - fork)
        self.h.note(
            f"{node.name} is an in-sync slave of epoch {r.new_epoch} {r.heal_s:.2f} s after the heal "
            f"(it had {r.own_writes_cut_bytes} bytes of its own past the epoch's start)"
        )


class SlaveFromMaster(Partition, CutHaLink):
    """CutHaLink's checks (acks while the cut slave was still a member, back in sync) over a real
    partition of the slave from the master. The cut lasts until the SyncStateSet drops the slave,
    then ``hold_s`` more (default 1 s) of writes without it."""

    kind = "partition-slave-from-master"

    def __init__(self, h: Harness, producer: Producer, hold_s: float = 1.0):
        CutHaLink.__init__(self, h, producer, slave=None)
        self._on_network(h, hold_s)

    def inject(self) -> None:
        h = self.h
        master = self._master()
        self.slave = self._a_slave(master)
        r = self._cut(self.slave, master, [self.slave], [master])
        self.black_hole = (r.at, r.at_wall)
        slave_id = h.broker_id(self.slave)
        try:
            wait_until(
                lambda: slave_id not in h.api.replica_info(GROUP).sync_state_set,
                RECOVERY_TIMEOUT_S,
                f"the SyncStateSet without {self.slave.name}",
            )
            h.note(f"the SyncStateSet dropped {self.slave.name} {time.monotonic() - r.at:.2f} s after the cut")
            time.sleep(self.hold_s)
        except TimeoutError as exc:
            r.problems.append(str(exc))
        r.elections_during = self._elections_since_cut()
        self.healed_at = self._heal_network()


class ControlPlaneFromMinority(Partition):
    kind = "partition-controlplane-from-minority"

    def inject(self) -> None:
        master = self._master()
        slave = self._a_slave(master)
        self._cut(slave, master, ["cp"], [slave])

    def recover(self) -> None:
        """Not blind: the nameserver drops the silent slave; otherwise nothing changes."""
        r, node = self.record, self.target
        try:
            wait_until(
                lambda: node.addr not in self._registered(),
                RECOVERY_TIMEOUT_S,
                f"the nameserver dropping {node.name}, which it cannot hear while it hears the others",
            )
            r.declared_dead_s = time.monotonic() - r.at
            self.h.note(f"the nameserver dropped {node.name} {r.declared_dead_s:.2f} s after the cut")
        except TimeoutError as exc:
            r.problems.append(str(exc))
        self._hold(watch=[])

    def heal(self) -> None:
        self._wait_whole(self._heal_network())


class ControlPlaneFromMajority(Partition):
    kind = "partition-controlplane-from-majority"

    def inject(self) -> None:
        master = self._master()
        self._cut(master, master, ["cp"], [master, self._a_slave(master)])

    def recover(self) -> None:
        """Blind: nobody is dropped or deposed for the whole hold."""
        cut = [n for n in self.h.nodes if n.name in self.record.sides[1]]
        self._hold(watch=cut)

    def heal(self) -> None:
        self._wait_whole(self._heal_network())


SHAPES: dict[str, type[Partition]] = {
    "master-from-controlplane": MasterFromControlPlane,
    "slave-from-master": SlaveFromMaster,
    "controlplane-from-minority": ControlPlaneFromMinority,
    "controlplane-from-majority": ControlPlaneFromMajority,
}


def partition_fault(shape: str, h: Harness, producer: Producer, **options) -> Partition:
    """The partition fault of ``shape`` (one of ``SHAPES``); ``options``: e.g. ``hold_s``."""
    if shape not in SHAPES:
        raise ValueError(f"unknown partition {shape!r}; one of {', '.join(SHAPES)}")
    return SHAPES[shape](h, producer, **options)
