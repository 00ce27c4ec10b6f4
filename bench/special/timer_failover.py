"""Phase ``timer-failover``: per trial, timers due a few seconds after their send, then kill -9 of
the master while they wait in the wheel (trials.py); what became of them."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from bench.special.bed import Bed, note
from bench.special.figures import timer_figures, timer_summary
from bench.special.receiving import write_deliveries
from bench.special.sending import message_ids, send_all, send_requests, spread_due
from bench.special.trials import KILL_AFTER_S, FailoverTrials, kill_fields, kill_figures, kill_summary, records
from chaos.faults import FaultRecord

FAILOVER_TOPIC = "SpecialTimersFailover"
FAILOVER_DUE_S = (3.0, 8.0)


@dataclass
class FailoverTrial:
    due_ms: dict[str, int]  # accepted timers of this trial
    send_failures: dict[str, int]
    sent_at: float  # time.time() of the last answer
    record: FaultRecord | None = None

    def as_dict(self, figures: dict) -> dict:
        r = self.record
        return {
            "accepted": len(self.due_ms),
            "sendFailures": self.send_failures,
            "sentAt": round(self.sent_at, 3),  # time.time(), as in the deliveries' CSV (in ms there)
            **kill_fields(r, self.sent_at),
            "problems": r.problems if r else None,
            **figures,
        }


def timer_failover_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    parts = FailoverTrials(bed, FAILOVER_TOPIC, "DELAY", "special-timers-failover", "L")
    trials: list[FailoverTrial] = []

    def run_trial(i: int) -> None:
        master = h.master_node()
        ids = message_ids(f"F{i:02d}", args.failover_timers)
        lo, hi = FAILOVER_DUE_S
        due_ms = spread_due(ids, int((time.time() + lo) * 1000), int((hi - lo) * 1000), seed=i)
        sent = send_all(master.grpc_addr, send_requests(FAILOVER_TOPIC, ids, parts.body, args.batch, due_ms), args.senders)
        trial = FailoverTrial({m: due_ms[m] for m in sent.accepted}, dict(sent.failures), time.time())
        trials.append(trial)
        time.sleep(max(0.0, trial.sent_at + KILL_AFTER_S - time.time()))
        trial.record = r = parts.kill_master()
        note(
            f"failover trial {i + 1}/{args.kills}: {len(trial.due_ms)} timers accepted in {sent.seconds:.2f} s, "
            f"{kill_summary(r)}, problems {r.problems}"
        )

    def accepted_timers() -> tuple[dict[str, int], float]:
        accepted = {m: d for t in trials for m, d in t.due_ms.items()}
        return accepted, max(accepted.values(), default=0) / 1000 + args.grace_s

    accepted = parts.run(run_trial, accepted_timers)
    receipts = parts.consumers.received(bed.to_wall)
    write_deliveries(h.run_dir / "timer-failover-deliveries.csv", accepted, parts.consumers, bed.to_wall)
    f = timer_figures(accepted, receipts, parts.consumers.stamps, args.grace_s * 1000)
    bed.details["timer_failover_trials"] = [
        t.as_dict(timer_figures(t.due_ms, receipts, parts.consumers.stamps, args.grace_s * 1000)) for t in trials
    ]
    note(
        f"failover timers received {f['received']}/{len(accepted)}: {timer_summary(f)}; "
        f"first received on a retry {f['first_on_retry']}"
    )
    killed = records(trials)
    record = parts.consumers.record
    return {
        "timer_failover_trials": len(killed),
        "timer_failover_failed_trials": sum(1 for r in killed if r.problems),
        "timer_failover_accepted": len(accepted),
        "timer_failover_send_failures": dict(sum((Counter(t.send_failures) for t in trials), Counter())),
        **{f"timer_failover_{k}": v for k, v in f.items()},
        **kill_figures("timer_failover", killed),
        "timer_failover_receive_failures": dict(record.receive_failures),
        "timer_failover_acks_given_up": record.acks_given_up,
        "timer_failover_problems": parts.problem_lines(r.problems for r in killed),
    }
