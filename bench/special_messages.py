"""Special messages on a three-replica group (issue 17): a real control plane and three broker
processes in controller mode (allAckInSyncStateSet=true, controllerHeartBeatTimeoutMills=3000), as
bench/client_failover.py sets them up, then one or more phases (``--phases``; the first line printed
names the phases that exist). Figures of a phase not run are absent from the JSON.

Phases:

``timer``   A DELAY topic with 8 queues. ``--timers`` timer messages (``system_properties.
            delivery_timestamp``, ms precision), due uniformly over ``--due-window-s`` starting
            ``lead`` seconds after the sends begin (``--lead-s``, raised when the baseline says the
            sends would take longer), sent with raw gRPC SendMessage batches (``--batch`` messages,
            ``--senders`` requests in flight over several channels; the requests are built before the
            clock starts) to the master. Before them, the same sender sends as many normal messages
            to a NORMAL topic of 8 queues: the baseline. A pop consumer group (chaos/consumers.py:
            one thread per queue, ReceiveMessage long polls to the master the route names, every
            message acknowledged) receives them; a message's lateness is its first receipt
            (time.time() when the ReceiveMessage answer arrived) minus its due time.
``timer-failover``
            A DELAY topic of its own, the same consumers on it, and a paced producer of normal
            messages (chaos/workload.py) that tells when the new master writes. ``--kills`` trials:
            ``--failover-timers`` timers due 3-8 s after their send, then, 1 s after the sends were
            answered, kill -9 of the master (chaos/faults.py's Kill9: election, first write on the new
            master, restart of the killed broker, back in the SyncStateSet).
``txn``     A TRANSACTION topic with 8 queues. ``--txns`` transactions over ``--txn-streams`` raw gRPC
            streams: each sends a SendMessage of ``--batch`` half messages (message_type TRANSACTION)
            to the master, then an EndTransaction for each accepted one at once (topic, message id,
            the entry's transaction_id, SOURCE_CLIENT; ``--txn-rollback-share`` of them, 10 %,
            ROLLBACK, the rest COMMIT; a refused one again after 0.2 s until OK or 30 s), then its
            next batch. Before them, as many normal messages from the same sender as in ``timer``:
            the baseline. A pop consumer group (as in ``timer``) starts after the last answer, so
            the sends ran as alone as the baseline's, and receives everything.
``txn-check``
            The producer vanishes: ``--check-txns`` half messages sent and never ended. Then a
            checker that sent nothing connects: a raw gRPC Telemetry stream to every replica (the
            official clients keep one with each replica their routes name), a Settings command
            (client_type PRODUCER, publishing the topic), and an EndTransaction (COMMIT,
            SOURCE_SERVER_CHECK) to the replica that asked, for every RecoverOrphanedTransactionCommand.
            The brokers run with RocketMQ's transactionTimeOut 6000 ms and transactionCheckInterval
            30000 ms unless ``--txn-timeout-ms`` / ``--txn-check-interval-ms`` say otherwise (they
            apply to every phase): a half message is checked at the first check run 6 s after its
            send or later, so the check delay is 6-36 s with the defaults (where in 6-36 depends on
            when the broker's 30 s clock last ran, and a check run writes one copy per unresolved
            transaction, so the last of a large run comes later).
``txn-failover``
            A TRANSACTION topic of its own, the same consumers, and the paced producer of
            ``timer-failover``. ``--kills`` trials: ``--failover-txns`` half messages sent to the
            master; then their EndTransactions (10 % ROLLBACK) spread evenly over
            ``--txn-end-window-s`` (8 s), to the slaves in turn (a slave forwards EndTransaction to
            the master, to the new one after the election), and kill -9 of the master 1 s after the
            first (some are under way then, most come after). A failed one is sent again, to the next
            slave, after 0.2 s, until OK or given up 30 s after its first attempt (5 s per attempt).
            An already committed transaction is answered OK again, so a retry after a lost answer
            is fine.
``fifo-failover``
            A FIFO topic (message.type FIFO, 8 queues), the paced producer of ``timer-failover``, and
            ``--fifo-groups`` (100) message groups sending at once with raw gRPC SendMessage
            (message_type FIFO, ``system_properties.message_group`` the group, the group's sequence
            number in the message id and the user property ``seq``): each group one request of its
            next ``--fifo-batch`` (4) messages at a time, the next only once all are accepted; a
            message not accepted is sent again, same id, to the master the route names then. A pop
            consumer group (chaos/consumers.py, invisible time 10 s) receives and acks every batch
            (one AckMessage per batch, in order); the FIFO topic makes its pops orderly
            (docs/consumers.md "FIFO consumer groups"). ``--fifo-steady-s`` (5 s) unpaced, then
            ``--fifo-rate`` (1000/s) through ``--kills`` trials: the group whole, 3 s of sends, kill -9
            of the master (Kill9 as in ``timer-failover``); 3 s more after the last heal; then every
            accepted message is waited for ``--grace-s``.

Figures (the last line printed is one JSON object):
  timer_per_s                  timers accepted / seconds from the first send to the last answer
  normal_per_s                 the same for normal messages (same sender, same group), and
  timer_vs_normal              timer_per_s / normal_per_s
  timer_late_ms_p50/p99/max    first receipt minus due time; timer_p99_late_ms = the p99
  timer_early                  received before due (must be 0)
  timer_lost                   accepted and not received within due + ``--grace-s`` (30 s)
  timer_delivered_twice        message ids received more than once, whatever the cause
  timer_stored_twice           ... of those, ids that came from two places of the topic on a first
                               attempt (the wheel wrote them twice; the rest are pop redeliveries)
  timer_first_on_retry         first received on a second attempt: the first delivery was popped but
                               its answer lost (a master killed meanwhile: the new master hands it
                               out again after popReviveAfterTakeoverMillis, 5 s; the late tail)
  timer_stamp_mismatch         received with a delivery_timestamp other than the one sent
  timer_sent_after_due         accepted only after their due time (the lead was too short)
  timer_wheel_lag_ms_p50/p99/max, timer_write_ms_*, timer_consume_ms_*
                               where the lateness goes (from the log, read once the brokers stopped):
                               due -> the wheel took it (TIMER_DEQUEUE_MS) -> stored in its topic ->
                               first receipt (replication, the long poll's next look, the pop)
  timer_cpu_share, normal_cpu_share
                               CPU seconds per second of the sends, of this process ("client") and of
                               each broker (1.0: a core busy throughout); ``cpus``: the machine's
  timer_failover_lost, timer_failover_delivered_twice, timer_failover_stored_twice,
  timer_failover_first_on_retry, timer_failover_early, timer_failover_late_ms_p50/p99/max
                               the same over every trial's timers; per trial in report.json
  timer_failover_trials, timer_failover_election_s_median, timer_failover_heal_s_median
  txn_commits_per_s            transactions committed / seconds from the first half message sent to
                               the last EndTransaction answered (halves and ends interleave)
  txn_half_per_s, txn_end_per_s
                               half messages accepted / seconds from the first send to the last
                               accepted; EndTransactions answered OK (commits and rollbacks) /
                               seconds from the first EndTransaction to the last answer
  txn_normal_per_s, txn_vs_normal
                               the baseline's normal messages per second; txn_commits_per_s / it
  txn_grpc_floor_per_s, txn_vs_grpc_floor, txn_grpc_floor_server_us_per_call
                               the second baseline (bench/grpc_floor.py), after the transactions:
                               EndTransaction calls per second that a process doing nothing else
                               answers on this machine, with as many calls outstanding as the
                               transactions had (``--txn-streams`` x ``--batch``), and its CPU per
                               call; txn_commits_per_s / it. A transaction is one such call, so a
                               master answering every EndTransaction itself stays under it.
  txn_master_cpu_us_per_commit
                               the master's CPU microseconds per committed transaction
  txn_half_send_ms_*, txn_end_ms_*
                               one half SendMessage's latency; one EndTransaction's, first attempt
                               to OK answer (a retry included)
  txn_end_failures             EndTransaction answers other than OK, per code (every attempt)
  txn_lost_commits             COMMIT answered OK and the message not received within
                               ``--grace-s`` (30 s) of that answer or of the consumers' start
  txn_rolled_back_delivered    ROLLBACK answered OK and the message received (must be 0)
  txn_delivered_twice, txn_stored_twice
                               committed messages received more than once; of those, received from
                               two places of the topic on a first attempt (committed twice)
  txn_check_delay_s_p50/p99/max (txn_check_delay_p99_s = the p99)
                               half message's send answered -> the checker's COMMIT answered OK
  txn_check_lost               half messages sent and not both committed and received (must be 0)
  txn_check_commands           RecoverOrphanedTransactionCommands the checker got (one broker of
                               the set relays each check: one per transaction and check run), per replica
  txn_check_commit_spread_s    first to last commit: how long one check run took to reach them all
  txn_timeout_ms, txn_check_interval_ms
                               transactionTimeOut and transactionCheckInterval the brokers ran with
  txn_failover_lost_commits    an EndTransaction COMMIT answered OK whose message never arrived
                               within the grace (must be 0); over every trial, per trial in report.json
  txn_failover_commit_failures EndTransaction answers other than OK (every attempt, one not
                               answered within 5 s as RPC_DEADLINE_EXCEEDED; per code in
                               txn_failover_commit_failure_codes); txn_failover_commits_given_up:
                               never answered OK within 30 s
  txn_failover_delivered_twice, txn_failover_stored_twice, txn_failover_rolled_back_delivered,
  txn_failover_end_ms_*, txn_failover_election_s_median, txn_failover_heal_s_median
  fifo_msgs_per_s              FIFO sends answered OK per second over the unpaced steady part
  fifo_order_violations        deliveries that break their group's order: the ReceiveMessage that
                               brought message (group, seq) at queue offset o began after an
                               AckMessage had been answered OK for a message of the same group with
                               a greater seq **and** a greater offset (must be 0). Not violations: an
                               unacked message handed out again in place (no later one of its group
                               acked yet), a copy the producer stored again later (a greater offset),
                               a delivery whose receive began before the later ack was answered; only
                               a message's first OK ack counts (fifo_order_violation_examples in
                               report.json)
  fifo_lost                    accepted and never received by the end (must be 0; fifo_lost_ids)
  fifo_redelivered             deliveries beyond a message's first, whatever the cause; of those,
                               fifo_redelivered_after_ack: the acked copy again after its OK ack;
                               fifo_stored_twice: messages received from two queue offsets
  fifo_send_failures           failed SendMessage attempts, in messages (per code in
                               fifo_send_failure_codes); fifo_failover_trials, _election_s_median,
                               _heal_s_median; per trial in report.json

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/special_messages.py \\
        [--phases timer,timer-failover,txn,txn-check,txn-failover,fifo-failover --timers 100000 \\
         --due-window-s 60 --txns 50000 --check-txns 2000 --failover-txns 1000 --kills 10]
    quick: --timers 5000 --txns 5000 --check-txns 200 --failover-txns 200 --kills 2 \\
           --txn-timeout-ms 1000 --txn-check-interval-ms 2000

Goals: timer_p99_late_ms <= 200 (RocketMQ's wheel ticks every second by default), timer_per_s >=
10,000, timer_lost = 0, timer_failover_lost = 0, txn_commits_per_s >= 5,000, txn_lost_commits = 0,
txn_rolled_back_delivered = 0, txn_check_lost = 0, txn_failover_lost_commits = 0,
fifo_order_violations = 0, fifo_lost = 0; only for phases
that ran. Exit code 0 once the JSON is printed (a measurement), 1 when a phase could not run. Uses a
database and Redis key prefix of its own, one per database DATABASE_URL names (testkit/controlplane.py);
logs, broker stores, report.json (per trial figures, ids of commits never received) and every
delivery with its due time or its commit's answer (timer-deliveries.csv,
timer-failover-deliveries.csv, txn-deliveries.csv, txn-check-deliveries.csv,
txn-failover-deliveries.csv, fifo-failover-deliveries.csv) in test-artifacts/chaos/bench-special-messages-*/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.special.bed import SEGMENT_BYTES, Bed, note  # noqa: E402
from bench.special.fifo_failover import fifo_failover_phase  # noqa: E402
from bench.special.figures import goals  # noqa: E402
from bench.special.timer import timer_phase  # noqa: E402
from bench.special.timer_failover import timer_failover_phase  # noqa: E402
from bench.special.txn import txn_phase  # noqa: E402
from bench.special.txn_check import txn_check_phase  # noqa: E402
from bench.special.txn_failover import txn_failover_phase  # noqa: E402
from chaos.harness import Harness  # noqa: E402
from chaos.replicas import GroupSettings  # noqa: E402
from testkit.controlplane import fresh_standalone_env  # noqa: E402
from testkit.procs import ARTIFACTS  # noqa: E402

PHASES: dict[str, Callable[[Bed], dict]] = {
    "timer": timer_phase,
    "timer-failover": timer_failover_phase,
    "txn": txn_phase,
    "txn-check": txn_check_phase,
    "txn-failover": txn_failover_phase,
    "fifo-failover": fifo_failover_phase,
}


def env_name() -> str:
    """The name of this run's database and Redis key prefix (testkit/controlplane.py): one per database
    that DATABASE_URL names, so that runs given different databases never clear each other's."""
    given = os.environ.get("DATABASE_URL", "").partition("?")[0].rsplit("/", 1)[-1]
    return "special_messages" if given in ("", "rocketmq_ha") else f"special_messages_{re.sub(r'[^A-Za-z0-9_]', '_', given)}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated: {', '.join(PHASES)}")
    p.add_argument("--timers", type=int, default=100_000, help="timer: timer messages (and as many normal ones)")
    p.add_argument("--due-window-s", type=float, default=60.0, help="timer: due times spread over this long")
    p.add_argument("--lead-s", type=float, default=15.0, help="timer: the window starts at least this long after the sends")
    p.add_argument("--kills", type=int, default=10, help="timer-failover, txn-failover, fifo-failover: kill -9 trials")
    p.add_argument("--failover-timers", type=int, default=2000, help="timer-failover: timers per trial")
    p.add_argument("--txns", type=int, default=50_000, help="txn: transactions (and as many normal messages)")
    p.add_argument("--txn-streams", type=int, default=16, help="txn*: streams, each sending a batch of halves, then their ends")
    p.add_argument("--txn-rollback-share", type=float, default=0.1, help="txn, txn-failover: share rolled back")
    p.add_argument("--check-txns", type=int, default=2000, help="txn-check: half messages never ended by their producer")
    p.add_argument("--failover-txns", type=int, default=1000, help="txn-failover: half messages per trial")
    p.add_argument("--txn-end-window-s", type=float, default=8.0, help="txn-failover: their ends spread over this long")
    p.add_argument("--fifo-groups", type=int, default=100, help="fifo-failover: message groups sending at once")
    p.add_argument("--fifo-batch", type=int, default=4, help="fifo-failover: a group's messages per SendMessage")
    p.add_argument("--fifo-steady-s", type=float, default=5.0, help="fifo-failover: unpaced sends before the kills")
    p.add_argument("--fifo-rate", type=float, default=1000.0, help="fifo-failover: messages/s through the kills")
    p.add_argument("--txn-timeout-ms", type=int, default=None, help="the brokers' transactionTimeOut (default: theirs)")
    p.add_argument("--txn-check-interval-ms", type=int, default=None, help="the brokers' transactionCheckInterval")
    p.add_argument(
        "--grace-s", type=float, default=30.0, help="lost: a timer not received by due + this, a commit by its answer + this"
    )
    p.add_argument("--batch", type=int, default=32, help="messages per SendMessage")
    p.add_argument("--senders", type=int, default=16, help="SendMessage requests in flight")
    p.add_argument("--body-size", type=int, default=1024)
    p.add_argument("--receive-batch", type=int, default=64)
    p.add_argument("--long-polling-s", type=float, default=2.0)
    p.add_argument("--timer-precision-ms", type=int, default=None, help="the brokers' timerPrecisionMs (default: theirs)")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=3000)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    chosen = [s.strip() for s in args.phases.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in PHASES]
    if unknown:
        p.error(f"unknown phase(s) {', '.join(unknown)}; the phases are {', '.join(PHASES)}")
    note(f"phases: {', '.join(PHASES)}; this run: {', '.join(chosen)}")

    started = time.monotonic()
    run_dir = ARTIFACTS / "chaos" / f"bench-special-messages-{time.strftime('%Y%m%d-%H%M%S')}"
    extra = {} if args.timer_precision_ms is None else {"timerPrecisionMs": str(args.timer_precision_ms)}
    if args.txn_timeout_ms is not None:
        extra["transactionTimeOut"] = str(args.txn_timeout_ms)
    if args.txn_check_interval_ms is not None:
        extra["transactionCheckInterval"] = str(args.txn_check_interval_ms)
    settings = GroupSettings(
        replicas=3,
        all_ack=True,
        mode="controller",
        heartbeat_timeout_ms=args.heartbeat_timeout_ms,
        segment_bytes=SEGMENT_BYTES,
        extra=extra,
    )
    h = Harness(settings, run_dir, fresh_standalone_env(env_name()), verbose=not args.quiet)
    bed = Bed(h, args)
    figures: dict = {}
    failed: list[str] = []
    try:
        h.start()
        for name in chosen:
            t0 = time.monotonic()
            note(f"phase {name}")
            try:
                figures.update(PHASES[name](bed))
            except Exception as exc:  # the next phase may still run; say what went wrong
                traceback.print_exc()
                failed.append(name)
                figures[f"{name}_error"] = repr(exc)
            figures[f"{name}_seconds"] = round(time.monotonic() - t0, 1)
        h.stop_brokers()  # the slaves first: no election while the group shuts down
        for more in bed.after_stop:
            try:
                figures.update(more())
            except Exception as exc:  # the figures measured so far still count
                traceback.print_exc()
                figures.setdefault("after_stop_errors", []).append(repr(exc))
    except Exception as exc:  # the test bed itself did not come up
        traceback.print_exc()
        failed.append("setup")
        figures["setup_error"] = repr(exc)
    finally:
        h.stop()

    out = {
        **figures,
        "phases": chosen,
        "goals": goals(figures),
        "elapsed_s": round(time.monotonic() - started, 1),
        "run_dir": str(run_dir),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps({**out, **bed.details}, indent=2) + "\n")
    print(json.dumps(out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
