"""Consumers across failover: a replica group under a steady produce load and several consumer groups
(pop: ReceiveMessage / AckMessage), in two scenarios, then the offset audit over the same run.

(a) ``controller``: 3 replicas in controller mode (allAckInSyncStateSet=true), ``--kills`` kill -9 of
    the master; after each the load runs ``--observe-s`` on the new master, then the killed broker
    is restarted and the next trial waits until it is back in the SyncStateSet.
(b) ``classic``: 3 replicas in classic mode (brokerId 0 SYNC_MASTER, SLAVEs) with
    enableSlaveActingMaster=true and the nameserver's supportActingMaster=true; ``--stops`` clean
    stops (SIGTERM) of the master for ``--down-s`` each, then it is restarted and waited for. A
    single group takes no writes while its master is away, so the consumers pause ``--backlog-s``
    before each stop: the backlog is what an acting master has to serve.

The load is the project's own (raw gRPC stubs of ``rocketmq.grpc_protocol``; chaos/workload.py's
producer, chaos/consumers.py's consumers), not the official Python client: that client keeps a
topic's route for 30 s and cannot reach a new master before then (a later issue). Our consumers ask
the control plane's route (``/api/v1/nameserver/routes/<topic>``, ``brokerGrpcAddrs["0"]``) again
after any failed call and every ``--route-refresh-s``; an ack whose broker is gone is sent to the
master the route names then, until the message's invisible time has passed. Every consumer group
pops every queue (invisible time 10 s, batch 16, long polling 1.5 s) and acks all it receives; each
delivery and each ack answered OK is recorded with its time.

Figures per scenario (the last line printed is one JSON object, ``{"controller": ..., "classic":
..., "totals": ..., "goals": ...}``):
  acked_lost             messages whose send was acknowledged that some group never received
                         (after a drain of up to ``--drain-timeout-s``)
  redelivered_after_ack  deliveries to a group that began after that group's ack of the message had
                         been answered OK (a second stored copy from a producer retry is not one)
  redelivered_ratio      redelivered_after_ack / deliveries
  consume_gap_s_median   per trial, the longest time (per group, then the worst group) from the fault
                         until the next fault (or the producer's stop) during which a group received
                         nothing although an acknowledged message was waiting for it; median over trials
                         (delivery_pause_s_median: the same without "waiting", raw pauses)
  audit_stale_replica_rollbacks, audit_pre_online_rollbacks
                         rollback findings of the offset audit (docs/audits.md: POST
                         /api/v1/audits/runs, run by Celery and Spark over the events the brokers
                         reported) with cause failover_stale_replica, resp.
                         former_master_without_pre_online_sync (or source pre_online_sync)

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/consumer_failover.py \\
        [--kills 10 --stops 5 --down-s 20 --rate 200 --groups 3 --scenarios controller,classic]
    quick: --kills 2 --stops 1

Goals: acked_lost = 0, redelivered_ratio <= 0.001, audit_* = 0, classic consume_gap_s_median <= 2.
Exit code 0 once the JSON is printed (a measurement), 1 when a scenario could not run. Each
scenario uses a database and Redis key prefix of its own (testkit/controlplane.py) and keeps logs,
broker stores and its audit event store (AUDIT_EVENTS_URI) in
test-artifacts/chaos/bench-consumer-failover-*/<scenario>/.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos.consumers import (  # noqa: E402
    ConsumerGroups,
    RouteCache,
    longest_pause,
    longest_stall,
    missing,
    redeliveries_after_ack,
)
from chaos.faults import Fault, FaultRecord, Kill9  # noqa: E402
from chaos.harness import QUEUES, TOPIC, Harness  # noqa: E402
from chaos.replicas import GROUP, GroupSettings  # noqa: E402
from chaos.workload import Producer  # noqa: E402
from testkit.controlplane import fresh_standalone_env  # noqa: E402
from testkit.procs import ARTIFACTS, wait_until  # noqa: E402
from testkit.stats import rounded_median  # noqa: E402

WARMUP_S = 3.0  # load on the whole group before the first fault
SETTLE_S = 2.0  # ... and between trials
REPORTED_S = 3.0  # after the drain: the brokers report their last commits (every second)
WHOLE_TIMEOUT_S = 60.0
AUDIT_POLL_S = 1.0
REDELIVERED_RATIO_GOAL = 0.001
CLASSIC_GAP_GOAL_S = 2.0


# --- faults: chaos/faults.py's, held a little longer ---------------------------------------------------


class ObservedKill9(Kill9):
    """kill -9 of the master; the load runs ``observe_s`` on the new master before the restart."""

    def __init__(self, h: Harness, producer: Producer, observe_s: float):
        super().__init__(h, producer)
        self.observe_s = observe_s

    def heal(self) -> None:
        time.sleep(self.observe_s)
        super().heal()


class StopMasterFor(Fault):
    """Classic mode: a clean stop (SIGTERM) of the brokerId 0 master for ``down_s``, then its
    restart. ``on_stopping`` runs once SIGTERM is sent (the consumers resume on the backlog)."""

    kind = "sigterm"

    def __init__(self, h: Harness, producer: Producer, down_s: float, on_stopping: Callable[[], None]):
        super().__init__(h, producer)
        self.down_s = down_s
        self.on_stopping = on_stopping

    def inject(self) -> None:
        master = self.h.nodes[0]  # the configured master; the route's id 0 may be an acting slave
        self._begin(master, master)
        master.process.terminate()
        self.on_stopping()
        master.process.stop()
        self.h.note(f"SIGTERM of the master {master.name}: stopped {time.monotonic() - self.record.at:.2f} s later")

    def recover_classic(self) -> None:
        time.sleep(max(0.0, self.record.at + self.down_s - time.monotonic()))
        super().recover_classic()


# --- one scenario --------------------------------------------------------------------------------------


@dataclass
class Trial:
    record: FaultRecord
    end: float  # time.monotonic() when the trial was over (the broker hit back in sync)
    observed_until: float | None = None  # ... when the next fault (or the producer's stop) came
    consume_gap_s: float | None = None  # the worst group's
    delivery_pause_s: float | None = None
    per_group_gap_s: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        r = self.record
        return {
            "kind": r.kind,
            "at": r.at,  # time.monotonic(), as in the records of deliveries and acks (consumers-*.csv)
            "node": r.node,
            "newMaster": r.new_master,
            "detectS": r.detect_s,
            "rtoS": r.rto_s,
            "writeGapS": r.longest_write_gap_s,
            "healS": r.heal_s,
            "trialS": round(self.end - r.at, 3),
            "observedS": round(self.observed_until - r.at, 3) if self.observed_until else None,
            "consumeGapS": self.consume_gap_s,
            "deliveryPauseS": self.delivery_pause_s,
            "perGroupGapS": self.per_group_gap_s,
            "problems": r.problems,
        }


def scenario_env(name: str, scenario_dir: Path) -> dict[str, str]:
    """A database and Redis prefix of the scenario's own; its audit event store in its folder."""
    env = fresh_standalone_env(f"consumer_failover_{name}")
    env.update(
        AUDIT_EVENTS_URI=str(scenario_dir / "offset-events"),
        AUDIT_LOOKBACK_DAYS="0",  # every event of the run, whatever the date
        AUDIT_SPARK_MASTER=env.get("AUDIT_SPARK_MASTER", "local[2]"),
    )
    return env


def group_whole(h: Harness) -> bool:
    if h.controller_mode:
        master = h.master_node()
        return master is not None and all(h.in_sync(n) for n in h.nodes if n is not master)
    return h.nodes[0].process.alive() and all(h.in_sync(n) for n in h.nodes[1:])


def run_trials(h: Harness, producer: Producer, consumers: ConsumerGroups, args, trials: list[Trial]) -> None:
    count = args.kills if h.controller_mode else args.stops
    for i in range(count):
        time.sleep(SETTLE_S)
        if trials:
            trials[-1].observed_until = time.monotonic()
        if h.controller_mode:
            fault: Fault = ObservedKill9(h, producer, args.observe_s)
        else:
            if not h.nodes[0].process.alive():
                raise RuntimeError(f"{h.nodes[0].name}, the master, is not running")
            consumers.pause()
            h.note(f"consumers paused {args.backlog_s:g} s: a backlog for the acting master")
            time.sleep(args.backlog_s)
            fault = StopMasterFor(h, producer, args.down_s, consumers.resume)
        try:
            record = fault.run()
        finally:
            consumers.resume()
        trials.append(Trial(record, time.monotonic()))
        print(
            f"{record.kind} trial {i + 1}/{count}: RTO {record.rto_s}, heal {record.heal_s}, problems {record.problems}",
            file=sys.stderr,
            flush=True,
        )
        if record.problems:
            wait_until(lambda: group_whole(h), WHOLE_TIMEOUT_S, "the group whole again after a failed trial")


def drain(consumers: ConsumerGroups, acked: list[str], timeout_s: float) -> float | None:
    """Wait until every group received every acknowledged message; the seconds that took, or None."""
    start = time.monotonic()
    while True:
        if all(not missing(acked, r.delivered_ids()) for r in consumers.records.values()):
            return round(time.monotonic() - start, 2)
        if time.monotonic() - start > timeout_s:
            return None
        time.sleep(1.0)


def run_audit(h: Harness, timeout_s: float) -> dict:
    """Start an offset audit over REST (as an operator's tool would), wait for it, count its rollbacks."""
    headers = {"Authorization": f"Bearer {h.admin_token}"}
    with httpx.Client(base_url=h.controlplane.url, headers=headers, timeout=10) as client:
        deadline = time.monotonic() + timeout_s
        while True:  # at most one run at a time: a scheduled one may be under way
            r = client.post("/api/v1/audits/runs")
            if r.status_code == 202:
                run = r.json()
                break
            if r.status_code != 409 or time.monotonic() > deadline:
                r.raise_for_status()
                raise TimeoutError("another audit run kept running")
            time.sleep(AUDIT_POLL_S)
        h.note(f"audit run {run['id']} queued")
        while run["status"] not in ("succeeded", "failed"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"audit run {run['id']} not finished within {timeout_s:g} s (stage {run['stage']})")
            time.sleep(AUDIT_POLL_S)
            run = client.get(f"/api/v1/audits/runs/{run['id']}").raise_for_status().json()
        h.note(f"audit run {run['id']} {run['status']}: {run['rollbacks']} rollback(s), {run['messagesAgain']} message(s) again")
        if run["status"] != "succeeded":
            return {"status": run["status"], "error": (run.get("error") or "")[-2000:]}
        findings = (
            client.get("/api/v1/audits/findings", params={"run": run["id"], "kind": "rollback", "limit": 10_000})
            .raise_for_status()
            .json()["findings"]
        )
    causes = Counter(f["cause"] for f in findings)
    return {
        "status": run["status"],
        "rollbacks": run["rollbacks"],
        "messagesAgain": run["messagesAgain"],
        "eventsScanned": run["eventsScanned"],
        "causes": dict(causes),
        "staleReplica": causes["failover_stale_replica"],
        "preOnline": sum(
            1 for f in findings if f["cause"] == "former_master_without_pre_online_sync" or f["source"] == "pre_online_sync"
        ),
        "findingsListed": len(findings),
    }


def write_records(consumers: ConsumerGroups, producer: Producer, folder: Path) -> None:
    """Every delivery and first OK ack per group, and every producer ack, as CSV (times: time.monotonic())."""
    with open(folder / "producer-acks.csv", "w") as f:
        f.write("message_id,node,queue_offset,at\n")
        for m, a in producer.acks_snapshot().items():
            f.write(f"{m},{a.node},{a.queue_offset},{a.at:.6f}\n")
    for name, record in consumers.records.items():
        with open(folder / f"consumers-{name}.csv", "w") as f:
            f.write("started,at,message_id,queue_id,queue_offset,attempt,addr,first_ok_ack\n")
            for d in record.deliveries:
                ack = record.first_ok_ack.get(d.message_id)
                f.write(
                    f"{d.started:.6f},{d.at:.6f},{d.message_id},{d.queue_id},{d.queue_offset},{d.attempt},{d.addr},"
                    f"{'' if ack is None else f'{ack:.6f}'}\n"
                )


def measure_gaps(trials: list[Trial], consumers: ConsumerGroups, producer: Producer) -> None:
    acks = producer.acks_snapshot()
    for name, record in consumers.records.items():
        first = record.first_delivery()
        waiting = [(a.at, first.get(m, math.inf)) for m, a in acks.items()]
        delivered_at = [d.at for d in record.deliveries]
        for t in trials:
            until = t.observed_until or t.end
            t.per_group_gap_s[name] = round(longest_stall(delivered_at, waiting, t.record.at, until), 3)
            pause = round(longest_pause(delivered_at, t.record.at, until), 3)
            t.delivery_pause_s = max(t.delivery_pause_s or 0.0, pause)
    for t in trials:
        t.consume_gap_s = max(t.per_group_gap_s.values(), default=None)


def summary(
    trials: list[Trial],
    producer: Producer,
    consumers: ConsumerGroups,
    drain_s: float | None,
    audit: dict | None,
    problems: list[str],
    controller_mode: bool,
) -> dict:
    acked = list(producer.acks_snapshot())
    lost_by_group = {g: missing(acked, r.delivered_ids()) for g, r in consumers.records.items()}
    lost = set().union(*lost_by_group.values())
    again = copies = 0
    for r in consumers.records.values():
        a, c = redeliveries_after_ack(r.deliveries, r.first_ok_ack)
        again, copies = again + a, copies + c
    consumed = consumers.deliveries()
    gaps = [t.consume_gap_s for t in trials if t.consume_gap_s is not None]
    pauses = [t.delivery_pause_s for t in trials if t.delivery_pause_s is not None]

    def counts(attr: str) -> dict[str, int]:
        total: Counter = Counter()
        for r in consumers.records.values():
            total.update(getattr(r, attr))
        return dict(total)

    return {
        "trials": len(trials),
        "failed_trials": sum(1 for t in trials if t.record.problems),
        "produced": len(acked) + len(producer.stats.abandoned),
        "acked": len(acked),
        "consumed": consumed,
        "consumer_groups": len(consumers.records),
        "acked_lost": len(lost),
        "acked_lost_per_group": {g: len(ids) for g, ids in lost_by_group.items()},
        "redelivered_after_ack": again,
        "redelivered_ratio": round(again / consumed, 6) if consumed else None,
        "producer_duplicates_delivered": copies,
        "consume_gap_s_median": rounded_median(gaps),
        "consume_gap_s_max": round(max(gaps), 3) if gaps else None,
        "delivery_pause_s_median": rounded_median(pauses),
        "audit_stale_replica_rollbacks": audit.get("staleReplica") if audit else None,
        "audit_pre_online_rollbacks": audit.get("preOnline") if audit else None,
        "audit_rollbacks": audit.get("rollbacks") if audit else None,
        "audit_messages_again": audit.get("messagesAgain") if audit else None,
        "audit_causes": audit.get("causes") if audit else None,
        "audit_status": audit.get("status") if audit else None,
        "acks_ok": sum(r.acks_ok for r in consumers.records.values()),
        "acks_given_up": sum(r.acks_given_up for r in consumers.records.values()),
        "ack_failures": counts("ack_failures"),
        "receive_failures": counts("receive_failures"),
        "route_lookups": consumers.route.lookups,
        "send_failures": dict(producer.stats.failed_codes),
        "drain_s": drain_s,
        # fault -> first write on the new master; in classic mode the master itself comes back, and a
        # write acknowledged while it shut down would count: the write gap tells more there
        "rto_median_s": rounded_median([t.record.rto_s for t in trials if t.record.rto_s is not None])
        if controller_mode
        else None,
        "write_gap_s_median": rounded_median(
            [t.record.longest_write_gap_s for t in trials if t.record.longest_write_gap_s is not None]
        ),
        "problems": problems + [f"trial {i + 1}: {p}" for i, t in enumerate(trials) for p in t.record.problems],
    }


def quietly(stop: Callable[[], object]) -> None:
    """Stop something on the way out, an error there not hiding the one that got us here."""
    try:
        stop()
    except Exception as exc:
        print(f"stopping the load: {exc!r}", file=sys.stderr)


def run_scenario(name: str, settings: GroupSettings, args, run_dir: Path) -> tuple[dict, list[dict]]:
    """(summary, trials); raises when the test bed itself could not be set up."""
    scenario_dir = run_dir / name
    h = Harness(settings, scenario_dir, scenario_env(name, scenario_dir), verbose=not args.quiet)
    producer: Producer | None = None
    consumers: ConsumerGroups | None = None
    apis = []
    trials: list[Trial] = []
    problems: list[str] = []
    try:
        h.start()
        if not h.controller_mode:
            h.api.update_nameserver_config({"supportActingMaster": True, "notifyMinBrokerIdChanged": True})
        producer_api, route_api = h.new_api(), h.new_api()
        apis += [producer_api, route_api]
        via = "controller" if h.controller_mode else "route"
        producer = Producer(TOPIC, lambda: h.resolve(producer_api, via), rate=args.rate, batch=8)
        route = RouteCache(lambda: route_api.master_grpc_addr_from_route(TOPIC, GROUP), args.route_refresh_s)
        consumers = ConsumerGroups(
            TOPIC,
            QUEUES,
            [f"cf-group-{i + 1}" for i in range(args.groups)],
            route,
            batch=args.batch,
            invisible_s=args.invisible_s,
            long_polling_s=args.long_polling_s,
        )
        consumers.start()
        producer.start()
        wait_until(lambda: producer.stats.acks, 30, "the first acknowledged write")
        time.sleep(WARMUP_S)
        try:
            run_trials(h, producer, consumers, args, trials)
        except (RuntimeError, TimeoutError) as exc:  # the group did not come back: report what was measured
            problems.append(f"trials stopped: {exc}")
        time.sleep(SETTLE_S)
        if trials:
            trials[-1].observed_until = time.monotonic()
        producer.stop()
        h.note(f"producer stopped: {len(producer.stats.acks)} acknowledged; draining the consumer groups")
        drain_s = drain(consumers, list(producer.acks_snapshot()), args.drain_timeout_s)
        if drain_s is None:
            problems.append(f"not every group received every acknowledged message within {args.drain_timeout_s:g} s")
        time.sleep(REPORTED_S)
        consumers.stop()
        h.note(f"consumers stopped after {consumers.deliveries()} deliveries; stopping the brokers, then the audit")
        h.stop_brokers()  # the audit's Spark gets the cores
        audit = None
        try:
            audit = run_audit(h, args.audit_timeout_s)
        except (httpx.HTTPError, TimeoutError, KeyError) as exc:
            problems.append(f"audit: {exc!r}")
        measure_gaps(trials, consumers, producer)
        write_records(consumers, producer, scenario_dir)
        return summary(trials, producer, consumers, drain_s, audit, problems, h.controller_mode), [t.as_dict() for t in trials]
    finally:
        if consumers is not None:
            quietly(consumers.stop)
        if producer is not None and producer.is_alive():
            quietly(lambda: producer.stop(grace_s=0))
        for api in apis:
            api.close()
        h.stop()


# --- the run -------------------------------------------------------------------------------------------


def goals(results: dict[str, dict]) -> dict[str, bool | None]:
    out: dict[str, bool | None] = {}
    for name, s in results.items():
        if "error" in s:
            out[f"{name}_ran"] = False
            continue
        out[f"{name}_acked_lost_zero"] = s["acked_lost"] == 0
        ratio = s["redelivered_ratio"]
        out[f"{name}_redelivered_ratio_ok"] = None if ratio is None else ratio <= REDELIVERED_RATIO_GOAL
        for key in ("audit_stale_replica_rollbacks", "audit_pre_online_rollbacks"):
            out[f"{name}_{key}_zero"] = None if s[key] is None else s[key] == 0
    gap = results.get("classic", {}).get("consume_gap_s_median")
    if "classic" in results and "error" not in results["classic"]:
        out["classic_consume_gap_ok"] = None if gap is None else gap <= CLASSIC_GAP_GOAL_S
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="controller,classic", help="comma-separated: controller, classic")
    p.add_argument("--kills", type=int, default=10, help="controller: kill -9 trials")
    p.add_argument("--stops", type=int, default=5, help="classic: SIGTERM trials")
    p.add_argument("--down-s", type=float, default=20.0, help="classic: how long the master stays stopped")
    p.add_argument("--backlog-s", type=float, default=3.0, help="classic: consumers paused before each stop")
    p.add_argument("--observe-s", type=float, default=3.0, help="controller: load on the new master before the restart")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--rate", type=float, default=200.0, help="messages per second")
    p.add_argument("--groups", type=int, default=3, help="consumer groups")
    p.add_argument("--batch", type=int, default=16, help="ReceiveMessage batch size")
    p.add_argument("--invisible-s", type=float, default=10.0)
    p.add_argument("--long-polling-s", type=float, default=1.5)
    p.add_argument("--route-refresh-s", type=float, default=2.0, help="consumers ask for the route at least this often")
    p.add_argument("--drain-timeout-s", type=float, default=60.0)
    p.add_argument("--audit-timeout-s", type=float, default=300.0)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()

    scenarios = {
        "controller": GroupSettings(replicas=args.replicas, all_ack=True),
        "classic": GroupSettings(replicas=args.replicas, all_ack=True, mode="classic", extra={"enableSlaveActingMaster": "true"}),
    }
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(chosen) - set(scenarios)
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")

    started = time.monotonic()
    run_dir = ARTIFACTS / "chaos" / f"bench-consumer-failover-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    details: dict[str, list[dict]] = {}
    for name in chosen:
        t0 = time.monotonic()
        try:
            results[name], details[name] = run_scenario(name, scenarios[name], args, run_dir)
        except Exception as exc:  # the test bed did not come up: say so and go on with the next one
            traceback.print_exc()
            results[name] = {"error": repr(exc)}
        results[name]["seconds"] = round(time.monotonic() - t0, 1)

    ran = [s for s in results.values() if "error" not in s]
    consumed = sum(s["consumed"] for s in ran)
    again = sum(s["redelivered_after_ack"] for s in ran)
    out = {
        **results,
        "totals": {
            "trials": sum(s["trials"] for s in ran),
            "acked": sum(s["acked"] for s in ran),
            "consumed": consumed,
            "acked_lost": sum(s["acked_lost"] for s in ran),
            "redelivered_after_ack": again,
            "redelivered_ratio": round(again / consumed, 6) if consumed else None,
        },
        "goals": goals(results),
        "seconds": round(time.monotonic() - started, 1),
        "run_dir": str(run_dir),
    }
    (run_dir / "report.json").write_text(json.dumps({**out, "trials": details}, indent=2) + "\n")
    print(json.dumps(out))
    return 1 if len(ran) < len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
