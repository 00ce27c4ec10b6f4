"""Phase ``fifo-failover``: many message groups of a FIFO topic sending at once, first unpaced (the
steady rate), then paced through kill -9 trials of the master (trials.py); whether every group's
order held, and what was lost or delivered again."""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

from bench.special.bed import Bed, note
from bench.special.fifo import (
    FifoConsumers,
    FifoProducer,
    acked_copies,
    fifo_figures,
    fifo_order_violations,
    fifo_receipts,
    write_fifo_deliveries,
)
from bench.special.receiving import route_of
from bench.special.trials import WHOLE_TIMEOUT_S, FailoverTrials, kill_fields, kill_figures, kill_summary, records
from chaos.faults import FaultRecord
from testkit.procs import wait_until

FIFO_TOPIC = "SpecialFifo"
FIFO_INVISIBLE_S = 10.0  # a FIFO consumer's invisible time: a batch whose ack was lost comes again after it
FIFO_KILL_AFTER_S = 3.0  # a trial's sends before the kill (and after the last heal)


@dataclass
class FifoTrial:
    started: float  # time.time(): the group whole, the trial's sends under way
    failures_before: Counter
    record: FaultRecord | None = None
    ended: float = math.inf  # time.time(): the next trial's start (or the end of the sends)
    failures_after: Counter = field(default_factory=Counter)  # the producer's failures then

    def end(self, failures: Counter) -> None:
        self.ended, self.failures_after = time.time(), Counter(failures)

    def as_dict(self, figures: dict) -> dict:
        r = self.record
        return {
            "startedAt": round(self.started, 3),
            **kill_fields(r, self.started),
            "problems": r.problems if r else None,
            "sendFailures": dict(self.failures_after - self.failures_before),
            **figures,
        }


def fifo_failover_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    parts = FailoverTrials(bed, FIFO_TOPIC, "FIFO", "special-fifo", "P", invisible_s=FIFO_INVISIBLE_S, consumers=FifoConsumers)
    consumers = parts.consumers
    producer = FifoProducer(FIFO_TOPIC, args.fifo_groups, route_of(h, FIFO_TOPIC), parts.body, args.fifo_batch)
    trials: list[FifoTrial] = []
    steady: float  # messages/s accepted before the trials, unpaced

    def unpaced() -> None:
        nonlocal steady
        producer.start()
        time.sleep(1.0)  # channels open, the consumers' first long polls under way
        steady_from = time.time()
        time.sleep(args.fifo_steady_s)
        steady_to = time.time()
        steady = sum(1 for at in producer.accepted.values() if steady_from <= at < steady_to) / (steady_to - steady_from)
        note(
            f"fifo steady: {steady:.0f} messages/s accepted over {args.fifo_steady_s:.0f} s; then paced at {args.fifo_rate:.0f}/s"
        )
        producer.rate = args.fifo_rate

    def run_trial(i: int) -> None:
        if trials:
            trials[-1].end(producer.failures)
        trial = FifoTrial(time.time(), Counter(producer.failures))
        trials.append(trial)
        time.sleep(FIFO_KILL_AFTER_S)
        trial.record = r = parts.kill_master()
        note(
            f"fifo trial {i + 1}/{args.kills}: {len(producer.accepted)} accepted so far, send failures "
            f"{dict(producer.failures - trial.failures_before)}; {kill_summary(r)}, problems {r.problems}"
        )

    def healed() -> None:
        wait_until(bed.whole, WHOLE_TIMEOUT_S, "the group whole after the last trial")
        time.sleep(FIFO_KILL_AFTER_S)  # sends after the last heal

    def accepted_messages() -> tuple[dict[str, float], float]:
        producer.stop()
        if trials:
            trials[-1].end(producer.failures)
        return dict(producer.accepted), time.time() + args.grace_s

    accepted = parts.run(run_trial, accepted_messages, before=unpaced, after=healed)
    record = consumers.record
    receipts = fifo_receipts(record.deliveries)
    acks = acked_copies(receipts, record.first_ok_ack)
    violations = fifo_order_violations(receipts, acks)
    f = fifo_figures(accepted, receipts, violations, acks)
    to_wall = bed.to_wall
    details = []
    for t in trials:
        sent = {m for m, at in accepted.items() if t.started <= at < t.ended}  # and what became of them
        details.append(t.as_dict({**fifo_figures(sent, receipts, violations, acks), "accepted": len(sent)}))
    bed.details["fifo_failover_trials"] = details
    bed.details["fifo_order_violation_examples"] = [
        {
            "messageId": r.message_id,
            "group": r.group,
            "seq": r.seq,
            "offset": r.offset,
            "attempt": r.attempt,
            "at": round(r.started + to_wall, 3),
        }
        for r in violations[:50]
    ]
    received = {r.message_id for r in receipts}
    bed.details["fifo_lost_ids"] = sorted(m for m in accepted if m not in received)[:200]
    write_fifo_deliveries(h.run_dir / "fifo-failover-deliveries.csv", receipts, record.first_ok_ack, violations, to_wall)
    note(
        f"fifo: {len(accepted)} accepted, received {f['received']}, lost {f['lost']}, order violations "
        f"{f['order_violations']}, redelivered {f['redelivered']} ({f['redelivered_after_ack']} after their ack, "
        f"{f['stored_twice']} stored twice); "
        f"send failures {dict(producer.failures)}"
    )
    killed = records(trials)
    return {
        "fifo_msgs_per_s": round(steady, 1),
        "fifo_groups": args.fifo_groups,
        "fifo_accepted": len(accepted),
        "fifo_order_violations": f["order_violations"],
        "fifo_lost": f["lost"],
        "fifo_received": f["received"],
        "fifo_redelivered": f["redelivered"],
        "fifo_redelivered_after_ack": f["redelivered_after_ack"],
        "fifo_stored_twice": f["stored_twice"],
        "fifo_send_failures": sum(producer.failures.values()),
        "fifo_send_failure_codes": dict(producer.failures),
        "fifo_abandoned": len(producer.abandoned),
        "fifo_group_mismatch": consumers.group_mismatch,
        "fifo_failover_trials": len(killed),
        "fifo_failover_failed_trials": sum(1 for t in trials if t.record is None or t.record.problems),
        **kill_figures("fifo_failover", killed),
        "fifo_receive_failures": dict(record.receive_failures),
        "fifo_ack_failures": dict(record.ack_failures),
        "fifo_acks_given_up": record.acks_given_up,
        "fifo_problems": parts.problem_lines(t.record.problems if t.record else [] for t in trials),
    }
