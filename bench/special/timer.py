"""Phase ``timer``: timer messages (a DELAY topic) against as many normal messages from the same
sender, how late each timer comes, and where the lateness goes (read from the stopped brokers' log)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.special.bed import SEGMENT_BYTES, Bed, note
from bench.special.figures import first_receipts, stage_figures, timer_figures, timer_summary
from bench.special.receiving import wait_received, write_deliveries
from bench.special.sending import message_ids, send_all, send_requests, spread_due
from brokers.store.commitlog import CommitLog
from brokers.store.message import Message
from brokers.timer import TIMER_DEQUEUE_MS, TIMER_OUT_MS

TIMER_TOPIC = "SpecialTimers"
NORMAL_TOPIC = "SpecialNormal"


def timer_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    master, body, normal = bed.baseline(TIMER_TOPIC, "DELAY", NORMAL_TOPIC, "N", args.timers)

    with bed.consuming(TIMER_TOPIC, "special-timers", invisible_s=60.0) as consumers:
        # The window starts once the sends should be over: the baseline's time, with room for timers being slower.
        lead_s = max(args.lead_s, 2.0 * args.timers / max(normal.per_s, 1.0) + 5.0)
        ids = message_ids("T", args.timers)
        due_ms = spread_due(ids, int((time.time() + lead_s) * 1000), int(args.due_window_s * 1000), seed=17)
        requests = send_requests(TIMER_TOPIC, ids, body, args.batch, due_ms)
        timers = send_all(master.grpc_addr, requests, args.senders, bed.brokers())
        accepted = {m: due_ms[m] for m in timers.accepted}
        after_due = sum(1 for m, at in timers.accepted.items() if at * 1000 >= due_ms[m])
        note(
            f"timers: {len(accepted)} accepted in {timers.seconds:.2f} s = {timers.per_s:.0f}/s (failures "
            f"{dict(timers.failures)}, {after_due} answered after their due time); due {lead_s:.0f}-"
            f"{lead_s + args.due_window_s:.0f} s after the first send; receiving"
        )
        last = max(accepted.values(), default=0) / 1000
        done = wait_received(consumers, accepted, last + args.grace_s)
    receipts = consumers.received(bed.to_wall)
    f = timer_figures(accepted, receipts, consumers.stamps, args.grace_s * 1000)
    write_deliveries(h.run_dir / "timer-deliveries.csv", accepted, consumers, bed.to_wall)
    first = first_receipts(r for r in receipts if r.message_id in accepted)
    bed.after_stop.append(
        lambda: {f"timer_{k}": v for k, v in stage_figures(stored_timers(bed.longest_log(), TIMER_TOPIC), first).items()}
    )
    came = "never" if done is None else f"{done - last:+.1f} s after the last due time"
    note(f"timers received {f['received']}/{len(accepted)} (the last one {came}): {timer_summary(f)}")
    record = consumers.record
    return {
        "timers": args.timers,
        "timers_accepted": len(accepted),
        "timer_per_s": round(timers.per_s, 1),
        "timer_send_s": round(timers.seconds, 3),
        "timer_send_failures": dict(timers.failures),
        "normal_per_s": round(normal.per_s, 1),
        "normal_send_failures": dict(normal.failures),
        "timer_vs_normal": round(timers.per_s / normal.per_s, 3) if normal.per_s else None,
        "timer_p99_late_ms": f["late_ms_p99"],
        **{f"timer_{k}": v for k, v in f.items()},
        "timer_sent_after_due": after_due,
        "timer_lead_s": round(lead_s, 1),
        "timer_cpu_share": timers.cpu_share(),
        "normal_cpu_share": normal.cpu_share(),
        "cpus": os.cpu_count(),
        "timer_receive_failures": dict(record.receive_failures),
        "timer_ack_failures": dict(record.ack_failures),
    }


def stored_timers(log_root: Path, topic: str) -> dict[str, tuple[int, int, int]]:
    """message id -> (due, taken by the wheel, stored in ``topic``), ms, of each timer's first copy
    in ``topic`` in a commit log (read with its broker stopped)."""
    log = CommitLog(log_root, SEGMENT_BYTES)
    out: dict[str, tuple[int, int, int]] = {}
    try:
        for _, record, _ in log.iter_records(check_crc=False):
            if isinstance(record, Message) and record.topic == topic:
                p = record.properties
                if TIMER_DEQUEUE_MS in p and "UNIQ_KEY" in p:
                    out.setdefault(p["UNIQ_KEY"], (int(p[TIMER_OUT_MS]), int(p[TIMER_DEQUEUE_MS]), record.store_timestamp))
    finally:
        log.close()
    return out
