"""One check per transaction per interval reaches the producer (issue 34; RocketMQ's
``TransactionalMessageCheckService``, reference §7, which runs where the special services are on,
§5.1).

- **Who checks.** The broker serving the set: its master, or the slave acting for a dead one (RIP-32
  ``changeSpecialServiceStatus``). Every ``transactionCheckInterval`` it runs
  ``Transactions.check_once`` (brokers/transaction.py): the master puts back a copy of each
  transaction due, an acting master counts its checks in memory.
- **Who relays** (``relay_for``). The official clients keep their Telemetry streams with whichever
  replicas their routes name (the Python client's name the slaves, brokers/grpc/routes.py
  ``queue_addrs``): a producer may be reachable from several replicas of the set, or not from the
  serving broker at all. Exactly one broker relays each check (a Telemetry
  RecoverOrphanedTransactionCommand): the serving broker itself when a producer of the group holds a
  stream with it; else the live replica with the smallest broker id that holds one.
- **How.** The serving broker asks the other live replicas of its set (the nameserver's member group)
  which of the groups due hold a stream there (GET_PRODUCER_CONNECTION_LIST, 204), decides, and hands
  each relay its checks over the peer channel (RELAY_TRANSACTION_CHECKS, ours). A check that reached
  no producer (none connected, or its relay did not answer) is not handed to another broker: it waits
  for the next interval, so a producer is never asked twice in one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from .control.peers import CALL_TIMEOUT_S, PeerError, PeerRefused, RequestCode, ResponseCode
from .core.transaction import PGROUP, assign
from .store.message import Blank, CorruptRecord, Message, decode, encode
from .transaction import Transactions

log = logging.getLogger("brokers.transaction")

STEP_S = 0.1  # how often the loop looks whether this broker serves, and whether a check is due
MAX_CHECKS = 10_000  # checks one relay request carries at most (a run's are split)
MAX_BODY_CHARS = 12 * 1024 * 1024  # and about this much base64 (a peer frame takes 16 MiB)
MAX_GROUPS = 10_000  # groups one holders request names at most


class LocalProducers(Protocol):
    """The producers connected to this broker through one edge (gRPC's Telemetry streams, remoting's
    connections)."""

    def producers_of(self, group: str) -> int: ...

    def relay_check(self, group: str, half: Message) -> bool: ...


class EitherProducers:
    """The producers of every edge (gRPC's Telemetry streams, remoting's connections) as one: a check
    goes to the first edge that holds a producer of its group."""

    def __init__(self, *edges: LocalProducers):
        self.edges = edges

    def producers_of(self, group: str) -> int:
        return sum(edge.producers_of(group) for edge in self.edges)

    def relay_check(self, group: str, half: Message) -> bool:
        return any(edge.relay_check(group, half) for edge in self.edges)


class PeerCaller(Protocol):
    async def call(self, addr: str, code: int, body: dict | None = None, timeout: float = CALL_TIMEOUT_S) -> dict: ...


Members = Callable[[], Awaitable[Mapping[int, str]]]


# --- the rule: brokers/core/transaction.py (relay_for, assign) ----------------------------------------


def group_of(check: Message) -> str:
    return check.properties.get(PGROUP, "")


# --- peer bodies (pure) -------------------------------------------------------------------------------


def checks_bodies(checks: Sequence[Message]) -> list[tuple[int, dict]]:
    """RELAY_TRANSACTION_CHECKS' bodies for ``checks``, each check as its stored record
    (brokers/store/message.py) in base64, at most MAX_CHECKS and about MAX_BODY_CHARS a body: (how
    many checks, body) each."""
    bodies: list[tuple[int, dict]] = []
    part: list[str] = []
    size = 0
    for m in checks:
        record = encode(m, queue_offset=m.queue_offset, physical_offset=m.physical_offset, store_timestamp=m.store_timestamp)
        text = base64.b64encode(record).decode()
        if part and (len(part) == MAX_CHECKS or size + len(text) > MAX_BODY_CHARS):
            bodies.append((len(part), {"checks": part}))
            part, size = [], 0
        part.append(text)
        size += len(text)
    if part:
        bodies.append((len(part), {"checks": part}))
    return bodies


def parse_checks(body: Mapping) -> list[Message]:
    """RELAY_TRANSACTION_CHECKS' checks; ValueError saying what is wrong."""
    raw = body.get("checks")
    if not isinstance(raw, list) or len(raw) > MAX_CHECKS or not all(isinstance(r, str) for r in raw):
        raise ValueError(f"checks: must be a list of at most {MAX_CHECKS} base64 records")
    checks = []
    for i, text in enumerate(raw):
        try:
            record = decode(base64.b64decode(text, validate=True))
        except (binascii.Error, CorruptRecord, ValueError) as exc:
            raise ValueError(f"checks[{i}]: not a record ({exc})") from None
        if isinstance(record, Blank) or not group_of(record):
            raise ValueError(f"checks[{i}]: not a half message of a producer group")
        checks.append(record)
    return checks


def parse_groups(body: Mapping) -> list[str]:
    """GET_PRODUCER_CONNECTION_LIST's groups; ValueError saying what is wrong."""
    raw = body.get("producerGroups")
    if not isinstance(raw, list) or len(raw) > MAX_GROUPS or not all(isinstance(g, str) for g in raw):
        raise ValueError(f"producerGroups: must be a list of at most {MAX_GROUPS} names")
    return raw


def held_groups(reply: Mapping) -> set[str]:
    """The groups a GET_PRODUCER_CONNECTION_LIST answer says hold a stream there."""
    held = reply.get("producerGroups")
    if not isinstance(held, Mapping):
        raise ValueError("producerGroups: must be a JSON object")
    return {g for g, n in held.items() if isinstance(n, int) and n > 0}


# --- the part -----------------------------------------------------------------------------------------


class TransactionChecks:
    """Runs the checks while this broker serves its set (``serving()``: master or acting master), and
    relays the checks other brokers of the set hand it (the peer handlers)."""

    def __init__(
        self,
        transactions: Transactions,
        local: LocalProducers,
        peers: PeerCaller,
        members: Members,
        own_addr: str,
        interval_ms: int,
        serving: Callable[[], bool],
    ):
        self.transactions = transactions
        self.local = local
        self.peers = peers
        self.members = members
        self.own_addr = own_addr
        self.interval_ms = interval_ms
        self.serving = serving

    def handlers(self) -> dict[int, Callable[[dict], Awaitable[dict]]]:
        """The peer requests this part answers."""
        return {
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_groups_asked,
            RequestCode.RELAY_TRANSACTION_CHECKS: self.checks_handed,
        }

    async def run(self) -> None:
        last_check = time.monotonic()
        while True:
            await asyncio.sleep(STEP_S)
            try:
                if not self.serving():
                    self.transactions.reload()  # rebuilt from the log when this broker serves again
                    # A broker that starts serving (elected, acting, back from pre-online) waits a whole
                    # interval before its first run, as RocketMQ's check service does: the broker that
                    # served before may have checked a moment ago, and a producer is asked once per interval.
                    last_check = time.monotonic()
                elif time.monotonic() - last_check >= self.interval_ms / 1000:
                    last_check = time.monotonic()
                    checks = await self.transactions.check_once()
                    await self.deliver(checks.asked)
            except Exception:  # never let the checks stop
                log.exception("transaction check failed; retrying")
                await asyncio.sleep(1)

    async def deliver(self, checks: Sequence[Message]) -> int:
        """Have each check relayed by its one relay (``assign``); how many reached a producer."""
        if not checks:
            return 0
        groups = {group_of(c) for c in checks}
        holders_of: dict[str, set[str]] = {g: {self.own_addr} for g in groups if self.local.producers_of(g)}
        members: Mapping[int, str] = {}
        missing = sorted(groups - holders_of.keys())
        if missing:
            members = await self.members()
            others = sorted({a for a in members.values() if a != self.own_addr})
            answers = await asyncio.gather(*(self._held_at(addr, missing) for addr in others))
            for addr, held in zip(others, answers, strict=True):
                for group in held:
                    holders_of.setdefault(group, set()).add(addr)
        plan = assign(checks, group_of, self.own_addr, members, holders_of)
        sent = sum(self.local.relay_check(group_of(c), c) for c in plan.pop(self.own_addr, ()))
        remote = list(plan.items())
        sent += sum(await asyncio.gather(*(self._hand(addr, mine) for addr, mine in remote)))
        if sent < len(checks):
            log.info("transaction check: %d of %d reached no producer (asked next interval)", len(checks) - sent, len(checks))
        return sent

    async def _held_at(self, addr: str, groups: list[str]) -> set[str]:
        try:
            return held_groups(await self.peers.call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroups": groups}))
        except (PeerError, ValueError) as exc:
            log.info("transaction check: replica %s did not say which producers it holds (%s)", addr, exc)
            return set()

    async def _hand(self, addr: str, checks: list[Message]) -> int:
        relayed = 0
        for count, body in checks_bodies(checks):
            try:
                reply = await self.peers.call(addr, RequestCode.RELAY_TRANSACTION_CHECKS, body)
            except PeerError as exc:
                log.info("transaction check: %d checks not relayed by %s (%s)", count, addr, exc)
                continue
            n = reply.get("relayed")
            relayed += n if isinstance(n, int) else 0
        return relayed

    # --- peer handlers ----------------------------------------------------------------------------

    async def producer_groups_asked(self, body: dict) -> dict:
        """204: of the groups named, those a producer holds a Telemetry stream of here (and how many)."""
        try:
            groups = parse_groups(body)
        except ValueError as exc:
            raise PeerRefused(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        return {"producerGroups": {g: n for g in groups if (n := self.local.producers_of(g))}}

    async def checks_handed(self, body: dict) -> dict:
        """RELAY_TRANSACTION_CHECKS: the serving broker chose this broker to ask its producers."""
        try:
            checks = parse_checks(body)
        except ValueError as exc:
            raise PeerRefused(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        return {"relayed": sum(self.local.relay_check(group_of(c), c) for c in checks)}
