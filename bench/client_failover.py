"""Failover as the official RocketMQ Python client sees it: a 3-replica group in controller mode
(allAckInSyncStateSet=true, controllerHeartBeatTimeoutMills=3000) under the client's own Producer and
SimpleConsumer, each in a process of its own (chaos/official_client.py), both given every replica's
gRPC address joined with ";" as their access point. ``--kills`` kill -9 of the master (the killed
broker is then restarted and the next trial waits until it is back in the SyncStateSet), then
``--stops`` SIGSTOP of the master for ``--stop-s`` and SIGCONT (then the group must converge).

The producer sends one message at a time (a pause of ``--interval-ms`` after each answer) and records
every send's final answer after the client's own retries (ack or fail); the consumer receives (batch
32, invisible 30 s) and acks everything, recording every delivery. All times are ``time.time()``.

Per trial: ``fault`` is the kill -9 / the SIGSTOP; ``recovered`` is, for a kill, the later of the
controller's election commit and the first acknowledged send after the fault, for a stop the SIGCONT;
the trial's window runs from the fault to ``recovered + --window-s`` (10 s), or to the next fault /
the producer's stop if that comes first (it does not: a trial lasts at least its window).

Figures (the last line printed is one JSON object):
  send_gap_s_median, send_gap_s_p99   kill trials: the longest time within the window without an
                                      acknowledged send (counted from the fault, not from the last
                                      ack before it); stop_send_gap_s_median / _p99: the same over
                                      the SIGSTOP trials
  failed_sends_after_retries          "fail" events of the whole run, by error text and by phase
                                      (fault->election, election->recovered, recovered->heal, heal,
                                      after heal; heal = the restart / rejoin of the broker hit)
  acked_lost                          acknowledged ids never delivered by the end (the consumer is
                                      drained up to ``--drain-s`` after the producer stops)
  consume_gap_s_median                kill trials: the longest time within the window without a
                                      delivery (consume_stall_s_median: only while an acknowledged,
                                      undelivered message existed)
  late_deliveries                     acknowledged messages that some trial found undelivered
                                      ``--window-s`` after it recovered although their send had been
                                      acknowledged by the time it recovered (acked <= recovered and
                                      first delivery > recovered + window, or never); each id once
  drain_s                             the producer's stop -> every acknowledged id delivered (idle
                                      queues are long-polled in random order: chaos/official_client.py)
  trials, stop_trials, acked, delivered, elapsed_s, and per trial the details in report.json
  (failedSends there: from the trial's fault to the next one).

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/client_failover.py [--kills 10 --stops 5 --stop-s 12]
    quick: --kills 2 --stops 1

Goals: send_gap_s_median <= 0.5, send_gap_s_p99 <= 1, stop_send_gap_s_median <= heartbeat timeout
+ 1 s (4 s), acked_lost = 0, late_deliveries = 0, failed_sends_after_retries = 0. Exit code 0 once
the JSON is printed (a measurement). Uses a database and Redis key prefix of its own
(testkit/controlplane.py); logs (the client library's too), broker stores and the clients' event
files in test-artifacts/chaos/bench-client-failover-*/.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos.client_load import ClientKill9, ClientSigStop, drain, group_whole, longest_quiet, stop_clients  # noqa: E402
from chaos.consumers import longest_stall  # noqa: E402
from chaos.faults import RECOVERY_TIMEOUT_S, FaultRecord  # noqa: E402
from chaos.harness import TOPIC, Harness  # noqa: E402
from chaos.official_client import EventLog, client_process  # noqa: E402
from chaos.replicas import GroupSettings  # noqa: E402
from testkit.controlplane import fresh_standalone_env  # noqa: E402
from testkit.procs import ARTIFACTS, Process, wait_until  # noqa: E402
from testkit.stats import rounded_median, rounded_percentile  # noqa: E402

CONSUMER_GROUP = "client-failover"
WARMUP_S = 3.0  # load on the whole group before the first fault
SETTLE_S = 1.0  # at least this long between a trial's heal and the next fault
WHOLE_TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0
SEND_GAP_MEDIAN_GOAL_S = 0.5
SEND_GAP_P99_GOAL_S = 1.0


# --- one trial -------------------------------------------------------------------------------------------


@dataclass
class Trial:
    kind: str
    fault: ClientKill9 | ClientSigStop
    recovered: float  # time.time(), see the module's docstring
    window_end: float = math.inf
    send_gap_s: float | None = None
    send_gap_from_s: float | None = None  # the gap's start, seconds after the fault
    send_gap_phase: str | None = None
    consume_gap_s: float | None = None
    consume_stall_s: float | None = None
    failed_sends: int = 0
    late: int = 0

    @property
    def record(self) -> FaultRecord:
        return self.fault.record

    @property
    def at(self) -> float:
        return self.record.at_wall

    def phase(self, t: float) -> str:
        """Which part of this trial ``t`` (time.time()) falls in."""
        r, f = self.record, self.fault
        elected = r.at_wall + r.detect_s if r.detect_s is not None else None
        bounds = [
            ("fault->election", elected),
            ("election->recovered", self.recovered),
            ("recovered->heal", f.heal_started),
            ("heal", f.healed),
        ]
        for name, until in bounds:
            if until is not None and t < until:
                return name
        return "after heal"

    def as_dict(self) -> dict:
        r, f = self.record, self.fault

        def rel(t: float | None) -> float | None:
            return None if t is None or math.isinf(t) else round(t - r.at_wall, 3)

        return {
            "kind": self.kind,
            "atWall": r.at_wall,
            "node": r.node,
            "oldMasterId": r.old_master_id,
            "newMasterId": r.new_master_id,
            "newEpoch": r.new_epoch,
            "electionS": r.detect_s,
            "firstAckS": round(r.rto_s, 3) if r.rto_s is not None else None,
            "recoveredS": rel(self.recovered),
            "healStartS": rel(f.heal_started),
            "healedS": rel(f.healed),
            "windowS": rel(self.window_end),
            "sendGapS": self.send_gap_s,
            "sendGapFromS": self.send_gap_from_s,
            "sendGapPhase": self.send_gap_phase,
            "consumeGapS": self.consume_gap_s,
            "consumeStallS": self.consume_stall_s,
            "failedSends": self.failed_sends,
            "late": self.late,
            "problems": r.problems,
        }


def recovered_at(fault: ClientKill9 | ClientSigStop) -> float:
    r = fault.record
    if isinstance(fault, ClientSigStop) and fault.resumed is not None:
        return fault.resumed
    known = [s for s in (r.detect_s, r.rto_s) if s is not None]
    return r.at_wall + (max(known) if known else RECOVERY_TIMEOUT_S)


def run_trials(h: Harness, producer: EventLog, clients: list[Process], args, trials: list[Trial]) -> None:
    plan = [("kill9", args.kills), ("sigstop", args.stops)]
    for kind, count in plan:
        for i in range(count):
            for p in clients:
                p.check_alive()
            fault = ClientKill9(h, producer) if kind == "kill9" else ClientSigStop(h, producer, stop_s=args.stop_s)
            fault.run()
            trial = Trial(kind, fault, recovered_at(fault))
            trials.append(trial)
            r = trial.record
            print(
                f"{kind} trial {i + 1}/{count}: election {r.detect_s}, first ack {r.rto_s}, heal {r.heal_s}, "
                f"problems {r.problems}",
                file=sys.stderr,
                flush=True,
            )
            if r.problems:
                wait_until(lambda: group_whole(h), WHOLE_TIMEOUT_S, "the group whole again after a failed trial")
            # the next fault only once this one's window is over (its figures are its own)
            time.sleep(max(SETTLE_S, trial.recovered + args.window_s - time.time()))


# --- figures (pure) --------------------------------------------------------------------------------------


def error_kind(text: str) -> str:
    """An error text with its ids, addresses and numbers blurred, so that equal causes count together."""
    text = re.sub(r"[0-9A-Fa-f]{12,}", "<id>", " ".join(text.split()))
    return re.sub(r"\d+", "#", text)[:200]


def measure(
    trials: list[Trial], acks: list[dict], fails: list[dict], deliveries: list[dict], window_s: float, ends_at: float
) -> set[str]:
    """Fill each trial's figures; returns the ids delivered late (see the docstring)."""
    ack_times = sorted(e["t"] for e in acks)
    fail_times = sorted(e["t"] for e in fails)
    delivery_times = sorted(e["t"] for e in deliveries)
    first: dict[str, float] = {}
    for e in deliveries:
        if e["t"] < first.get(e["id"], math.inf):
            first[e["id"]] = e["t"]
    waiting = [(e["t"], first.get(e["id"], math.inf)) for e in acks]
    late: set[str] = set()
    for i, t in enumerate(trials):
        next_fault = trials[i + 1].at if i + 1 < len(trials) else ends_at
        t.window_end = min(t.recovered + window_s, next_fault, ends_at)
        t.failed_sends = bisect.bisect_left(fail_times, next_fault) - bisect.bisect_left(fail_times, t.at)
        gap, gap_from = longest_quiet(ack_times, t.at, t.window_end)
        t.send_gap_s, t.send_gap_from_s, t.send_gap_phase = round(gap, 3), round(gap_from - t.at, 3), t.phase(gap_from)
        t.consume_gap_s = round(longest_quiet(delivery_times, t.at, t.window_end)[0], 3)
        t.consume_stall_s = round(longest_stall(delivery_times, waiting, t.at, t.window_end), 3)
        due = t.recovered + window_s
        found = {e["id"] for e in acks if e["t"] <= t.recovered and first.get(e["id"], math.inf) > due}
        t.late = len(found)
        late |= found
    return late


def attribute(trials: list[Trial], t: float) -> str:
    """The phase of the run ``t`` falls in: before the first fault, or a trial's phase."""
    starts = [x.at for x in trials]
    i = bisect.bisect_right(starts, t) - 1
    return "before the first fault" if i < 0 else f"{trials[i].kind}: {trials[i].phase(t)}"


def client_log_summary(path: Path, top: int = 6) -> dict:
    """Lines per level of the client library's log, and its most frequent warnings and errors."""
    levels: Counter = Counter()
    messages: Counter = Counter()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return {}
    for line in lines:
        m = re.match(r"\S+ \S+ \[(\w+)\] (.*)", line)
        if not m:
            continue
        levels[m.group(1)] += 1
        if m.group(1) in ("WARNING", "ERROR", "CRITICAL"):
            messages[f"{m.group(1)} {error_kind(m.group(2))[:160]}"] += 1
    return {"levels": dict(levels), "top": dict(messages.most_common(top))}


def summary(trials: list[Trial], producer: EventLog, consumer: EventLog, late: set[str], extra: dict) -> dict:
    acks, fails = producer.of("ack"), producer.of("fail")
    deliveries = consumer.of("delivery")
    kills = [t for t in trials if t.kind == "kill9"]
    stops = [t for t in trials if t.kind == "sigstop"]
    delivered = {e["id"] for e in deliveries}
    acked_ids = [e["id"] for e in acks]
    lost = [m for m in acked_ids if m not in delivered]
    first: dict[str, float] = {}
    for e in deliveries:
        first.setdefault(e["id"], e["t"])
    lags = [first[e["id"]] - e["t"] for e in acks if e["id"] in first]
    send_s = [e["t"] - e["sent"] for e in acks]

    def values(ts: list[Trial], attr: str) -> list[float]:
        return [getattr(t, attr) for t in ts if getattr(t, attr) is not None]

    def record_values(ts: list[Trial], attr: str) -> list[float]:
        return [getattr(t.record, attr) for t in ts if getattr(t.record, attr) is not None]

    return {
        "trials": len(kills),
        "stop_trials": len(stops),
        "send_gap_s_median": rounded_median(values(kills, "send_gap_s")),
        "send_gap_s_p99": rounded_percentile(values(kills, "send_gap_s"), 99),
        "send_gap_s_max": max(values(kills, "send_gap_s"), default=None),
        "send_gap_phases": dict(Counter(t.send_gap_phase for t in kills)),
        "stop_send_gap_s_median": rounded_median(values(stops, "send_gap_s")),
        "stop_send_gap_s_p99": rounded_percentile(values(stops, "send_gap_s"), 99),
        "stop_send_gap_phases": dict(Counter(t.send_gap_phase for t in stops)),
        "failed_sends_after_retries": len(fails),
        "failed_sends_by_error": dict(Counter(error_kind(e["error"]) for e in fails).most_common()),
        "failed_sends_by_phase": dict(Counter(attribute(trials, e["t"]) for e in fails).most_common()),
        "acked_lost": len(lost),
        "consume_gap_s_median": rounded_median(values(kills, "consume_gap_s")),
        "consume_gap_s_max": max(values(kills, "consume_gap_s"), default=None),
        "consume_stall_s_median": rounded_median(values(kills, "consume_stall_s")),
        "stop_consume_gap_s_median": rounded_median(values(stops, "consume_gap_s")),
        "late_deliveries": len(late),
        "late_by_trial": [t.late for t in trials],
        "election_s_median": rounded_median(record_values(kills, "detect_s")),
        "stop_election_s_median": rounded_median(record_values(stops, "detect_s")),
        "heal_s_median": rounded_median(record_values(kills, "heal_s")),
        "acked": len(acks),
        "sends": len(acks) + len(fails),
        "delivered": len(delivered),
        "deliveries": len(deliveries),
        "redeliveries": len(deliveries) - len(delivered),
        "delivery_lag_s_median": rounded_median(lags),
        "delivery_lag_s_p99": rounded_percentile(lags, 99),
        "send_s_p99": rounded_percentile(send_s, 99),
        "send_s_max": round(max(send_s), 3) if send_s else None,
        "ack_failures": dict(Counter(error_kind(e["error"]) for e in consumer.of("ack_fail")).most_common()),
        "receive_failures": dict(Counter(error_kind(e["error"]) for e in consumer.of("receive_fail")).most_common()),
        "failed_trials": sum(1 for t in trials if t.record.problems),
        **extra,
    }


def goals(s: dict, heartbeat_timeout_ms: int) -> dict[str, bool | None]:
    def at_most(key: str, limit: float) -> bool | None:
        return None if s[key] is None else s[key] <= limit

    return {
        "send_gap_median_ok": at_most("send_gap_s_median", SEND_GAP_MEDIAN_GOAL_S),
        "send_gap_p99_ok": at_most("send_gap_s_p99", SEND_GAP_P99_GOAL_S),
        "stop_send_gap_median_ok": at_most("stop_send_gap_s_median", heartbeat_timeout_ms / 1000 + 1),
        "acked_lost_zero": s["acked_lost"] == 0,
        "late_deliveries_zero": s["late_deliveries"] == 0,
        "failed_sends_zero": s["failed_sends_after_retries"] == 0,
    }


# --- the run ---------------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--stops", type=int, default=5)
    p.add_argument("--stop-s", type=float, default=12.0, help="how long a SIGSTOP holds the master")
    p.add_argument("--window-s", type=float, default=10.0, help="a trial's window after it recovered")
    p.add_argument("--interval-ms", type=float, default=5.0, help="the producer's pause after each send")
    p.add_argument("--drain-s", type=float, default=60.0)
    p.add_argument("--heartbeat-timeout-ms", type=int, default=3000)
    p.add_argument("--scan-interval-ms", type=int, default=1000)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()

    started = time.monotonic()
    run_dir = ARTIFACTS / "chaos" / f"bench-client-failover-{time.strftime('%Y%m%d-%H%M%S')}"
    settings = GroupSettings(replicas=3, all_ack=True, mode="controller", heartbeat_timeout_ms=args.heartbeat_timeout_ms)
    h = Harness(
        settings, run_dir, fresh_standalone_env("client_failover"), scan_interval_ms=args.scan_interval_ms, verbose=not args.quiet
    )
    logs = run_dir / "logs"
    producer_log, consumer_log = EventLog(run_dir / "producer.jsonl"), EventLog(run_dir / "consumer.jsonl")
    clients: list[Process] = []
    trials: list[Trial] = []
    problems: list[str] = []
    drain_s = None
    try:
        h.start()
        access = ";".join(n.grpc_addr for n in h.nodes)
        common = ("--access", access, "--topic", TOPIC)
        consumer = client_process(
            "consume", "client-consumer", logs, h.env, *common, "--group", CONSUMER_GROUP, "--out", str(consumer_log.path)
        )
        producer = client_process(
            "produce",
            "client-producer",
            logs,
            h.env,
            *common,
            "--out",
            str(producer_log.path),
            "--interval-ms",
            str(args.interval_ms),
        )
        clients += [consumer.start(), producer.start()]
        h.note(f"official client processes started with access point {access}")
        wait_until(
            lambda: producer.check_alive() and producer_log.of("ack"), START_TIMEOUT_S, "the client's first acknowledged send"
        )
        wait_until(lambda: consumer.check_alive() and consumer_log.of("delivery"), START_TIMEOUT_S, "the client's first delivery")
        time.sleep(WARMUP_S)
        try:
            run_trials(h, producer_log, clients, args, trials)
        except (RuntimeError, TimeoutError) as exc:  # the group did not come back: report what was measured
            problems.append(f"trials stopped: {exc}")
        time.sleep(SETTLE_S)
        producer_code = producer.stop()
        producer_stopped = time.time()
        h.note(f"producer stopped (exit code {producer_code}): {len(producer_log.of('ack'))} acknowledged; draining")
        drain_s = drain(producer_log, consumer_log, args.drain_s)
        if drain_s is None:
            problems.append(f"not every acknowledged message was delivered within {args.drain_s:g} s")
        consumer_code = consumer.stop()
        h.note(f"consumer stopped (exit code {consumer_code}) after {len(consumer_log.of('delivery'))} deliveries")
        h.stop_brokers()  # the slaves first: no election while the group shuts down
        if producer_code or consumer_code:
            problems.append(f"client exit codes: producer {producer_code}, consumer {consumer_code}")
    finally:
        stop_clients(clients)
        h.stop()

    late = measure(
        trials, producer_log.of("ack"), producer_log.of("fail"), consumer_log.of("delivery"), args.window_s, producer_stopped
    )
    client_logs = {role: client_log_summary(logs / f"client-{role}-rocketmq.log") for role in ("producer", "consumer")}
    out = summary(
        trials,
        producer_log,
        consumer_log,
        late,
        {
            "drain_s": drain_s,
            "client_log_levels": {role: s.get("levels") for role, s in client_logs.items()},
            "problems": problems + [f"trial {i + 1}: {p}" for i, t in enumerate(trials) for p in t.record.problems],
        },
    )
    out["goals"] = goals(out, args.heartbeat_timeout_ms)
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    out["run_dir"] = str(run_dir)
    details = {**out, "trials_detail": [t.as_dict() for t in trials], "client_logs": client_logs}
    (run_dir / "report.json").write_text(json.dumps(details, indent=2) + "\n")
    for role, s in client_logs.items():
        for line, n in s.get("top", {}).items():
            print(f"client {role} log: {n} x {line}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
