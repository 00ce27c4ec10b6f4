"""Phase ``txn-failover``: per trial, half messages sent to the master, then their EndTransactions
spread over a window, to the slaves in turn, with kill -9 of the master early in it (trials.py);
what became of every commit and rollback."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from bench.special.bed import Bed, note
from bench.special.figures import spread, txn_figures, txn_summary
from bench.special.sending import message_ids, send_requests
from bench.special.transactions import END_GIVE_UP_S, END_TIMEOUT_S, TxnRun, end_spread, pick_share, transact
from bench.special.trials import KILL_AFTER_S, FailoverTrials, kill_fields, kill_figures, kill_summary, records
from chaos.faults import FaultRecord

TXN_FAILOVER_TOPIC = "SpecialTxnFailover"


@dataclass
class TxnFailoverTrial:
    run: TxnRun
    rollback: set[str]
    ends_from: float  # time.time() of the first EndTransaction's planned start
    ends_to: list[str]  # the replicas the EndTransactions went to (the slaves when the trial began)
    record: FaultRecord | None = None
    problems: list[str] = field(default_factory=list)

    def end_all(self, ids: list[str], window_s: float) -> None:
        """end_spread through ``ends_to`` (a thread of its own, while the master is killed)."""
        try:
            end_spread(self.ends_to, TXN_FAILOVER_TOPIC, ids, self.run, self.rollback, self.ends_from, window_s)
        except Exception as exc:  # reported with the trial
            self.problems.append(f"EndTransactions: {exc!r}")

    def all_problems(self) -> list[str]:
        """Its kill's, then its EndTransactions'."""
        return (self.record.problems if self.record else []) + self.problems

    def as_dict(self, figures: dict) -> dict:
        run = self.run
        return {
            "halves": len(run.halves),
            "halfFailures": dict(run.half_failures),
            "committed": len(run.commits),
            "rolledBack": len(run.rollbacks),
            "endFailures": dict(run.end_failures),
            "endsGivenUp": len(run.given_up),
            "endsTo": self.ends_to,
            **spread("endMs", run.end_ms),
            **kill_fields(self.record, self.ends_from),  # killAtS: after the first EndTransaction
            "problems": self.all_problems(),
            **figures,
        }


def txn_failover_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    parts = FailoverTrials(bed, TXN_FAILOVER_TOPIC, "TRANSACTION", "special-txn-failover", "Y")
    trials: list[TxnFailoverTrial] = []

    def run_trial(i: int) -> None:
        master = h.master_node()
        slaves = [n.grpc_addr for n in h.nodes if n is not master]
        ids = message_ids(f"Z{i:02d}", args.failover_txns)
        requests = send_requests(TXN_FAILOVER_TOPIC, ids, parts.body, args.batch, transaction=True)
        run = transact(master.grpc_addr, requests, args.txn_streams)
        accepted = [m for m in ids if m in run.halves]
        trial = TxnFailoverTrial(run, pick_share(accepted, args.txn_rollback_share, seed=i), time.time(), slaves)
        trials.append(trial)
        ender = threading.Thread(target=trial.end_all, args=(accepted, args.txn_end_window_s), daemon=True)
        ender.start()
        try:
            time.sleep(max(0.0, trial.ends_from + KILL_AFTER_S - time.time()))
            trial.record = parts.kill_master()
        finally:
            ender.join(args.txn_end_window_s + END_GIVE_UP_S + END_TIMEOUT_S + 10)
            if ender.is_alive():
                trial.problems.append("EndTransactions still under way after their time")
        r, run = trial.record, trial.run
        note(
            f"txn failover trial {i + 1}/{args.kills}: {len(run.halves)} halves, {len(run.commits)} committed, "
            f"{len(run.rollbacks)} rolled back (end failures {dict(run.end_failures)}, given up {len(run.given_up)}); "
            f"{kill_summary(r)}, problems {r.problems + trial.problems}"
        )

    def commits() -> tuple[dict[str, float], float]:
        committed = {m: at for t in trials for m, at in t.run.commits.items()}
        return committed, max(committed.values(), default=0) + args.grace_s

    committed = parts.run(run_trial, commits)
    receipts = parts.consumers.received(bed.to_wall)
    rolled_back = {m for t in trials for m in t.run.rollbacks}
    f = txn_figures(committed, rolled_back, receipts, args.grace_s)
    bed.write_txn_deliveries("txn-failover-deliveries.csv", committed, parts.consumers)
    bed.details["txn_failover_trials"] = [
        t.as_dict(txn_figures(t.run.commits, t.run.rollbacks, receipts, args.grace_s)) for t in trials
    ]
    failures = sum((t.run.end_failures for t in trials), Counter())
    note(
        f"failover commits received {f['received']}/{len(committed)}: {txn_summary(f)}; EndTransaction failures {dict(failures)}"
    )
    record = parts.consumers.record
    return {
        "txn_failover_trials": len(records(trials)),
        "txn_failover_failed_trials": sum(1 for t in trials if t.record is None or t.record.problems or t.problems),
        "txn_failover_halves": sum(len(t.run.halves) for t in trials),
        "txn_failover_committed": len(committed),
        "txn_failover_rolled_back": len(rolled_back),
        "txn_failover_lost_commits": f["lost_commits"],
        "txn_failover_commit_failures": sum(failures.values()),
        "txn_failover_commit_failure_codes": dict(failures),
        "txn_failover_commits_given_up": sum(len(t.run.given_up) for t in trials),
        "txn_failover_half_failures": dict(sum((t.run.half_failures for t in trials), Counter())),
        **{f"txn_failover_{k}": v for k, v in f.items() if k != "lost_commits"},
        **spread("txn_failover_end_ms", [ms for t in trials for ms in t.run.end_ms]),
        **kill_figures("txn_failover", records(trials)),
        "txn_failover_receive_failures": dict(record.receive_failures),
        "txn_failover_acks_given_up": record.acks_given_up,
        "txn_failover_problems": parts.problem_lines(t.all_problems() for t in trials),
    }
