"""``python -m chaos.runner --scenario kill9|sigstop|kill-with-controlplane|cut-ha-link``: one fault
against a real replica group in controller mode under a steady produce load, then the checks.

Starts a control plane (uvicorn + Celery worker + beat) on a fresh database and Redis key prefix of
its own, 2 or 3 brokers, a topic, a producer that records every acknowledged message; injects the
fault, heals it, drains, and checks: no acknowledged message lost (a number; it must be 0 when every
ack waits for a second replica), duplicates, at most one master per epoch, commit logs byte-identical
up to their common end, how long the fault cost. A human report goes to stderr; ``--json`` prints
one JSON line to stdout. Exit code 0 when every check passed, 1 otherwise. See docs/chaos.md.

From Python (e.g. a test whose database is already set up): ``run(ScenarioConfig(...), env=...)``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from testkit.brokers import guard_errors
from testkit.controlplane import fresh_standalone_env
from testkit.faultproxy import FaultProxy
from testkit.procs import ARTIFACTS, wait_until

from .checks import (
    Delivery,
    LogComparison,
    check_delivery,
    compare_logs,
    elections,
    epoch_file_conflicts,
    masters_per_epoch_in_history,
    masters_per_epoch_reported,
    several,
)
from .faults import CutHaLink, Fault, FaultRecord, Kill9, KillWithControlPlane, SigStop
from .harness import GROUP, QUEUES, TOPIC, Harness
from .replicas import BrokerNode, GroupSettings
from .workload import Producer, read_back

SCENARIOS = ("kill9", "sigstop", "kill-with-controlplane", "cut-ha-link")
CONVERGE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ScenarioConfig:
    scenario: str
    replicas: int = 2
    all_ack: bool = True
    in_sync_replicas: int = 1
    seconds: float = 12.0  # produce at least this long in all (the fault comes after a third of it)
    rate: float = 400.0  # messages per second
    batch: int = 8  # messages per SendMessage
    heartbeat_interval_ms: int = 1000
    heartbeat_timeout_ms: int = 3000
    scan_interval_ms: int = 1000  # the controller's and nameserver's scan intervals for this run
    controlplane_down_s: float = 2.0  # kill-with-controlplane: how long uvicorn stays down
    stop_s: float | None = None  # sigstop: how long the master stays stopped (default 1.5 x heartbeat timeout)
    resolve: str = "controller"  # how the producer finds the master: controller (replica info) | route
    mode: str = "controller"  # controller | classic (no failover: the harness checking itself)
    run_dir: Path | None = None
    broker_conf: dict[str, str] = field(default_factory=dict)

    def group_settings(self) -> GroupSettings:
        return GroupSettings(
            self.replicas,
            self.all_ack,
            self.in_sync_replicas,
            self.heartbeat_interval_ms,
            self.heartbeat_timeout_ms,
            mode=self.mode,
            extra=dict(self.broker_conf),
        )


@dataclass
class Report:
    config: ScenarioConfig
    run_dir: Path
    faults: list[FaultRecord] = field(default_factory=list)
    delivery: Delivery | None = None
    read_from: str | None = None
    send_failures: dict[str, int] = field(default_factory=dict)
    abandoned: int = 0
    requests: int = 0
    masters_in_history: dict[int, list[int]] = field(default_factory=dict)
    masters_reported: dict[int, list[str]] = field(default_factory=dict)
    invariant_checker: tuple[int, str] | None = None  # exit code, output
    logs: LogComparison | None = None
    epoch_files: dict[str, list | str] = field(default_factory=dict)
    epoch_conflicts: list[str] = field(default_factory=list)
    broker_exit_codes: dict[str, int | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, not a failed check
    seconds: float = 0.0

    # --- verdict ---------------------------------------------------------------------------------

    @property
    def loss_must_be_zero(self) -> bool:
        return self.config.group_settings().expects_no_loss

    def failures(self) -> list[str]:
        out = list(self.problems)
        for f in self.faults:
            out += [f"{f.kind}: {p}" for p in f.problems]
        d = self.delivery
        if d is None:
            out.append("no read-back")
        else:
            if d.lost and self.loss_must_be_zero:
                out.append(f"{len(d.lost)} acknowledged message(s) lost")
            if d.duplicates_never_failed:
                out.append(f"{d.duplicates_never_failed} duplicate(s) of messages whose every send was acknowledged")
        for f in self.faults:
            if f.acks_while_member_cut and self.config.all_ack:
                out.append(
                    f"{f.acks_while_member_cut} write(s) acknowledged while the SyncStateSet member {f.node} "
                    "was cut off (allAckInSyncStateSet promises every member has them)"
                )
        if several(self.masters_in_history):
            out.append(f"two masters in one epoch in the controller history: {several(self.masters_in_history)}")
        if several(self.masters_reported):
            out.append(f"two brokers reported themselves master in one epoch: {several(self.masters_reported)}")
        if self.invariant_checker and self.invariant_checker[0] != 0:
            out.append(f"check_controller_invariants: {self.invariant_checker[1].strip()}")
        if self.logs is not None and not self.logs.identical:
            out.append(f"commit logs differ: first differences {self.logs.first_difference}")
        out += [f"epoch files disagree: {c}" for c in self.epoch_conflicts]
        return out

    @property
    def ok(self) -> bool:
        return not self.failures()

    # --- output ----------------------------------------------------------------------------------

    def as_json(self) -> dict:
        c, d = self.config, self.delivery
        return {
            "scenario": c.scenario,
            "ok": self.ok,
            "mode": c.mode,
            "replicas": c.replicas,
            "allAck": c.all_ack,
            "inSyncReplicas": c.in_sync_replicas,
            "heartbeatTimeoutMs": c.heartbeat_timeout_ms,
            "resolve": c.resolve,
            "seconds": round(self.seconds, 2),
            "runDir": str(self.run_dir),
            "acked": d.acked if d else None,
            "consumed": d.consumed if d else None,
            "lost": len(d.lost) if d else None,
            "lostProbes": d.lost_probes if d else None,
            "lostMustBeZero": self.loss_must_be_zero,
            "duplicates": d.duplicates if d else None,
            "duplicatesNeverFailed": d.duplicates_never_failed if d else None,
            "unackedButStored": d.unacked_but_stored if d else None,
            "sendFailures": self.send_failures,
            "abandoned": self.abandoned,
            "faults": [f.as_dict() for f in self.faults],
            "mastersPerEpoch": {str(k): v for k, v in self.masters_in_history.items()},
            "mastersReportedPerEpoch": {str(k): v for k, v in self.masters_reported.items()},
            "invariantChecker": self.invariant_checker[1].strip() if self.invariant_checker else None,
            "logsIdentical": self.logs.identical if self.logs else None,
            "logsComparedBytes": self.logs.compared_bytes if self.logs else None,
            "logSpans": {k: list(v) for k, v in self.logs.spans.items()} if self.logs else None,
            "epochConflicts": self.epoch_conflicts,
            "notes": self.notes,
            "failures": self.failures(),
        }

    def human(self) -> str:
        c, d = self.config, self.delivery
        lines = [
            f"chaos {c.scenario}: {'PASS' if self.ok else 'FAIL'} in {self.seconds:.1f} s — {c.mode} mode, "
            f"{c.replicas} replicas, allAckInSyncStateSet={str(c.all_ack).lower()}, inSyncReplicas="
            f"{c.in_sync_replicas}, heartbeat timeout {c.heartbeat_timeout_ms} ms, master found via {c.resolve}",
            f"  run folder: {self.run_dir} (logs/: uvicorn, celery, one per broker; brokers/<node>/: stores)",
        ]
        for f in self.faults:
            if f.node == f.old_master:
                lines.append(
                    f"  fault {f.kind} on the master {f.node} (broker {f.old_master_id}, epoch {f.old_epoch}) -> "
                    f"master {f.new_master} (broker {f.new_master_id}, epoch {f.new_epoch})"
                )
            else:
                lines.append(
                    f"  fault {f.kind} between the slave {f.node} and the master {f.old_master} (broker "
                    f"{f.old_master_id}, epoch {f.old_epoch}); writes afterwards acknowledged by {f.new_master}"
                )
            lines.append(
                f"    detect {_s(f.detect_s)}, elect {_s(f.elect_s)}, RTO {_s(f.rto_s)}, longest write gap "
                f"{_s(f.longest_write_gap_s)}, healed (back in sync) in {_s(f.heal_s)}"
            )
            if f.acks_while_member_cut is not None:
                lines.append(
                    f"    SyncStateSet dropped {f.node} after {_s(f.sync_state_set_shrunk_s)} of black hole; "
                    f"{f.acks_while_member_cut} write(s) acknowledged before that"
                )
            if f.stale_probe_codes:
                lines.append(f"    the deposed master answered direct sends with {f.stale_probe_codes}")
            lines += [f"    problem: {p}" for p in f.problems]
        if d is not None:
            lost_note = "must be 0" if self.loss_must_be_zero else "allowed by these settings, reported"
            lines.append(
                f"  messages: {d.acked} acknowledged, {d.consumed} read back from {self.read_from}; "
                f"LOST {len(d.lost)} ({lost_note})"
                f"{f' by node {d.lost_by_node}, {d.lost_probes} of them probes' if d.lost else ''}; "
                f"duplicates {d.duplicates} ({d.duplicates_never_failed} of never-failed sends); "
                f"{d.unacked_but_stored} stored without an ack"
            )
            if d.lost:
                lines.append(f"    first lost ids: {', '.join(d.lost[:5])}")
        lines.append(
            f"  sends: {self.requests} requests acknowledged, failed attempts (messages) {self.send_failures}, "
            f"abandoned {self.abandoned}"
        )
        lines.append(
            f"  masters per epoch: controller history {self.masters_in_history}; brokers' own reports {self.masters_reported}"
        )
        if self.invariant_checker:
            lines.append(f"  check_controller_invariants: exit {self.invariant_checker[0]}: {self.invariant_checker[1].strip()}")
        if self.logs is not None:
            lg = self.logs
            lines.append(
                f"  commit logs: {'identical' if lg.identical else 'DIFFERENT'} over [{lg.common_start}, "
                f"{lg.common_end}) ({lg.compared_bytes} bytes); spans {lg.spans}"
                + (f"; first differences {lg.first_difference}" if lg.first_difference else "")
            )
        lines.append(
            f"  epoch files: {self.epoch_files}"
            + (f"; CONFLICTS {self.epoch_conflicts}" if self.epoch_conflicts else "; consistent")
        )
        lines.append(f"  brokers' exit codes at the clean stop: {self.broker_exit_codes}")
        lines += [f"  note: {n}" for n in self.notes]
        failures = self.failures()
        lines.append("  result: " + ("every check passed" if not failures else "FAILED: " + "; ".join(failures)))
        return "\n".join(lines)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def default_run_dir(scenario: str) -> Path:
    return ARTIFACTS / "chaos" / f"{scenario}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def make_fault(
    kind: str, h: Harness, producer: Producer, config: ScenarioConfig, proxy: FaultProxy | None, slave: BrokerNode | None
) -> Fault:
    if kind == "kill9":
        return Kill9(h, producer)
    if kind == "sigstop":
        return SigStop(h, producer, config.stop_s)
    if kind == "kill-with-controlplane":
        return KillWithControlPlane(h, producer, config.controlplane_down_s)
    if kind == "cut-ha-link":
        return CutHaLink(h, producer, slave, proxy)
    raise ValueError(f"unknown scenario {kind!r}; one of {', '.join(SCENARIOS)}")


def run(config: ScenarioConfig, env: dict[str, str] | None = None, verbose: bool = True) -> Report:
    """One scenario from start to checks; everything started is stopped before it returns or raises."""
    if config.scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {config.scenario!r}; one of {', '.join(SCENARIOS)}")
    started = time.monotonic()
    run_dir = config.run_dir or default_run_dir(config.scenario)
    if env is None:
        env = fresh_standalone_env("chaos_" + config.scenario.replace("-", "_"))
    h = Harness(config.group_settings(), run_dir, env, scan_interval_ms=config.scan_interval_ms, verbose=verbose)
    report = Report(config, run_dir)
    proxy: FaultProxy | None = None
    producer: Producer | None = None
    resolver_api = None
    cut_slave = h.nodes[-1]

    def proxy_in_front_of(master: BrokerNode) -> None:
        nonlocal proxy
        proxy = FaultProxy(target=("127.0.0.1", master.ha_port)).start()
        h.fixed_ha_addr[cut_slave.name] = proxy.addr
        h.note(f"{cut_slave.name} reaches the master's HA port {master.ha_port} through a fault proxy at {proxy.addr}")

    try:
        h.start(before_slaves=proxy_in_front_of if config.scenario == "cut-ha-link" else None)
        if proxy is not None and proxy.connections_accepted == 0:
            report.notes.append(
                f"{cut_slave.name} never connected through the fault proxy: its HA link cannot be "
                "proxied in this mode (the cut falls back to destroying the sockets, no black hole)"
            )
            proxy.stop()
            proxy = None
        resolver_api = h.new_api()
        producer = Producer(TOPIC, lambda: h.resolve(resolver_api, config.resolve), rate=config.rate, batch=config.batch)
        producer.start()
        wait_until(lambda: producer.stats.acks, 30, "the first acknowledged write")
        load_started = time.monotonic()
        h.note(f"producing {config.rate:g} msgs/s in batches of {config.batch}")
        time.sleep(max(1.0, config.seconds / 3))

        fault = make_fault(config.scenario, h, producer, config, proxy, cut_slave)
        report.faults.append(fault.run())

        remaining = config.seconds - (time.monotonic() - load_started)
        time.sleep(max(1.0, remaining))  # writes with the group whole again
        producer.stop()
        h.note(f"producer stopped: {len(producer.stats.acks)} acknowledged")
        drain_and_check(h, producer, report)
    finally:
        try:
            if producer is not None:
                producer.halt()
        except Exception:
            pass
        if proxy is not None:
            proxy.stop()
        if resolver_api is not None:
            resolver_api.close()
        h.stop()
        report.seconds = time.monotonic() - started
    (run_dir / "report.json").write_text(json.dumps(report.as_json(), indent=2) + "\n")
    return report


def drain_and_check(h: Harness, producer: Producer, report: Report) -> None:
    """Wait for the replicas to converge, read everything back from the master, stop the brokers
    cleanly and compare what they hold."""
    stats = producer.stats
    report.send_failures, report.abandoned, report.requests = dict(stats.failed_codes), len(stats.abandoned), stats.requests
    try:
        took = wait_until(h.converged, CONVERGE_TIMEOUT_S, "every replica at the same max offset", interval_s=0.25)
        h.note(f"replicas converged {took:.2f} s after the producer stopped")
    except TimeoutError as exc:
        report.problems.append(f"drain: {exc}: {h.levels()}")
    master = h.master_node()
    if master is None:
        report.problems.append("no master at the end: nothing to read back from")
    else:
        try:
            received = read_back(master.grpc_addr, TOPIC, QUEUES)
        except (RuntimeError, TimeoutError, grpc.RpcError, grpc.FutureTimeoutError) as exc:
            report.problems.append(f"reading back from {master.name} failed: {exc!r}")
        else:
            report.read_from = master.name
            report.delivery = check_delivery(producer.acks_snapshot(), stats.uncertain, received)
            h.note(f"read back {len(received)} messages from {master.name}")
    if h.monitor is not None:
        h.monitor.stop()
        report.masters_reported = {e: sorted(m) for e, m in masters_per_epoch_reported(h.monitor.reported()).items()}
    history = h.api.history(GROUP)
    (h.run_dir / "history.json").write_text(json.dumps(history, indent=2) + "\n")
    report.masters_in_history = {e: sorted(m) for e, m in masters_per_epoch_in_history(history).items()}
    h.note(f"controller history: {len(history)} transitions, {len(elections(history))} elections")
    checker = h.controlplane.manage("check_controller_invariants", GROUP, check=False)
    report.invariant_checker = (checker.returncode, (checker.stdout + checker.stderr).strip())
    report.broker_exit_codes = h.stop_brokers()
    guard = guard_errors(logs=[n.process.log_path for n in h.nodes])
    if guard:  # brokers/store/cuts.py: a refused cut of acknowledged data, or a copy that is no record
        report.problems.append(f"{len(guard)} broker log line(s) carry the acknowledged-data guard's marker, e.g. {guard[0]}")
    report.logs = compare_logs(
        {n.name: n.log_span() for n in h.nodes}, lambda name, lo, hi: next(n for n in h.nodes if n.name == name).read_log(lo, hi)
    )
    files = {n.name: n.epoch_entries() for n in h.nodes}
    report.epoch_files = {k: v if isinstance(v, str) else [(e.epoch, e.start_offset) for e in v] for k, v in files.items()}
    report.epoch_conflicts = epoch_file_conflicts({k: v for k, v in files.items() if not isinstance(v, str)})
    report.epoch_conflicts += [f"{k}: {v}" for k, v in files.items() if isinstance(v, str)]


def parse_args(argv: list[str] | None) -> tuple[ScenarioConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m chaos.runner", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", required=True, choices=SCENARIOS)
    p.add_argument("--replicas", type=int, choices=(2, 3), default=2)
    p.add_argument(
        "--all-ack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="allAckInSyncStateSet (default on); --no-all-ack is availability-first",
    )
    p.add_argument("--in-sync-replicas", type=int, default=1, help="inSyncReplicas (default 1)")
    p.add_argument("--seconds", type=float, default=12.0, help="produce at least this long (default 12)")
    p.add_argument("--rate", type=float, default=400.0, help="messages per second (default 400)")
    p.add_argument("--batch", type=int, default=8, help="messages per SendMessage (default 8)")
    p.add_argument("--heartbeat-interval-ms", type=int, default=1000, help="brokerHeartbeatInterval")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=3000, help="controllerHeartBeatTimeoutMills")
    p.add_argument(
        "--scan-interval-ms",
        type=int,
        default=1000,
        help="the controller's scanNotActiveBrokerInterval / scanInactiveMasterInterval for the run",
    )
    p.add_argument(
        "--controlplane-down-s", type=float, default=2.0, help="kill-with-controlplane: seconds uvicorn stays down (default 2)"
    )
    p.add_argument(
        "--stop-seconds", type=float, help="sigstop: seconds the master stays stopped (default 1.5 x the heartbeat timeout)"
    )
    p.add_argument(
        "--resolve",
        choices=("controller", "route"),
        default="controller",
        help="where the producer finds the master: replica info (default) or the topic route",
    )
    p.add_argument("--mode", choices=("controller", "classic"), default="controller")
    p.add_argument("--run-dir", type=Path)
    p.add_argument("--broker-conf", action="append", default=[], metavar="KEY=VALUE", help="an extra broker.conf line")
    p.add_argument("--json", action="store_true", help="also print the report as one JSON line on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    extra = dict(kv.split("=", 1) for kv in a.broker_conf)
    return ScenarioConfig(
        a.scenario,
        a.replicas,
        a.all_ack,
        a.in_sync_replicas,
        a.seconds,
        a.rate,
        a.batch,
        a.heartbeat_interval_ms,
        a.heartbeat_timeout_ms,
        a.scan_interval_ms,
        a.controlplane_down_s,
        a.stop_seconds,
        a.resolve,
        a.mode,
        a.run_dir,
        extra,
    ), a


def _terminate(signum, frame):  # SIGTERM: the same clean-up as Ctrl-C
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    config, args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        report = run(config, verbose=not args.quiet)
    except KeyboardInterrupt:
        print("interrupted: every process the run started has been stopped", file=sys.stderr)
        return 130
    print(report.human(), file=sys.stderr)
    if args.json:
        print(json.dumps(report.as_json()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
