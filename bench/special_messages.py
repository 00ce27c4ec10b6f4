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
import asyncio
import itertools
import json
import math
import os
import random
import re
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import grpc_floor  # noqa: E402
from bench.common import process_cpu_s  # noqa: E402
from brokers.config import BrokerConfig  # noqa: E402
from brokers.store.commitlog import CommitLog  # noqa: E402
from brokers.store.message import Message  # noqa: E402
from brokers.timer import TIMER_DEQUEUE_MS, TIMER_OUT_MS  # noqa: E402
from chaos.consumers import ConsumerGroups, Delivery, RouteCache  # noqa: E402
from chaos.faults import FaultRecord, Kill9  # noqa: E402
from chaos.harness import TOPIC, Harness  # noqa: E402
from chaos.replicas import GROUP, GroupSettings  # noqa: E402
from chaos.workload import CHANNEL_OPTIONS, Producer, code_name  # noqa: E402
from testkit.controlplane import fresh_standalone_env  # noqa: E402
from testkit.pacing import Pace  # noqa: E402
from testkit.procs import ARTIFACTS, wait_until  # noqa: E402
from testkit.stats import rounded_median, rounded_percentile  # noqa: E402

TIMER_TOPIC = "SpecialTimers"
NORMAL_TOPIC = "SpecialNormal"
FAILOVER_TOPIC = "SpecialTimersFailover"
QUEUES = 8
SEGMENT_BYTES = 64 * 1024 * 1024
CHANNELS = 4  # gRPC channels the sender spreads its requests over
SEND_TIMEOUT_S = 30.0
TOPIC_TIMEOUT_S = 60.0
WHOLE_TIMEOUT_S = 60.0
SETTLE_S = 1.0  # after the last timer came: a second copy would show up meanwhile
FAILOVER_DUE_S = (3.0, 8.0)
KILL_AFTER_S = 1.0
LOAD_RATE = 100.0  # normal messages/s of the paced producer in timer-failover (tells the new master writes)
TIMER_LATE_GOAL_MS = 200.0
TIMER_RATE_GOAL = 10_000.0
TXN_TOPIC = "SpecialTxn"
TXN_NORMAL_TOPIC = "SpecialTxnNormal"
TXN_CHECK_TOPIC = "SpecialTxnCheck"
TXN_FAILOVER_TOPIC = "SpecialTxnFailover"
TXN_RATE_GOAL = 5_000.0
END_TIMEOUT_S = 5.0  # one EndTransaction attempt (a slave holds a forwarded one until the new master answers)
END_GIVE_UP_S = 30.0  # an EndTransaction not answered OK this long after its first attempt is given up
END_RETRY_PAUSE_S = 0.2
FIFO_TOPIC = "SpecialFifo"
FIFO_INVISIBLE_S = 10.0  # a FIFO consumer's invisible time: a batch whose ack was lost comes again after it
FIFO_KILL_AFTER_S = 3.0  # a trial's sends before the kill (and after the last heal)
CHECKER_RECONNECT_S = 0.5  # the checker's Telemetry stream ended (its broker restarting): opened again after this


def note(text: str) -> None:
    print(f"[special] {text}", file=sys.stderr, flush=True)


# --- sending ---------------------------------------------------------------------------------------


def message_ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:0{32 - len(prefix)}X}" for i in range(count)]


def send_requests(
    topic: str,
    ids: list[str],
    body: bytes,
    batch: int,
    due_ms: Mapping[str, int] | None = None,
    *,
    transaction: bool = False,
) -> list[spb.SendMessageRequest]:
    """SendMessage requests of ``batch`` messages each: timer messages when ``due_ms`` gives their
    delivery times, half messages of transactions with ``transaction``, normal ones otherwise."""
    if transaction and due_ms is not None:
        raise ValueError("a transactional message has no delivery time")
    kind = pb.MessageType.TRANSACTION if transaction else pb.MessageType.NORMAL if due_ms is None else pb.MessageType.DELAY
    messages = []
    for message_id in ids:
        sp = pb.SystemProperties(message_id=message_id, body_encoding=pb.Encoding.IDENTITY, message_type=kind)
        if due_ms is not None:
            sp.delivery_timestamp.FromMilliseconds(due_ms[message_id])
        messages.append(pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp))
    return [spb.SendMessageRequest(messages=messages[i : i + batch]) for i in range(0, len(messages), batch)]


@dataclass
class Sent:
    """What one run of sends got back."""

    accepted: dict[str, float]  # message id -> when its send was answered OK (time.time())
    failures: Counter  # code name -> messages
    seconds: float  # first send -> last answer
    cpu_s: dict[str, float]  # CPU seconds meanwhile: "client" (this process) and each process watched

    @property
    def per_s(self) -> float:
        return len(self.accepted) / self.seconds if self.seconds > 0 else 0.0

    def cpu_share(self) -> dict[str, float]:
        """CPU seconds per second of the sends, per process (1.0: one core busy throughout)."""
        return {name: round(s / self.seconds, 2) for name, s in self.cpu_s.items()} if self.seconds > 0 else {}


def cpu_now(watch: Mapping[str, int]) -> dict[str, float | None]:
    return {"client": time.process_time(), **{name: process_cpu_s(pid) for name, pid in watch.items()}}


def accepted_entries(response: spb.SendMessageResponse, sent: int, failures: Counter) -> list[spb.SendResultEntry]:
    """The entries of a SendMessage answer that say OK; the others counted in ``failures`` by code
    (all ``sent`` messages when the request was refused whole: no entries)."""
    if not response.entries:
        failures[code_name(response.status.code)] += sent
    accepted = []
    for e in response.entries:
        if e.status.code == pb.Code.OK:
            accepted.append(e)
        else:
            failures[code_name(e.status.code)] += 1
    return accepted


async def _send_all(addr: str, requests: list[spb.SendMessageRequest], senders: int, watch: Mapping[str, int]) -> Sent:
    channels = [grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS) for _ in range(min(senders, CHANNELS))]
    accepted: dict[str, float] = {}
    failures: Counter = Counter()
    todo = list(reversed(requests))
    try:
        await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 30) for c in channels))
        stubs = [rpc.MessagingServiceStub(c) for c in channels]

        async def sender(stub: rpc.MessagingServiceStub) -> None:
            while todo:
                request = todo.pop()
                try:
                    response = await stub.SendMessage(request, timeout=SEND_TIMEOUT_S)
                except grpc.aio.AioRpcError as exc:
                    failures[f"RPC_{exc.code().name}"] += len(request.messages)
                    continue
                now = time.time()
                for e in accepted_entries(response, len(request.messages), failures):
                    accepted[e.message_id] = now

        cpu0, t0 = cpu_now(watch), time.perf_counter()
        await asyncio.gather(*(sender(stubs[i % len(stubs)]) for i in range(senders)))
        seconds = time.perf_counter() - t0
        cpu1 = cpu_now(watch)
    finally:
        for c in channels:
            await c.close()
    cpu_s = {k: cpu1[k] - v for k, v in cpu0.items() if v is not None and cpu1[k] is not None}
    return Sent(accepted, failures, seconds, cpu_s)


def send_all(addr: str, requests: list[spb.SendMessageRequest], senders: int, watch: Mapping[str, int] | None = None) -> Sent:
    """Every request to ``addr``, ``senders`` in flight; a message not accepted is not sent again.
    ``watch``: name -> pid of processes whose CPU time is measured meanwhile."""
    return asyncio.run(_send_all(addr, requests, senders, watch or {}))


def spread_due(ids: list[str], start_ms: int, window_ms: int, seed: int) -> dict[str, int]:
    """Due times uniformly over [start_ms, start_ms + window_ms), in ms."""
    rng = random.Random(seed)
    return {m: start_ms + int(rng.random() * window_ms) for m in ids}


# --- transactions: half messages, EndTransaction, the checker --------------------------------------


@dataclass
class TxnRun:
    """What the transactions of a phase got back; times are time.time(), in seconds."""

    halves: dict[str, float] = field(default_factory=dict)  # message id -> its half message's send answered OK
    transaction_ids: dict[str, str] = field(default_factory=dict)  # message id -> its send entry's transaction_id
    commits: dict[str, float] = field(default_factory=dict)  # message id -> its first COMMIT answered OK
    rollbacks: dict[str, float] = field(default_factory=dict)  # message id -> its first ROLLBACK answered OK
    half_failures: Counter = field(default_factory=Counter)  # code name -> messages
    end_failures: Counter = field(default_factory=Counter)  # code name -> EndTransaction answers (every attempt)
    given_up: set[str] = field(default_factory=set)  # never answered OK within END_GIVE_UP_S of the first attempt
    half_ms: list[float] = field(default_factory=list)  # each half SendMessage: sent -> answered
    end_ms: list[float] = field(default_factory=list)  # each EndTransaction: first attempt -> answered OK
    first_send: float | None = None
    first_end: float | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)  # as Sent.cpu_s, over ``wall_s``
    wall_s: float = 0.0

    def cpu_share(self) -> dict[str, float]:
        return {name: round(s / self.wall_s, 2) for name, s in self.cpu_s.items()} if self.wall_s > 0 else {}


def end_request(
    topic: str, message_id: str, transaction_id: str, resolution: int, source: int = pb.TransactionSource.SOURCE_CLIENT
) -> spb.EndTransactionRequest:
    return spb.EndTransactionRequest(
        topic=pb.Resource(name=topic),
        message_id=message_id,
        transaction_id=transaction_id,
        resolution=resolution,
        source=source,
    )


def pick_share(ids: list[str], share: float, seed: int) -> set[str]:
    """``share`` of ``ids`` (rounded down), chosen at random but the same for a seed: those rolled back."""
    return set(random.Random(seed).sample(ids, int(len(ids) * share)))


def resolution_of(message_id: str, rollback: Collection[str]) -> int:
    return pb.TransactionResolution.ROLLBACK if message_id in rollback else pb.TransactionResolution.COMMIT


async def send_halves(stub: rpc.MessagingServiceStub, request: spb.SendMessageRequest, run: TxnRun) -> list[str]:
    """One SendMessage of half messages; the ids accepted (with their transaction ids in ``run``)."""
    started = time.time()
    if run.first_send is None or started < run.first_send:
        run.first_send = started
    try:
        response = await stub.SendMessage(request, timeout=SEND_TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        run.half_failures[f"RPC_{exc.code().name}"] += len(request.messages)
        return []
    now = time.time()
    run.half_ms.append((now - started) * 1000)
    accepted = accepted_entries(response, len(request.messages), run.half_failures)
    for e in accepted:
        run.halves[e.message_id], run.transaction_ids[e.message_id] = now, e.transaction_id
    return [e.message_id for e in accepted]


async def end_until_ok(
    stubs: Sequence[rpc.MessagingServiceStub], request: spb.EndTransactionRequest, run: TxnRun, first: int = 0
) -> None:
    """EndTransaction to ``stubs[first]``, after an error again to the next one, until answered OK
    (an already resolved transaction is answered OK again) or END_GIVE_UP_S after the first attempt."""
    started = time.time()
    if run.first_end is None or started < run.first_end:
        run.first_end = started
    for attempt in itertools.count(first):
        try:
            response = await stubs[attempt % len(stubs)].EndTransaction(request, timeout=END_TIMEOUT_S)
            code = code_name(response.status.code)
        except grpc.aio.AioRpcError as exc:
            code = f"RPC_{exc.code().name}"
        now = time.time()
        if code == "OK":
            done = run.rollbacks if request.resolution == pb.TransactionResolution.ROLLBACK else run.commits
            if request.message_id not in done:
                done[request.message_id] = now
                run.end_ms.append((now - started) * 1000)
            return
        run.end_failures[code] += 1
        if now - started >= END_GIVE_UP_S:
            run.given_up.add(request.message_id)
            return
        await asyncio.sleep(END_RETRY_PAUSE_S)


async def _transact(
    addr: str, requests: list[spb.SendMessageRequest], rollback: Collection[str] | None, streams: int, watch: Mapping[str, int]
) -> TxnRun:
    channels = [grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS) for _ in range(min(streams, CHANNELS))]
    run = TxnRun()
    todo = list(reversed(requests))
    try:
        await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 30) for c in channels))
        stubs = [rpc.MessagingServiceStub(c) for c in channels]

        async def stream(stub: rpc.MessagingServiceStub) -> None:
            while todo:
                request = todo.pop()
                accepted = await send_halves(stub, request, run)
                if rollback is not None and accepted:
                    topic = request.messages[0].topic.name
                    await asyncio.gather(
                        *(
                            end_until_ok([stub], end_request(topic, m, run.transaction_ids[m], resolution_of(m, rollback)), run)
                            for m in accepted
                        )
                    )

        cpu0, t0 = cpu_now(watch), time.perf_counter()
        await asyncio.gather(*(stream(stubs[i % len(stubs)]) for i in range(streams)))
        run.wall_s = time.perf_counter() - t0
        cpu1 = cpu_now(watch)
    finally:
        for c in channels:
            await c.close()
    run.cpu_s = {k: cpu1[k] - v for k, v in cpu0.items() if v is not None and cpu1[k] is not None}
    return run


def transact(
    addr: str,
    requests: list[spb.SendMessageRequest],
    streams: int,
    rollback: Collection[str] | None = None,
    watch: Mapping[str, int] | None = None,
) -> TxnRun:
    """Every request of half messages to ``addr`` over ``streams`` concurrent streams; with
    ``rollback`` (the ids to roll back), each stream ends the transactions of a request it sent
    (EndTransaction, COMMIT or ROLLBACK, all at once) before it sends its next one; without, the
    halves are left unresolved."""
    return asyncio.run(_transact(addr, requests, rollback, streams, watch or {}))


async def _end_spread(
    addrs: list[str], topic: str, ids: list[str], run: TxnRun, rollback: Collection[str], start: float, window_s: float
) -> None:
    channels = [grpc.aio.insecure_channel(a, options=CHANNEL_OPTIONS) for a in addrs]
    stubs = [rpc.MessagingServiceStub(c) for c in channels]
    step = window_s / max(1, len(ids))

    async def one(i: int, m: str) -> None:
        await asyncio.sleep(max(0.0, start + i * step - time.time()))
        await end_until_ok(stubs, end_request(topic, m, run.transaction_ids[m], resolution_of(m, rollback)), run, first=i)

    try:
        await asyncio.gather(*(one(i, m) for i, m in enumerate(ids)))
    finally:
        for c in channels:
            await c.close()


def end_spread(
    addrs: list[str], topic: str, ids: list[str], run: TxnRun, rollback: Collection[str], start: float, window_s: float
) -> None:
    """An EndTransaction for each of ``ids`` (sent with ``run``), paced evenly over ``window_s`` from
    ``start`` (time.time()), to ``addrs`` in turn; a retry goes to the next address."""
    asyncio.run(_end_spread(addrs, topic, ids, run, rollback, start, window_s))


@dataclass
class Checks:
    """What the checker was asked: RecoverOrphanedTransactionCommands per replica and per transaction."""

    by_replica: Counter = field(default_factory=Counter)
    by_message: Counter = field(default_factory=Counter)
    streams_opened: int = 0
    stream_errors: Counter = field(default_factory=Counter)


async def _answer_checks(addrs: list[str], topic: str, run: TxnRun, until: float) -> Checks:
    checks = Checks()
    answers: set[asyncio.Task] = set()
    settings = spb.TelemetryCommand(
        settings=pb.Settings(client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)]))
    )

    channels = {a: grpc.aio.insecure_channel(a, options=CHANNEL_OPTIONS) for a in addrs}

    async def listen(addr: str) -> None:
        stub = rpc.MessagingServiceStub(channels[addr])
        while time.time() < until:
            call = stub.Telemetry()
            checks.streams_opened += 1
            try:
                await call.write(settings)
                while (command := await call.read()) is not grpc.aio.EOF:
                    if not command.HasField("recover_orphaned_transaction_command"):
                        continue
                    asked = command.recover_orphaned_transaction_command
                    message_id = asked.message.system_properties.message_id
                    checks.by_replica[addr] += 1
                    checks.by_message[message_id] += 1
                    request = end_request(
                        asked.message.topic.name,
                        message_id,
                        asked.transaction_id,
                        pb.TransactionResolution.COMMIT,
                        pb.TransactionSource.SOURCE_SERVER_CHECK,
                    )
                    task = asyncio.create_task(end_until_ok([stub], request, run))
                    answers.add(task)
                    task.add_done_callback(answers.discard)
            except grpc.aio.AioRpcError as exc:
                checks.stream_errors[f"RPC_{exc.code().name}"] += 1
            finally:
                call.cancel()
            await asyncio.sleep(CHECKER_RECONNECT_S)  # the stream ended (a broker restarting): again

    listeners = [asyncio.create_task(listen(a)) for a in addrs]
    try:
        while time.time() < until and not run.halves.keys() <= run.commits.keys():
            await asyncio.sleep(0.2)
    finally:
        for task in listeners:  # the Telemetry streams only: answers under way are awaited
            task.cancel()
        await asyncio.gather(*listeners, return_exceptions=True)
        await asyncio.gather(*list(answers), return_exceptions=True)
        for channel in channels.values():
            await channel.close()
    return checks


def answer_checks(addrs: list[str], topic: str, run: TxnRun, until: float) -> Checks:
    """A producer of ``topic`` (its group in gRPC) that sent nothing: a Telemetry stream to each of
    ``addrs`` with a Settings command (client type PRODUCER, publishing the topic), answering every
    RecoverOrphanedTransactionCommand with EndTransaction (COMMIT, source SERVER_CHECK) to the replica
    that asked; until every half message of ``run`` is committed or ``until`` (time.time())."""
    return asyncio.run(_answer_checks(addrs, topic, run, until))


# --- receiving -------------------------------------------------------------------------------------


class TimerConsumers(ConsumerGroups):
    """chaos/consumers.py's pop consumers, also keeping the delivery time each message carried."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stamps: dict[str, set[int | None]] = defaultdict(set)
        self._stamps_lock = threading.Lock()

    def _receive(self, addr: str, request: spb.ReceiveMessageRequest) -> tuple[list[pb.Message], str | None]:
        messages, problem = super()._receive(addr, request)
        with self._stamps_lock:
            for m in messages:
                sp = m.system_properties
                self.stamps[sp.message_id].add(
                    sp.delivery_timestamp.ToMilliseconds() if sp.HasField("delivery_timestamp") else None
                )
        return messages, problem

    def received(self, to_wall: float) -> list[Receipt]:
        """Every delivery so far, its time in ms of time.time() (``to_wall``: time.time() - time.monotonic())."""
        out = []
        for record in self.records.values():
            with record.lock:
                out += [receipt(d, to_wall) for d in record.deliveries]
        return out

    def received_ids(self) -> set[str]:
        return set().union(*(r.delivered_ids() for r in self.records.values()))


@dataclass(frozen=True)
class Receipt:
    message_id: str
    at_ms: float  # time.time() in ms when the ReceiveMessage answer arrived
    position: tuple[int, int]  # (queue id, queue offset) it was delivered from
    attempt: int


def receipt(d: Delivery, to_wall: float) -> Receipt:
    return Receipt(d.message_id, (d.at + to_wall) * 1000, (d.queue_id, d.queue_offset), d.attempt)


def write_deliveries(
    path: Path,
    due_ms: Mapping[str, int],
    consumers: TimerConsumers,
    to_wall: float,
    columns: tuple[str, str] = ("due_ms", "late_ms"),
) -> None:
    """Every delivery, with the due time of the timers ``due_ms`` names (ms of time.time()) and how
    late it came; ``columns`` names those two (a transaction's: its commit answer, and since then)."""
    with open(path, "w") as f:
        f.write(f"message_id,{columns[0]},received_ms,{columns[1]},queue_id,queue_offset,attempt,addr\n")
        for record in consumers.records.values():
            with record.lock:
                deliveries = list(record.deliveries)
            for d in deliveries:
                due, at = due_ms.get(d.message_id), (d.at + to_wall) * 1000
                late = "" if due is None else f"{at - due:.1f}"
                f.write(f"{d.message_id},{due or ''},{at:.1f},{late},{d.queue_id},{d.queue_offset},{d.attempt},{d.addr}\n")


def route_of(h: Harness, topic: str) -> RouteCache:
    api = h.new_api()
    return RouteCache(lambda: api.master_grpc_addr_from_route(topic, GROUP), refresh_s=2.0)


def wait_received(consumers: TimerConsumers, wanted: Iterable[str], until_wall: float) -> float | None:
    """Until every id in ``wanted`` came or ``until_wall`` (time.time()) passed; when the last one
    came (time.time()), or None."""
    wanted = set(wanted)
    while time.time() < until_wall:
        if wanted <= consumers.received_ids():
            return time.time()
        time.sleep(0.5)
    return None


# --- figures (pure) --------------------------------------------------------------------------------


def first_receipts(receipts: Iterable[Receipt]) -> dict[str, Receipt]:
    """message id -> its first receipt."""
    first: dict[str, Receipt] = {}
    for r in receipts:
        if r.message_id not in first or r.at_ms < first[r.message_id].at_ms:
            first[r.message_id] = r
    return first


def timer_figures(
    due_ms: Mapping[str, int], receipts: Iterable[Receipt], stamps: Mapping[str, set[int | None]], grace_ms: float
) -> dict:
    """What became of the timers ``due_ms`` names (accepted ones only): lateness of each first
    receipt, early / lost / twice counts."""
    mine = [r for r in receipts if r.message_id in due_ms]
    first = first_receipts(mine)
    counts = Counter(r.message_id for r in mine)
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in mine:
        if r.attempt == 1:
            places[r.message_id].add(r.position)
    late = [r.at_ms - due_ms[m] for m, r in first.items()]

    return {
        "received": len(first),
        "late_ms_p50": rounded_percentile(late, 50, 1),
        "late_ms_p99": rounded_percentile(late, 99, 1),
        "late_ms_max": round(max(late), 1) if late else None,
        "early": sum(1 for x in late if x < 0),
        "lost": sum(1 for m, due in due_ms.items() if m not in first or first[m].at_ms > due + grace_ms),
        "never_received": sum(1 for m in due_ms if m not in first),
        "delivered_twice": sum(1 for n in counts.values() if n > 1),
        "stored_twice": sum(1 for p in places.values() if len(p) > 1),
        "first_on_retry": sum(1 for r in first.values() if r.attempt > 1),
        "stamp_mismatch": sum(1 for m, s in stamps.items() if m in due_ms and s != {due_ms[m]}),
    }


def stage_figures(stored: Mapping[str, tuple[int, int, int]], first: Mapping[str, Receipt]) -> dict:
    """Where the lateness goes, per timer received: ``wheel_lag`` (due -> the wheel took it,
    TIMER_DEQUEUE_MS), ``write`` (-> stored in its topic, the store timestamp) and ``consume`` (->
    first receipt: replication to every in-sync replica, the long poll's next look, the pop)."""
    stages: dict[str, list[float]] = {"wheel_lag": [], "write": [], "consume": []}
    for m, (due, taken, stored_at) in stored.items():
        if m in first:
            stages["wheel_lag"].append(taken - due)
            stages["write"].append(stored_at - taken)
            stages["consume"].append(first[m].at_ms - stored_at)
    out: dict = {}
    for name, values in stages.items():
        for p in (50, 99):
            out[f"{name}_ms_p{p}"] = rounded_percentile(values, p, 1)
        out[f"{name}_ms_max"] = round(max(values), 1) if values else None
    return out


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


def txn_figures(
    committed: Mapping[str, float],
    rolled_back: Collection[str],
    receipts: Iterable[Receipt],
    grace_s: float,
    consuming_from: float = 0.0,
) -> dict:
    """What became of the transactions ended (``committed``: message id -> its COMMIT answered OK,
    time.time() in s): a commit whose message did not come within ``grace_s`` of its answer (or of
    ``consuming_from``, when the consumers started later) is lost; a rolled-back one must never come;
    one received from two places of its topic on a first attempt was written twice (the rest of
    ``delivered_twice`` are pop redeliveries). ``receipt_ms``: first receipt minus the later of the
    two."""
    receipts = list(receipts)
    mine = [r for r in receipts if r.message_id in committed]
    first = first_receipts(mine)
    counts = Counter(r.message_id for r in mine)
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in mine:
        if r.attempt == 1:
            places[r.message_id].add(r.position)
    waited = {m: first[m].at_ms / 1000 - max(at, consuming_from) for m, at in committed.items() if m in first}
    rolled_back = set(rolled_back)
    return {
        "received": len(first),
        "lost_commits": sum(1 for m in committed if waited.get(m, math.inf) > grace_s),
        "never_received": sum(1 for m in committed if m not in first),
        "delivered_twice": sum(1 for n in counts.values() if n > 1),
        "stored_twice": sum(1 for p in places.values() if len(p) > 1),
        "rolled_back_delivered": len({r.message_id for r in receipts if r.message_id in rolled_back}),
        **spread("receipt_ms", [w * 1000 for w in waited.values()]),
    }


def spread(name: str, values: list[float], digits: int = 1) -> dict[str, float | None]:
    """``name``_p50, _p99 and _max of ``values`` (None when there are none)."""
    return {
        f"{name}_p50": rounded_percentile(values, 50, digits),
        f"{name}_p99": rounded_percentile(values, 99, digits),
        f"{name}_max": round(max(values), digits) if values else None,
    }


def rate(answered: Collection[float], since: float | None) -> float:
    """len(answered) / seconds from ``since`` to the last of ``answered`` (time.time())."""
    if not answered or since is None or max(answered) <= since:
        return 0.0
    return len(answered) / (max(answered) - since)


def goals(figures: dict) -> dict[str, bool]:
    """Only for figures that were measured."""
    out: dict[str, bool] = {}
    if figures.get("timer_p99_late_ms") is not None:
        out["timer_p99_late_ok"] = figures["timer_p99_late_ms"] <= TIMER_LATE_GOAL_MS
    if "timer_per_s" in figures:
        out["timer_per_s_ok"] = figures["timer_per_s"] >= TIMER_RATE_GOAL
    if "txn_commits_per_s" in figures:
        out["txn_commits_per_s_ok"] = figures["txn_commits_per_s"] >= TXN_RATE_GOAL
    zero = (
        "timer_lost",
        "timer_early",
        "timer_failover_lost",
        "txn_lost_commits",
        "txn_rolled_back_delivered",
        "txn_check_lost",
        "txn_failover_lost_commits",
        "fifo_order_violations",
        "fifo_lost",
    )
    for key in zero:
        if key in figures:
            out[f"{key}_zero"] = figures[key] == 0
    return out


# --- the test bed ----------------------------------------------------------------------------------


@dataclass
class Bed:
    """The running group and what the phases share."""

    h: Harness
    args: argparse.Namespace
    details: dict = field(default_factory=dict)  # report.json only
    after_stop: list[Callable[[], dict]] = field(default_factory=list)  # more figures, from the stopped brokers' stores

    @property
    def to_wall(self) -> float:
        return time.time() - time.monotonic()

    def create_topic(self, name: str, message_type: str) -> None:
        """Over REST, as an operator would; then on every replica and in the route."""
        h = self.h
        with httpx.Client(base_url=h.controlplane.url, headers={"Authorization": f"Bearer {h.admin_token}"}, timeout=10) as c:
            c.post(
                "/api/v1/nameserver/topics",
                json={
                    "topicName": name,
                    "brokerNames": [GROUP],
                    "readQueueNums": QUEUES,
                    "writeQueueNums": QUEUES,
                    "attributes": {"message.type": message_type},
                },
            ).raise_for_status()

        def everywhere() -> bool:
            for n in h.nodes:
                path = n.root / "config" / "topics.json"
                topic = json.loads(path.read_text())["topicConfigTable"].get(name) if path.exists() else None
                if topic is None or topic.get("attributes", {}).get("message.type", "NORMAL") != message_type:
                    return False
            return h.api.route(name) is not None

        took = wait_until(everywhere, TOPIC_TIMEOUT_S, f"topic {name} ({message_type}) on every replica and in the route")
        h.note(f"topic {name} ({message_type}, {QUEUES} queues) ready in {took:.2f} s")

    def longest_log(self) -> Path:
        """The commit log folder of the replica whose log reaches furthest (read once they are stopped)."""
        node = max(self.h.nodes, key=lambda n: n.log_span()[1])
        return node.root / "commitlog"

    def brokers(self) -> dict[str, int]:
        """Name (the master's marked) -> pid of every running broker."""
        master = self.h.master_node()
        return {f"{n.name}{' (master)' if n is master else ''}": n.process.pid for n in self.h.nodes if n.process.alive()}

    def txn_timing(self) -> tuple[int, int]:
        """(transactionTimeOut, transactionCheckInterval) the brokers run with, ms."""
        timeout = self.args.txn_timeout_ms
        interval = self.args.txn_check_interval_ms
        return (
            BrokerConfig.transactionTimeOut if timeout is None else timeout,
            BrokerConfig.transactionCheckInterval if interval is None else interval,
        )

    def whole(self) -> bool:
        master = self.h.master_node()
        return master is not None and all(self.h.in_sync(n) for n in self.h.nodes if n is not master)

    def consumers(self, topic: str, group: str, invisible_s: float) -> TimerConsumers:
        c = TimerConsumers(
            topic,
            QUEUES,
            [group],
            route_of(self.h, topic),
            batch=self.args.receive_batch,
            invisible_s=invisible_s,
            long_polling_s=self.args.long_polling_s,
        )
        c.start()
        return c


# --- phase: timer ----------------------------------------------------------------------------------


def timer_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    bed.create_topic(TIMER_TOPIC, "DELAY")
    bed.create_topic(NORMAL_TOPIC, "NORMAL")
    master = h.master_node()
    body = os.urandom(args.body_size)

    normal_ids = message_ids("N", args.timers)
    normal = send_all(master.grpc_addr, send_requests(NORMAL_TOPIC, normal_ids, body, args.batch), args.senders, bed.brokers())
    note(
        f"baseline: {len(normal.accepted)} normal messages in {normal.seconds:.2f} s = {normal.per_s:.0f}/s "
        f"(failures {dict(normal.failures)})"
    )

    consumers = bed.consumers(TIMER_TOPIC, "special-timers", invisible_s=60.0)
    try:
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
        time.sleep(SETTLE_S)
    finally:
        consumers.stop()
    receipts = consumers.received(bed.to_wall)
    f = timer_figures(accepted, receipts, consumers.stamps, args.grace_s * 1000)
    write_deliveries(h.run_dir / "timer-deliveries.csv", accepted, consumers, bed.to_wall)
    first = first_receipts(r for r in receipts if r.message_id in accepted)
    bed.after_stop.append(
        lambda: {f"timer_{k}": v for k, v in stage_figures(stored_timers(bed.longest_log(), TIMER_TOPIC), first).items()}
    )
    came = "never" if done is None else f"{done - last:+.1f} s after the last due time"
    note(
        f"timers received {f['received']}/{len(accepted)} (the last one {came}): "
        f"late p50 {f['late_ms_p50']} ms, p99 {f['late_ms_p99']} ms, max {f['late_ms_max']} ms; early {f['early']}, "
        f"lost {f['lost']}, twice {f['delivered_twice']} (stored twice {f['stored_twice']})"
    )
    record = next(iter(consumers.records.values()))
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


# --- phase: timer-failover -------------------------------------------------------------------------


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
            "killAtS": round(r.at_wall - self.sent_at, 3) if r else None,
            "node": r.node if r else None,
            "electionS": r.detect_s if r else None,
            "firstWriteS": r.rto_s if r else None,
            "healS": r.heal_s if r else None,
            "problems": r.problems if r else None,
            **figures,
        }


def failover_parts(bed: Bed, topic: str, message_type: str, group: str, load_prefix: str):
    """What a failover phase runs on: its topic (created), a control-plane client, the paced load of
    normal messages that tells when the new master writes (ids ``load_prefix``...), and the
    consumers of ``group`` on the topic: (api, load, consumers)."""
    h = bed.h
    bed.create_topic(topic, message_type)
    api = h.new_api()
    load = Producer(TOPIC, lambda: h.resolve(api), rate=LOAD_RATE, batch=4, id_prefix=load_prefix)
    return api, load, bed.consumers(topic, group, invisible_s=10.0)


def trial_masters(bed: Bed, load) -> Iterator[tuple[int, object]]:
    """Starts the load; then, for each of ``--kills`` trials, once the group is whole again: the
    trial's number and the master to kill."""
    load.start()
    wait_until(lambda: load.stats.acks, 30, "the first acknowledged write of the load")
    for i in range(bed.args.kills):
        wait_until(bed.whole, WHOLE_TIMEOUT_S, "the group whole before a trial")
        yield i, bed.h.master_node()


def kill_figures(prefix: str, records: list) -> dict:
    """The medians of a failover phase's kill -9 trials: election, first write on the new master, heal."""
    return {
        f"{prefix}_election_s_median": rounded_median([r.detect_s for r in records if r.detect_s is not None]),
        f"{prefix}_first_write_s_median": rounded_median([r.rto_s for r in records if r.rto_s is not None]),
        f"{prefix}_heal_s_median": rounded_median([r.heal_s for r in records if r.heal_s is not None]),
    }


def timer_failover_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    body = os.urandom(args.body_size)
    api, load, consumers = failover_parts(bed, FAILOVER_TOPIC, "DELAY", "special-timers-failover", "L")
    trials: list[FailoverTrial] = []
    problems: list[str] = []
    try:
        for i, master in trial_masters(bed, load):
            ids = message_ids(f"F{i:02d}", args.failover_timers)
            lo, hi = FAILOVER_DUE_S
            due_ms = spread_due(ids, int((time.time() + lo) * 1000), int((hi - lo) * 1000), seed=i)
            sent = send_all(master.grpc_addr, send_requests(FAILOVER_TOPIC, ids, body, args.batch, due_ms), args.senders)
            trial = FailoverTrial({m: due_ms[m] for m in sent.accepted}, dict(sent.failures), time.time())
            trials.append(trial)
            time.sleep(max(0.0, trial.sent_at + KILL_AFTER_S - time.time()))
            trial.record = Kill9(h, load).run()
            r = trial.record
            note(
                f"failover trial {i + 1}/{args.kills}: {len(trial.due_ms)} timers accepted in {sent.seconds:.2f} s, "
                f"election {r.detect_s}, first write {r.rto_s}, heal {r.heal_s}, problems {r.problems}"
            )
    except (RuntimeError, TimeoutError) as exc:  # the group did not come back: report what was measured
        problems.append(f"trials stopped: {exc!r}")
    finally:
        try:
            accepted = {m: d for t in trials for m, d in t.due_ms.items()}
            last = max(accepted.values(), default=0) / 1000
            wait_received(consumers, accepted, last + args.grace_s)
            time.sleep(SETTLE_S)
        finally:
            consumers.stop()
            load.stop(grace_s=2.0)
            api.close()
    receipts = consumers.received(bed.to_wall)
    write_deliveries(h.run_dir / "timer-failover-deliveries.csv", accepted, consumers, bed.to_wall)
    f = timer_figures(accepted, receipts, consumers.stamps, args.grace_s * 1000)
    bed.details["timer_failover_trials"] = [
        t.as_dict(timer_figures(t.due_ms, receipts, consumers.stamps, args.grace_s * 1000)) for t in trials
    ]
    note(
        f"failover timers received {f['received']}/{len(accepted)}: late p50 {f['late_ms_p50']} ms, p99 "
        f"{f['late_ms_p99']} ms, max {f['late_ms_max']} ms; early {f['early']}, lost {f['lost']}, twice "
        f"{f['delivered_twice']} (stored twice {f['stored_twice']}); first received on a retry {f['first_on_retry']}"
    )
    records = [t.record for t in trials if t.record is not None]
    record = next(iter(consumers.records.values()))
    return {
        "timer_failover_trials": len(records),
        "timer_failover_failed_trials": sum(1 for r in records if r.problems),
        "timer_failover_accepted": len(accepted),
        "timer_failover_send_failures": dict(sum((Counter(t.send_failures) for t in trials), Counter())),
        **{f"timer_failover_{k}": v for k, v in f.items()},
        **kill_figures("timer_failover", records),
        "timer_failover_receive_failures": dict(record.receive_failures),
        "timer_failover_acks_given_up": record.acks_given_up,
        "timer_failover_problems": problems + [f"trial {i + 1}: {p}" for i, r in enumerate(records) for p in r.problems],
    }


# --- phase: txn ------------------------------------------------------------------------------------


def write_txn_deliveries(bed: Bed, name: str, committed: Mapping[str, float], consumers: TimerConsumers) -> None:
    """Every delivery, with its transaction's commit answer (ms of time.time()); the commits never
    received, in report.json."""
    at_ms = {m: int(at * 1000) for m, at in committed.items()}
    write_deliveries(bed.h.run_dir / name, at_ms, consumers, bed.to_wall, ("committed_ms", "after_ms"))
    never = sorted(set(committed) - consumers.received_ids())
    bed.details[name.removesuffix(".csv").replace("-", "_") + "_never_received"] = never[:100]


def txn_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    bed.create_topic(TXN_TOPIC, "TRANSACTION")
    bed.create_topic(TXN_NORMAL_TOPIC, "NORMAL")
    master = h.master_node()
    body = os.urandom(args.body_size)

    normal_ids = message_ids("M", args.txns)
    normal = send_all(
        master.grpc_addr, send_requests(TXN_NORMAL_TOPIC, normal_ids, body, args.batch), args.senders, bed.brokers()
    )
    note(
        f"baseline: {len(normal.accepted)} normal messages in {normal.seconds:.2f} s = {normal.per_s:.0f}/s "
        f"(failures {dict(normal.failures)})"
    )

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
    consumers = bed.consumers(TXN_TOPIC, "special-txn", invisible_s=60.0)
    consuming_from = time.time()
    try:
        done = wait_received(consumers, run.commits, consuming_from + args.grace_s)
        time.sleep(SETTLE_S)
    finally:
        consumers.stop()
    f = txn_figures(run.commits, run.rollbacks, consumers.received(bed.to_wall), args.grace_s, consuming_from)
    write_txn_deliveries(bed, "txn-deliveries.csv", run.commits, consumers)
    came = "never" if done is None else f"{done - consuming_from:.1f} s after the consumers started"
    note(
        f"committed received {f['received']}/{len(run.commits)} (all of them {came}): lost {f['lost_commits']}, twice "
        f"{f['delivered_twice']} (stored twice {f['stored_twice']}), rolled back and received {f['rolled_back_delivered']}"
    )
    record = next(iter(consumers.records.values()))
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


# --- phase: txn-check ------------------------------------------------------------------------------


def txn_check_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    timeout_ms, interval_ms = bed.txn_timing()
    bed.create_topic(TXN_CHECK_TOPIC, "TRANSACTION")
    master = h.master_node()
    body = os.urandom(args.body_size)
    consumers = bed.consumers(TXN_CHECK_TOPIC, "special-txn-check", invisible_s=60.0)
    try:
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
        time.sleep(SETTLE_S)
    finally:
        consumers.stop()
    f = txn_figures(run.commits, (), consumers.received(bed.to_wall), args.grace_s)
    write_txn_deliveries(bed, "txn-check-deliveries.csv", run.commits, consumers)
    delays = [run.commits[m] - at for m, at in run.halves.items() if m in run.commits]
    received = consumers.received_ids()
    lost = sum(1 for m in run.halves if m not in run.commits or m not in received)
    d = spread("txn_check_delay_s", delays, digits=3)
    note(
        f"checked: {len(run.commits)}/{len(run.halves)} committed by the checker, delay p50 {d['txn_check_delay_s_p50']} s, "
        f"p99 {d['txn_check_delay_s_p99']} s, max {d['txn_check_delay_s_max']} s; received {f['received']}, lost "
        f"{lost}, twice {f['delivered_twice']}; checks per replica {dict(checks.by_replica)}"
    )
    record = next(iter(consumers.records.values()))
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


# --- phase: txn-failover ---------------------------------------------------------------------------


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

    def as_dict(self, figures: dict) -> dict:
        r, run = self.record, self.run
        return {
            "halves": len(run.halves),
            "halfFailures": dict(run.half_failures),
            "committed": len(run.commits),
            "rolledBack": len(run.rollbacks),
            "endFailures": dict(run.end_failures),
            "endsGivenUp": len(run.given_up),
            "endsTo": self.ends_to,
            "killAtS": round(r.at_wall - self.ends_from, 3) if r else None,  # after the first EndTransaction
            **spread("endMs", run.end_ms),
            "node": r.node if r else None,
            "electionS": r.detect_s if r else None,
            "firstWriteS": r.rto_s if r else None,
            "healS": r.heal_s if r else None,
            "problems": (r.problems if r else []) + self.problems,
            **figures,
        }


def txn_failover_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    body = os.urandom(args.body_size)
    api, load, consumers = failover_parts(bed, TXN_FAILOVER_TOPIC, "TRANSACTION", "special-txn-failover", "Y")
    trials: list[TxnFailoverTrial] = []
    problems: list[str] = []
    try:
        for i, master in trial_masters(bed, load):
            slaves = [n.grpc_addr for n in h.nodes if n is not master]
            ids = message_ids(f"Z{i:02d}", args.failover_txns)
            requests = send_requests(TXN_FAILOVER_TOPIC, ids, body, args.batch, transaction=True)
            run = transact(master.grpc_addr, requests, args.txn_streams)
            accepted = [m for m in ids if m in run.halves]
            trial = TxnFailoverTrial(run, pick_share(accepted, args.txn_rollback_share, seed=i), time.time(), slaves)
            trials.append(trial)
            ender = threading.Thread(target=trial.end_all, args=(accepted, args.txn_end_window_s), daemon=True)
            ender.start()
            try:
                time.sleep(max(0.0, trial.ends_from + KILL_AFTER_S - time.time()))
                trial.record = Kill9(h, load).run()
            finally:
                ender.join(args.txn_end_window_s + END_GIVE_UP_S + END_TIMEOUT_S + 10)
                if ender.is_alive():
                    trial.problems.append("EndTransactions still under way after their time")
            r, run = trial.record, trial.run
            note(
                f"txn failover trial {i + 1}/{args.kills}: {len(run.halves)} halves, {len(run.commits)} committed, "
                f"{len(run.rollbacks)} rolled back (end failures {dict(run.end_failures)}, given up {len(run.given_up)}); "
                f"election {r.detect_s}, first write {r.rto_s}, heal {r.heal_s}, problems {r.problems + trial.problems}"
            )
    except (RuntimeError, TimeoutError) as exc:  # the group did not come back: report what was measured
        problems.append(f"trials stopped: {exc!r}")
    finally:
        try:
            committed = {m: at for t in trials for m, at in t.run.commits.items()}
            wait_received(consumers, committed, max(committed.values(), default=0) + args.grace_s)
            time.sleep(SETTLE_S)
        finally:
            consumers.stop()
            load.stop(grace_s=2.0)
            api.close()
    receipts = consumers.received(bed.to_wall)
    rolled_back = {m for t in trials for m in t.run.rollbacks}
    f = txn_figures(committed, rolled_back, receipts, args.grace_s)
    write_txn_deliveries(bed, "txn-failover-deliveries.csv", committed, consumers)
    bed.details["txn_failover_trials"] = [
        t.as_dict(txn_figures(t.run.commits, t.run.rollbacks, receipts, args.grace_s)) for t in trials
    ]
    failures = sum((t.run.end_failures for t in trials), Counter())
    note(
        f"failover commits received {f['received']}/{len(committed)}: lost {f['lost_commits']}, twice "
        f"{f['delivered_twice']} (stored twice {f['stored_twice']}), rolled back and received "
        f"{f['rolled_back_delivered']}; EndTransaction failures {dict(failures)}"
    )
    records = [t.record for t in trials if t.record is not None]
    record = next(iter(consumers.records.values()))
    return {
        "txn_failover_trials": len(records),
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
        **kill_figures("txn_failover", records),
        "txn_failover_receive_failures": dict(record.receive_failures),
        "txn_failover_acks_given_up": record.acks_given_up,
        "txn_failover_problems": problems
        + [f"trial {i + 1}: {p}" for i, t in enumerate(trials) for p in (t.record.problems if t.record else []) + t.problems],
    }


# --- phase: fifo-failover --------------------------------------------------------------------------


def fifo_group_name(group: int) -> str:
    return f"fifo-{group:03d}"


def fifo_message_id(group: int, seq: int) -> str:
    """A FIFO message's id names its group and its sequence number within the group (32 characters)."""
    return f"Q{group:03d}{seq:028X}"


def fifo_key(message_id: str) -> tuple[int, int]:
    """(group, sequence number) of an id ``fifo_message_id`` made."""
    return int(message_id[1:4]), int(message_id[4:], 16)


def fifo_request(topic: str, group: int, seqs: Sequence[int], body: bytes) -> spb.SendMessageRequest:
    """One SendMessage of a group's next messages, in order: message_type FIFO, the group as
    ``system_properties.message_group``, the sequence number also as the user property ``seq``."""
    name = fifo_group_name(group)
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=topic),
                body=body,
                user_properties={"seq": str(s)},
                system_properties=pb.SystemProperties(
                    message_id=fifo_message_id(group, s),
                    body_encoding=pb.Encoding.IDENTITY,
                    message_type=pb.MessageType.FIFO,
                    message_group=name,
                ),
            )
            for s in seqs
        ]
    )


class FifoProducer(threading.Thread):
    """``groups`` message groups sending at once, each one request of its next ``batch`` messages at
    a time, the next only once every message of the last is accepted (a FIFO producer: one send in
    flight per group). A message not accepted is sent again, same id, to the master the route names
    then, until accepted or the producer stops. ``rate`` (messages/s over every group) paces them;
    None: as fast as they are answered."""

    def __init__(self, topic: str, groups: int, route: RouteCache, body: bytes, batch: int):
        super().__init__(name="fifo-producer", daemon=True)
        self.topic, self.groups, self.route, self.body, self.batch = topic, groups, route, body, batch
        self.rate: float | None = None
        self.accepted: dict[str, float] = {}  # message id -> its send answered OK (time.time())
        self.failures: Counter = Counter()  # code name -> messages (every attempt)
        self.failed_at: list[float] = []  # time.time() of each failed attempt (per request)
        self.abandoned: list[str] = []  # not accepted when the producer stopped
        self._halt = threading.Event()

    def run(self) -> None:
        asyncio.run(self._main())

    def stop(self, timeout_s: float = SEND_TIMEOUT_S) -> None:
        self._halt.set()
        self.join(timeout_s)

    async def _main(self) -> None:
        channels: dict[str, tuple[grpc.aio.Channel, rpc.MessagingServiceStub]] = {}

        def stub(addr: str) -> rpc.MessagingServiceStub:
            if addr not in channels:
                channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
                channels[addr] = (channel, rpc.MessagingServiceStub(channel))
            return channels[addr][1]

        try:
            await asyncio.gather(*(self._group(g, stub) for g in range(self.groups)))
        finally:
            for channel, _ in channels.values():
                await channel.close()

    async def _group(self, group: int, stub: Callable[[str], rpc.MessagingServiceStub]) -> None:
        seq = 0
        pace: Pace | None = None  # unpaced until a rate is set (once)
        while not self._halt.is_set():
            if self.rate:
                if pace is None:
                    pace = Pace(self.batch * self.groups / self.rate, time.monotonic())
                await asyncio.sleep(pace.wait_s(time.monotonic()))
                pace.advance(time.monotonic())
            if self._halt.is_set():
                return
            todo = list(range(seq, seq + self.batch))
            while todo and not self._halt.is_set():
                todo = await self._send(group, todo, stub)
            self.abandoned += [fifo_message_id(group, s) for s in todo]
            seq += self.batch

    async def _send(self, group: int, seqs: list[int], stub: Callable[[str], rpc.MessagingServiceStub]) -> list[int]:
        """One attempt; the sequence numbers still to send (in order)."""
        addr = await asyncio.to_thread(self.route.get)
        if addr is None:
            self.failures["NO_ROUTE"] += len(seqs)
        else:
            try:
                response = await stub(addr).SendMessage(fifo_request(self.topic, group, seqs, self.body), timeout=END_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                self.failures[f"RPC_{exc.code().name}"] += len(seqs)
            else:
                now = time.time()
                ok = {e.message_id for e in accepted_entries(response, len(seqs), self.failures)}
                for s in seqs:
                    if (m := fifo_message_id(group, s)) in ok:
                        self.accepted[m] = now
                seqs = [s for s in seqs if fifo_message_id(group, s) not in ok]
                if not seqs:
                    return []
            self.route.failed(addr)
        self.failed_at.append(time.time())
        await asyncio.sleep(END_RETRY_PAUSE_S)
        return seqs


class FifoConsumers(TimerConsumers):
    """The pop consumers, also counting messages that came back with a message group other than the
    one their id names (the broker must hand the group back as ``system_properties.message_group``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.group_mismatch = 0
        self._mismatch_lock = threading.Lock()

    def _receive(self, addr: str, request: spb.ReceiveMessageRequest) -> tuple[list[pb.Message], str | None]:
        messages, problem = super()._receive(addr, request)
        wrong = sum(
            1
            for m in messages
            if m.system_properties.message_group != fifo_group_name(fifo_key(m.system_properties.message_id)[0])
        )
        if wrong:
            with self._mismatch_lock:
                self.group_mismatch += wrong
        return messages, problem


@dataclass(frozen=True)
class FifoReceipt:
    """One delivery of a FIFO message; times are time.monotonic() of the consumer."""

    message_id: str
    group: int
    seq: int
    offset: int  # its queue offset (a message is handed out again in place: the same copy, the same offset)
    started: float  # the ReceiveMessage call began
    at: float  # its answer arrived
    attempt: int


def fifo_receipts(deliveries: Iterable[Delivery]) -> list[FifoReceipt]:
    out = []
    for d in deliveries:
        group, seq = fifo_key(d.message_id)
        out.append(FifoReceipt(d.message_id, group, seq, d.queue_offset, d.started, d.at, d.attempt))
    return out


def acked_copies(receipts: Iterable[FifoReceipt], first_ok_ack: Mapping[str, float]) -> list[tuple[FifoReceipt, float]]:
    """(the delivery acked, when the ack was answered OK) for each message acked: the consumer acks
    what a receive brought right after it, so the acked copy is the message's delivery that arrived
    last before the answer. Only a message's first OK ack is known (a later copy's ack is not)."""
    acked: dict[str, FifoReceipt] = {}
    for r in receipts:
        at = first_ok_ack.get(r.message_id)
        if at is not None and r.at <= at and (r.message_id not in acked or r.at > acked[r.message_id].at):
            acked[r.message_id] = r
    return [(r, first_ok_ack[m]) for m, r in acked.items()]


def fifo_order_violations(receipts: Iterable[FifoReceipt], acks: Iterable[tuple[FifoReceipt, float]]) -> list[FifoReceipt]:
    """The deliveries that break a message group's order: a delivery of (group, seq, offset) whose
    ReceiveMessage began after an ack had been answered OK for a message of the same group with a
    greater sequence number **and** a greater queue offset. A message handed out again before any
    later one of its group was acked is a redelivery in place, not a violation; so is a copy stored
    after the acked message (the producer sent the message again after an attempt it could not
    tell had worked: a new store at a greater offset); an ack whose answer was lost proves nothing."""
    by_group: dict[int, list[tuple[float, int, int]]] = defaultdict(list)  # group -> (acked at, seq, offset)
    for r, at in acks:
        by_group[r.group].append((at, r.seq, r.offset))
    received: dict[int, list[FifoReceipt]] = defaultdict(list)
    for r in sorted(receipts, key=lambda r: r.started):
        received[r.group].append(r)
    found = []
    for group, acked in by_group.items():
        acked.sort()
        # Fenwick tree over descending sequence numbers: the greatest offset acked among seq > s.
        top = max(seq for _, seq, _ in acked) + 2
        tree = [-1] * (top + 1)
        i = 0
        for r in received[group]:
            while i < len(acked) and acked[i][0] < r.started:
                _, seq, offset = acked[i]
                k = top - seq
                while k <= top:
                    tree[k] = max(tree[k], offset)
                    k += k & -k
                i += 1
            best, k = -1, top - r.seq - 1  # seq > r.seq: indices 1 .. top - r.seq - 1
            while k > 0:
                best = max(best, tree[k])
                k -= k & -k
            if best > r.offset:
                found.append(r)
    return sorted(found, key=lambda r: r.started)


def fifo_figures(
    accepted: Collection[str],
    receipts: Sequence[FifoReceipt],
    violations: Sequence[FifoReceipt],
    acks: Iterable[tuple[FifoReceipt, float]],
) -> dict:
    """What became of the FIFO messages ``accepted`` names (their sends answered OK): ``redelivered``
    counts deliveries beyond a message's first (whatever the cause); ``redelivered_after_ack`` those
    of the acked copy (same queue offset) whose receive began after its ack was answered OK;
    ``stored_twice`` messages received from two queue offsets (the producer sent them again after an
    attempt whose answer it did not get)."""
    mine = [r for r in receipts if r.message_id in accepted]
    ids = {r.message_id for r in mine}
    acked = {a.message_id: (a.offset, at) for a, at in acks}
    offsets: dict[str, set[int]] = defaultdict(set)
    for r in mine:
        offsets[r.message_id].add(r.offset)
    return {
        "received": len(ids),
        "lost": sum(1 for m in accepted if m not in ids),
        "redelivered": len(mine) - len(ids),
        "redelivered_after_ack": sum(
            1 for r in mine if r.message_id in acked and acked[r.message_id][0] == r.offset and acked[r.message_id][1] < r.started
        ),
        "stored_twice": sum(1 for o in offsets.values() if len(o) > 1),
        "order_violations": sum(1 for r in violations if r.message_id in accepted),
    }


def write_fifo_deliveries(
    path: Path,
    receipts: Sequence[FifoReceipt],
    first_ok_ack: Mapping[str, float],
    violations: Collection[FifoReceipt],
    to_wall: float,
) -> None:
    """Every delivery with its group, sequence number, queue offset, when its receive began and
    arrived, its message's first OK ack (ms of time.time()) and whether it broke its group's order."""
    bad = set(violations)
    with open(path, "w") as f:
        f.write("message_id,group,seq,queue_offset,attempt,receive_started_ms,received_ms,acked_ms,violation\n")
        for r in sorted(receipts, key=lambda r: r.started):
            ack = first_ok_ack.get(r.message_id)
            acked = "" if ack is None else f"{(ack + to_wall) * 1000:.1f}"
            f.write(
                f"{r.message_id},{r.group},{r.seq},{r.offset},{r.attempt},{(r.started + to_wall) * 1000:.1f},"
                f"{(r.at + to_wall) * 1000:.1f},{acked},{int(r in bad)}\n"
            )


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
            "killAtS": round(r.at_wall - self.started, 3) if r else None,
            "node": r.node if r else None,
            "electionS": r.detect_s if r else None,
            "firstWriteS": r.rto_s if r else None,
            "healS": r.heal_s if r else None,
            "problems": r.problems if r else None,
            "sendFailures": dict(self.failures_after - self.failures_before),
            **figures,
        }


def fifo_failover_phase(bed: Bed) -> dict:
    h, args = bed.h, bed.args
    bed.create_topic(FIFO_TOPIC, "FIFO")
    api = h.new_api()
    load = Producer(TOPIC, lambda: h.resolve(api), rate=LOAD_RATE, batch=4, id_prefix="P")
    consumers = FifoConsumers(
        FIFO_TOPIC,
        QUEUES,
        ["special-fifo"],
        route_of(h, FIFO_TOPIC),
        batch=args.receive_batch,
        invisible_s=FIFO_INVISIBLE_S,
        long_polling_s=args.long_polling_s,
    )
    producer = FifoProducer(FIFO_TOPIC, args.fifo_groups, route_of(h, FIFO_TOPIC), os.urandom(args.body_size), args.fifo_batch)
    trials: list[FifoTrial] = []
    problems: list[str] = []
    consumers.start()
    try:
        load.start()
        wait_until(lambda: load.stats.acks, 30, "the first acknowledged write of the load")
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
        for i in range(args.kills):
            wait_until(bed.whole, WHOLE_TIMEOUT_S, "the group whole before a trial")
            if trials:
                trials[-1].end(producer.failures)
            trial = FifoTrial(time.time(), Counter(producer.failures))
            trials.append(trial)
            time.sleep(FIFO_KILL_AFTER_S)
            trial.record = Kill9(h, load).run()
            r = trial.record
            note(
                f"fifo trial {i + 1}/{args.kills}: {len(producer.accepted)} accepted so far, send failures "
                f"{dict(producer.failures - trial.failures_before)}; election {r.detect_s}, first write {r.rto_s}, "
                f"heal {r.heal_s}, problems {r.problems}"
            )
        wait_until(bed.whole, WHOLE_TIMEOUT_S, "the group whole after the last trial")
        time.sleep(FIFO_KILL_AFTER_S)  # sends after the last heal
    except (RuntimeError, TimeoutError) as exc:  # the group did not come back: report what was measured
        problems.append(f"trials stopped: {exc!r}")
    finally:
        try:
            producer.stop()
            if trials:
                trials[-1].end(producer.failures)
            accepted = dict(producer.accepted)
            wait_received(consumers, accepted, time.time() + args.grace_s)
            time.sleep(SETTLE_S)
        finally:
            consumers.stop()
            load.stop(grace_s=2.0)
            api.close()
    record = next(iter(consumers.records.values()))
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
    records = [t.record for t in trials if t.record is not None]
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
        "fifo_failover_trials": len(records),
        "fifo_failover_failed_trials": sum(1 for t in trials if t.record is None or t.record.problems),
        **kill_figures("fifo_failover", records),
        "fifo_receive_failures": dict(record.receive_failures),
        "fifo_ack_failures": dict(record.ack_failures),
        "fifo_acks_given_up": record.acks_given_up,
        "fifo_problems": problems
        + [f"trial {i + 1}: {p}" for i, t in enumerate(trials) for p in (t.record.problems if t.record else [])],
    }


# --- the run ---------------------------------------------------------------------------------------

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
