"""Transactions over raw gRPC: half messages (SendMessage, message_type TRANSACTION), their
EndTransaction (COMMIT or ROLLBACK, sent again after an error until OK or given up), and a checker
that sent nothing and answers the brokers' RecoverOrphanedTransactionCommands."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from bench.special.sending import SEND_TIMEOUT_S, accepted_entries, cpu_share, in_flight
from chaos.workload import CHANNEL_OPTIONS, code_name

END_TIMEOUT_S = 5.0  # one EndTransaction attempt (a slave holds a forwarded one until the new master answers)
END_GIVE_UP_S = 30.0  # an EndTransaction not answered OK this long after its first attempt is given up
END_RETRY_PAUSE_S = 0.2
CHECKER_RECONNECT_S = 0.5  # the checker's Telemetry stream ended (its broker restarting): opened again after this


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
        return cpu_share(self.cpu_s, self.wall_s)


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
    run = TxnRun()

    async def send_and_end(stub: rpc.MessagingServiceStub, request: spb.SendMessageRequest) -> None:
        accepted = await send_halves(stub, request, run)
        if rollback is not None and accepted:
            topic = request.messages[0].topic.name
            await asyncio.gather(
                *(
                    end_until_ok([stub], end_request(topic, m, run.transaction_ids[m], resolution_of(m, rollback)), run)
                    for m in accepted
                )
            )

    run.wall_s, run.cpu_s = await in_flight(addr, requests, streams, watch, send_and_end)
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
