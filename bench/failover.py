"""Failover of a 2-replica group in controller mode under a steady produce load: 20 kill -9 of the
master, then 5 SIGSTOP of the master past its heartbeat timeout (brokerHeartbeatInterval=1000,
controllerHeartBeatTimeoutMills=3000, allAckInSyncStateSet=true).

Per trial: detect = fault -> the controller's election committed (history), elect = that commit ->
first acknowledged write on the new master, RTO = fault -> that write; then the broker hit is
restarted (or resumed) and the next trial waits until it is back in the SyncStateSet. At the end,
everything acknowledged is read back from the last master (lost_acked). The last line printed is
one JSON object.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/failover.py [--kills 20 --stops 5 --rate 400]

Goal: rto_median_s <= 1, rto_p99_s <= 2, lost_acked = 0, stop_rto_median_s <= heartbeat timeout + 1.
Uses a database and Redis key prefix of its own (testkit/controlplane.py); logs and stores in
test-artifacts/chaos/bench-failover-*/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos.faults import FaultRecord, Kill9, SigStop  # noqa: E402
from chaos.harness import TOPIC, Harness  # noqa: E402
from chaos.replicas import GroupSettings  # noqa: E402
from chaos.runner import Report, ScenarioConfig, drain_and_check  # noqa: E402
from chaos.workload import Producer  # noqa: E402
from testkit.controlplane import fresh_standalone_env  # noqa: E402
from testkit.procs import ARTIFACTS, wait_until  # noqa: E402
from testkit.stats import rounded_median, rounded_percentile  # noqa: E402

SETTLE_S = 1.0  # load on the whole group between trials


def summary(kills: list[FaultRecord], stops: list[FaultRecord], report: Report) -> dict:
    def times(records: list[FaultRecord], attr: str) -> list[float]:
        return [getattr(r, attr) for r in records if getattr(r, attr) is not None]

    rto = times(kills, "rto_s")
    d = report.delivery
    return {
        "trials": len(kills),
        "stop_trials": len(stops),
        "rto_median_s": rounded_median(rto),
        "rto_p99_s": rounded_percentile(rto, 99),
        "rto_max_s": round(max(rto), 3) if rto else None,
        "detect_median_s": rounded_median(times(kills, "detect_s")),
        "elect_median_s": rounded_median(times(kills, "elect_s")),
        "heal_median_s": rounded_median(times(kills, "heal_s")),
        "lost_acked": len(d.lost) if d else None,
        "lost_acked_probes": d.lost_probes if d else None,
        "acked": d.acked if d else None,
        "duplicates": d.duplicates if d else None,
        "stop_rto_median_s": rounded_median(times(stops, "rto_s")),
        "stop_detect_median_s": rounded_median(times(stops, "detect_s")),
        "stop_deposed_master_acks": sum(r.stale_probe_codes.get("OK", 0) for r in stops),
        "failed_trials": sum(1 for r in kills + stops if r.problems or r.rto_s is None),
        "logs_identical": report.logs.identical if report.logs else None,
        "invariants_ok": report.invariant_checker[0] == 0 if report.invariant_checker else None,
        "failures": report.failures(),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--stops", type=int, default=5)
    p.add_argument("--rate", type=float, default=400.0)
    p.add_argument("--heartbeat-timeout-ms", type=int, default=3000)
    p.add_argument("--scan-interval-ms", type=int, default=1000)
    p.add_argument(
        "--stops-first",
        action="store_true",
        help="the SIGSTOP trials before the kill -9 ones (a broker once stopped keeps its websocket)",
    )
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()

    config = ScenarioConfig(
        "kill9",
        replicas=2,
        all_ack=True,
        heartbeat_interval_ms=1000,
        heartbeat_timeout_ms=args.heartbeat_timeout_ms,
        scan_interval_ms=args.scan_interval_ms,
        rate=args.rate,
    )
    run_dir = ARTIFACTS / "chaos" / f"bench-failover-{time.strftime('%Y%m%d-%H%M%S')}"
    env = fresh_standalone_env("failover")
    settings: GroupSettings = config.group_settings()
    h = Harness(settings, run_dir, env, scan_interval_ms=config.scan_interval_ms, verbose=not args.quiet)
    report = Report(config, run_dir)
    kills: list[FaultRecord] = []
    stops: list[FaultRecord] = []
    producer = None
    try:
        h.start()
        resolver_api = h.new_api()
        producer = Producer(TOPIC, lambda: h.resolve(resolver_api), rate=config.rate, batch=config.batch)
        producer.start()
        wait_until(lambda: producer.stats.acks, 30, "the first acknowledged write")
        try:
            plan = [("kill9", args.kills, kills), ("sigstop", args.stops, stops)]
            for kind, count, records in reversed(plan) if args.stops_first else plan:
                for i in range(count):
                    time.sleep(SETTLE_S)
                    fault = Kill9(h, producer) if kind == "kill9" else SigStop(h, producer)
                    record = fault.run()
                    records.append(record)
                    report.faults.append(record)
                    print(
                        f"{kind} trial {i + 1}/{count}: detect {record.detect_s}, elect {record.elect_s}, RTO "
                        f"{record.rto_s}, heal {record.heal_s}, problems {record.problems}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if record.problems:
                        wait_until(
                            lambda: (
                                h.master_node() is not None and all(h.in_sync(n) for n in h.nodes if n is not h.master_node())
                            ),
                            60,
                            "the group whole again after a failed trial",
                        )
        except (RuntimeError, TimeoutError) as exc:  # the group did not come back: report what was measured
            report.problems.append(f"trials stopped: {exc}")
        time.sleep(SETTLE_S)
        producer.stop()
        drain_and_check(h, producer, report)
    finally:
        if producer is not None and producer.is_alive():
            try:
                producer.stop(grace_s=0)
            except Exception:
                pass
        h.stop()
    (run_dir / "report.json").write_text(json.dumps(report.as_json(), indent=2) + "\n")
    print(report.human(), file=sys.stderr)
    print(json.dumps(summary(kills, stops, report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
