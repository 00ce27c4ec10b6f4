"""Several control-plane processes (issue 19, item 2): two web processes behind one balancer address,
two Celery workers and two beats against one Postgres and one Redis, under a replica group of three
brokers in controller mode and a steady producer. Three faults in a row, each a kill -9 of the master
together with one control-plane process, which is restarted afterwards as a supervisor would: first
the web process that carries the master's websocket (so no close hook runs anywhere: only the
expiry scan can tell, while the other brokers reconnect through the balancer), then a worker, then
a beat.

After each fault the group has a new master that acknowledges writes, elected **once** at the next
epoch, and every broker is registered with the nameserver again. Over the whole run: no broker was
unregistered while it lived, the controller's history and the brokers' own reports never show two
masters in one epoch, every election picked a master, the epochs are contiguous, the invariant
checker passes, nothing acknowledged was lost and the replicas' commit logs are identical; and with
two beats the water-level sampler ran at most once per interval. Logs of every run:
test-artifacts/controlplane-replicas/test-*/logs/ (uvicorn-1/2, celery-worker-1/2, celery-beat-1/2,
one per broker).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path

import pytest

from chaos.checks import elections, several
from chaos.faults import Kill9
from chaos.harness import GROUP, TOPIC, Harness
from chaos.replicas import CLUSTER, BrokerNode, GroupSettings
from chaos.runner import Report, ScenarioConfig, drain_and_check
from chaos.workload import Producer
from controlplane.models import ApiToken
from dashboards.models import WaterLevelSample
from testkit.controlplane import ScaledControlPlane
from testkit.procs import Process, wait_until
from tests.procs import ARTIFACTS, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.timeout(300)]

SAMPLE_SECONDS = 1  # WATER_LEVEL_SAMPLE_SECONDS of this run: many intervals in a short run
TCP_ESTABLISHED = "01"  # the st column of /proc/net/tcp
UNREGISTERED = re.compile(r"^(\S+ \S+) INFO nameserver\.services unregistered \S+ at (\S+)$", re.MULTILINE)


@pytest.fixture(autouse=True)
def quiet_http_client_logs(caplog):
    caplog.set_level(logging.WARNING, logger="httpx")  # the observer polls four times a second


class KillWithControlPlaneProcess(Kill9):
    """kill -9 of one control-plane process and, at the same moment, of the master (``pick`` names
    the process, given the master). The group must fail over on what is left; then the master comes
    back as a slave, and the process is restarted."""

    def __init__(self, h: Harness, producer: Producer, controlplane: ScaledControlPlane, pick: Callable[[BrokerNode], Process]):
        super().__init__(h, producer)
        self.controlplane = controlplane
        self.pick = pick
        self.process: Process | None = None
        self.broker_down: tuple[str, float, float] | None = None  # (address, killed, restarted) in wall time

    def inject(self) -> None:
        master = self._master()
        self.process = self.pick(master)
        self.kind = f"kill9 of {self.process.name} and of the master"
        self._begin(master, master)
        # The process first: a close of the master's socket must not reach a web process that then dies.
        self.process.kill9()
        master.process.kill9()
        r = self.record
        self.h.note(
            f"kill -9 of {self.process.name} and of the master {master.name} (broker {r.old_master_id}, epoch {r.old_epoch})"
        )

    def heal(self) -> None:
        """Both restarted at once; then wait for the master back as a slave, and the process serving."""
        self.process.start()
        self.broker_down = (self.target.addr, self.record.at_wall, time.time())
        super().heal()
        wait_until(lambda: self.controlplane.serving(self.process), 60, f"{self.process.name} serving again", 0.2)
        self.h.note(f"{self.process.name} serving again")


class ControlPlaneOnTheTestDatabase(ScaledControlPlane):
    """Tokens issued in this process, which shares the database: no manage.py start per token (seconds
    each on a busy machine)."""

    def issue_token(self, name: str, scope: str) -> str:
        return ApiToken.issue(name, scope)[1]


def local_ports_to(pid: int, port: int) -> set[int]:
    """The local ports of ``pid``'s established TCP connections to 127.0.0.1:``port`` (/proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    ports = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state, inode = (row.split()[i] for i in (1, 2, 3, 9))
        if inode in inodes and state == TCP_ESTABLISHED and remote == f"0100007F:{port:04X}":
            ports.add(int(local.split(":")[1], 16))
    return ports


def web_carrying(controlplane: ScaledControlPlane, node: BrokerNode) -> Process:
    """The web process that serves ``node``'s websocket (its only connection to the balancer)."""

    def targets() -> set[tuple[str, int]]:
        routes = controlplane.balancer.routes()
        return {routes[p] for p in local_ports_to(node.process.pid, controlplane.port) if p in routes}

    wait_until(lambda: len(targets()) == 1, 30, f"{node.name} connected to one web process")
    ((_, port),) = targets()
    return next(m.web for m in controlplane.members if m.port == port)


def registered_addresses(h: Harness) -> set[str]:
    return set(h.api.cluster_members(CLUSTER, GROUP).values())


def unregistrations(controlplane: ScaledControlPlane) -> list[tuple[float, str]]:
    """(wall time, broker address) of every unregistration the web processes and workers logged."""
    out = []
    for process in controlplane.webs + controlplane.workers:
        for stamp, addr in UNREGISTERED.findall(process.log_path.read_text(errors="replace")):
            out.append((datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(), addr))
    return sorted(out)


def test_killing_a_web_process_a_worker_or_a_beat_with_the_master_costs_one_election_and_nothing_else():
    run_dir = ARTIFACTS / "controlplane-replicas" / f"test-{time.strftime('%Y%m%d-%H%M%S')}"
    env = child_env(WATER_LEVEL_SAMPLE_SECONDS=str(SAMPLE_SECONDS))
    controlplane = ControlPlaneOnTheTestDatabase(env, run_dir / "logs", size=2)
    h = Harness(GroupSettings(replicas=3), run_dir, env, controlplane=controlplane)
    report = Report(ScenarioConfig("kill9", replicas=3), run_dir)
    producer = resolver = None
    try:
        controlplane.start()
        h.start()
        resolver = h.new_api()
        producer = Producer(TOPIC, lambda: h.resolve(resolver), rate=200, batch=8)
        producer.start()
        wait_until(lambda: producer.stats.acks, 30, "the first acknowledged write")

        first, second = controlplane.members
        picks = (partial(web_carrying, controlplane), lambda _: second.worker, lambda _: first.beat)
        faults = [KillWithControlPlaneProcess(h, producer, controlplane, pick) for pick in picks]
        for fault in faults:
            record = fault.run()
            report.faults.append(record)
            assert record.problems == [], f"{fault.kind}: {record.problems}"
            assert record.new_master not in (None, record.node), f"{fault.kind}: no other broker took over"
            assert record.new_epoch == record.old_epoch + 1, f"{fault.kind}: not one election at the next epoch: {record}"
            wait_until(lambda: registered_addresses(h) == {n.addr for n in h.nodes}, 30, "every broker registered")

        producer.stop()
        faults_over = time.time()  # then the brokers' clean stop unregisters them
        drain_and_check(h, producer, report)
    finally:
        if producer is not None:
            producer.halt()
        if resolver is not None:
            resolver.close()
        h.stop()
        controlplane.stop()
    print(report.human())

    # One election per failure, each picking a master, at contiguous epochs; never two masters in one.
    history = json.loads((run_dir / "history.json").read_text())
    assert [t["newMasterEpoch"] for t in elections(history)] == [1, 2, 3, 4], history
    assert all(t["newMasterBrokerId"] is not None for t in history if t["kind"] == "elect"), history
    assert not several(report.masters_in_history) and not several(report.masters_reported), report.failures()
    assert report.invariant_checker is not None and report.invariant_checker[0] == 0, report.invariant_checker
    assert report.ok, report.failures()
    assert report.delivery is not None and report.delivery.acked > 1000 and report.delivery.lost == ()

    # No broker was unregistered while it lived (only the killed masters, while they were down).
    down = [f.broker_down for f in faults]
    for at, addr in unregistrations(controlplane):
        if at >= faults_over:
            break
        assert any(a == addr and killed <= at <= back for a, killed, back in down), f"{addr} unregistered at {at} while alive"

    # Both web processes served brokers and tools through the one address.
    assert set(controlplane.balancer.connections_to) == set(controlplane.balancer.targets)

    # Two beats: the water-level sampler still took one round per interval (without its Redis slot,
    # two beats ticking every 0.5 s would sample about four times per interval).
    rounds = sorted(set(WaterLevelSample.objects.filter(cluster_name=CLUSTER).values_list("at", flat=True)))
    span = (rounds[-1] - rounds[0]).total_seconds()
    print(f"{len(rounds)} water-level sample rounds in {span:.1f} s")
    assert len(rounds) > 10, rounds
    assert len(rounds) <= span / SAMPLE_SECONDS * 1.25 + 2, f"{len(rounds)} sample rounds in {span:.1f} s"
