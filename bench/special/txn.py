"""Phase ``txn``: transactions (half message, then EndTransaction at once, a share rolled back)
against as many normal messages from the same sender and against the gRPC floor of this machine;
then what became of every committed and rolled-back transaction."""

from __future__ import annotations

import os
import time

from bench import grpc_floor
from bench.special.bed import Bed, note
from bench.special.figures import rate, spread, txn_figures, txn_summary
from bench.special.receiving import wait_received
from bench.special.sending import message_ids, send_requests
from bench.special.transactions import pick_share, transact
from chaos.workload import CHANNEL_OPTIONS

TXN_TOPIC = "SpecialTxn"
TXN_NORMAL_TOPIC = "SpecialTxnNormal"


def txn_phase(bed: Bed) -> dict:
    args = bed.args
    master, body, normal = bed.baseline(TXN_TOPIC, "TRANSACTION", TXN_NORMAL_TOPIC, "M", args.txns)

    ids = message_ids("X", args.txns)
    rollback = pick_share(ids, args.txn_rollback_share, seed=17)
    requests = send_requests(TXN_TOPIC, ids, body, args.batch, transaction=True)
    run = transact(master.grpc_addr, requests, args.txn_streams, rollback, bed.brokers())
    commits_per_s = rate(run.commits.values(), run.first_send)
    last = max([*run.commits.values(), *run.rollbacks.values()], default=time.time())
    note(
        f"transactions: {len(run.halves)} halves, {len(run.commits)} committed and {len(run.rollbacks)} rolled back in "
        f"{last - (run.first_send or last):.2f} s = {commits_per_s:.0f} commits/s (half failures "
        f"{dict(run.half_failures)}, end failures {dict(run.end_failures)}, given up {len(run.given_up)}); receiving"
    )
    master_cpu = next((cpu for name, cpu in run.cpu_s.items() if name.endswith("(master)")), None)
    floor = {f"txn_{k}": v for k, v in grpc_floor.measure(args.txns, args.txn_streams * args.batch, CHANNEL_OPTIONS).items()}
    note(
        f"gRPC floor: one process answering nothing but EndTransaction calls answers {floor['txn_grpc_floor_per_s']:.0f}/s "
        f"({floor['txn_grpc_floor_server_us_per_call']:.0f} us of CPU per call)"
    )
    # The consumers start after the last answer: the sends above ran as alone as the baseline's.
    with bed.consuming(TXN_TOPIC, "special-txn", invisible_s=60.0) as consumers:
        consuming_from = time.time()
        done = wait_received(consumers, run.commits, consuming_from + args.grace_s)
    f = txn_figures(run.commits, run.rollbacks, consumers.received(bed.to_wall), args.grace_s, consuming_from)
    bed.write_txn_deliveries("txn-deliveries.csv", run.commits, consumers)
    came = "never" if done is None else f"{done - consuming_from:.1f} s after the consumers started"
    note(f"committed received {f['received']}/{len(run.commits)} (all of them {came}): {txn_summary(f)}")
    record = consumers.record
    return {
        "txns": args.txns,
        "txn_halves_accepted": len(run.halves),
        "txn_committed": len(run.commits),
        "txn_rolled_back": len(run.rollbacks),
        "txn_commits_per_s": round(commits_per_s, 1),
        "txn_half_per_s": round(rate(run.halves.values(), run.first_send), 1),
        "txn_end_per_s": round(rate([*run.commits.values(), *run.rollbacks.values()], run.first_end), 1),
        "txn_send_s": round(last - run.first_send, 3) if run.first_send else None,
        "txn_normal_per_s": round(normal.per_s, 1),
        "txn_vs_normal": round(commits_per_s / normal.per_s, 3) if normal.per_s else None,
        **spread("txn_half_send_ms", run.half_ms),
        **spread("txn_end_ms", run.end_ms),
        "txn_half_failures": dict(run.half_failures),
        "txn_end_failures": dict(run.end_failures),
        "txn_ends_given_up": len(run.given_up),
        "txn_normal_send_failures": dict(normal.failures),
        **{f"txn_{k}": v for k, v in f.items()},
        "txn_cpu_share": run.cpu_share(),
        "txn_normal_cpu_share": normal.cpu_share(),
        "cpus": os.cpu_count(),
        "txn_receive_failures": dict(record.receive_failures),
        "txn_master_cpu_us_per_commit": round(master_cpu / len(run.commits) * 1e6, 1)
        if run.commits and master_cpu is not None
        else None,
        **floor,
        "txn_vs_grpc_floor": round(commits_per_s / floor["txn_grpc_floor_per_s"], 3),
    }
