"""Phase ``txn-check``: half messages whose producer vanished, and a checker that sent nothing
answering the brokers' RecoverOrphanedTransactionCommands: how long until each is committed and
received."""

from __future__ import annotations

import os
import time

from bench.special.bed import Bed, note
from bench.special.figures import spread, txn_figures
from bench.special.receiving import wait_received
from bench.special.sending import message_ids, send_requests
from bench.special.transactions import answer_checks, transact

TXN_CHECK_TOPIC = "SpecialTxnCheck"


def txn_check_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    timeout_ms, interval_ms = bed.txn_timing()
    bed.create_topic(TXN_CHECK_TOPIC, "TRANSACTION")
    master = h.master_node()
    body = os.urandom(args.body_size)
    with bed.consuming(TXN_CHECK_TOPIC, "special-txn-check", invisible_s=60.0) as consumers:
        ids = message_ids("K", args.check_txns)
        run = transact(
            master.grpc_addr, send_requests(TXN_CHECK_TOPIC, ids, body, args.batch, transaction=True), args.txn_streams
        )
        last_half = max(run.halves.values(), default=time.time())
        # The first check after transactionTimeOut may come a whole interval later; one more for a check
        # round that missed some.
        until = last_half + (timeout_ms + 2 * interval_ms) / 1000 + args.grace_s
        note(
            f"{len(run.halves)} half messages sent (failures {dict(run.half_failures)}) and never ended; a checker "
            f"connects to every replica (transactionTimeOut {timeout_ms} ms, transactionCheckInterval {interval_ms} ms)"
        )
        checks = answer_checks([n.grpc_addr for n in h.nodes], TXN_CHECK_TOPIC, run, until)
        wait_received(consumers, run.commits, max(run.commits.values(), default=0) + args.grace_s)
    f = txn_figures(run.commits, (), consumers.received(bed.to_wall), args.grace_s)
    bed.write_txn_deliveries("txn-check-deliveries.csv", run.commits, consumers)
    delays = [run.commits[m] - at for m, at in run.halves.items() if m in run.commits]
    received = consumers.received_ids()
    lost = sum(1 for m in run.halves if m not in run.commits or m not in received)
    d = spread("txn_check_delay_s", delays, digits=3)
    note(
        f"checked: {len(run.commits)}/{len(run.halves)} committed by the checker, delay p50 {d['txn_check_delay_s_p50']} s, "
        f"p99 {d['txn_check_delay_s_p99']} s, max {d['txn_check_delay_s_max']} s; received {f['received']}, lost "
        f"{lost}, twice {f['delivered_twice']}; checks per replica {dict(checks.by_replica)}"
    )
    record = consumers.record
    return {
        "txn_check_halves": len(run.halves),
        "txn_check_committed": len(run.commits),
        **d,
        "txn_check_delay_p99_s": d["txn_check_delay_s_p99"],
        "txn_check_commit_spread_s": round(max(run.commits.values()) - min(run.commits.values()), 3) if run.commits else None,
        "txn_check_lost": lost,
        "txn_check_not_committed": sum(1 for m in run.halves if m not in run.commits),
        "txn_check_received": f["received"],
        "txn_check_delivered_twice": f["delivered_twice"],
        "txn_check_stored_twice": f["stored_twice"],
        "txn_check_commands": sum(checks.by_replica.values()),
        "txn_check_commands_by_replica": {n.name: checks.by_replica[n.grpc_addr] for n in h.nodes},
        "txn_check_asked": len(checks.by_message),
        "txn_check_asked_max_per_txn": max(checks.by_message.values(), default=0),
        "txn_check_stream_errors": dict(checks.stream_errors),
        "txn_check_half_failures": dict(run.half_failures),
        "txn_check_end_failures": dict(run.end_failures),
        "txn_timeout_ms": timeout_ms,
        "txn_check_interval_ms": interval_ms,
        "txn_check_receive_failures": dict(record.receive_failures),
    }
