"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the queue locks of orderly remoting consumers (a 4.x
orderly push consumer holds the lock of each queue it consumes, renewing it every 20 s, so that no two
consumers of a group consume one queue at once), as Java's ``RebalanceLockManager`` keeps them: a lock
belongs to one client of the group and lapses REBALANCE_LOCK_MAX_LIVE_S after its last renewal.

``lockInStrictMode`` (seed 000, the lock quorum): a lock asked of this broker (not ``onlyThisBroker``)
is taken here and on the set's other live replicas (asked with ``onlyThisBroker``), and granted only for
the queues a quorum of ``totalReplicas/2+1`` replicas locked, so that a lock survives the loss of a
minority: after a failover the new master (or the acting slave) already holds the locks the group had.
An unlock asked here is passed on the same way. ``onlyThisBroker`` locks and unlocks here alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand

from .server import Connection

log = logging.getLogger("brokers.remoting")

REBALANCE_LOCK_MAX_LIVE_S = 60.0  # rocketmq.broker.rebalance.lockMaxLiveTime
MQ = tuple[str, str, int]  # (topic, brokerName, queueId)

# Ask the set's other live replicas: the LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body (``onlyThisBroker`` set),
# one reply body per replica that answered.
AskReplicas = Callable[[int, dict], Awaitable[list[dict]]]


class BadLockRequest(ValueError):
    pass


@dataclass
class _Lock:
    client_id: str
    renewed: float


def parse_mq_set(raw: object) -> list[MQ]:
    if not isinstance(raw, list):
        raise BadLockRequest("mqSet must be a list")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise BadLockRequest("a message queue must be an object")
        topic, broker, queue_id = item.get("topic"), item.get("brokerName"), item.get("queueId")
        if (
            not isinstance(topic, str)
            or not isinstance(broker, str)
            or not isinstance(queue_id, int)
            or isinstance(queue_id, bool)
        ):
            raise BadLockRequest("a message queue has a topic, a brokerName and an integer queueId")
        out.append((topic, broker, queue_id))
    return out


def mq_json(mq: MQ) -> dict:
    return {"topic": mq[0], "brokerName": mq[1], "queueId": mq[2]}


class RebalanceLocks:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._locks: dict[tuple[str, MQ], _Lock] = {}

    def try_lock(self, group: str, client_id: str, mqs: list[MQ]) -> list[MQ]:
        """The queues now locked by ``client_id`` (taken, or renewed)."""
        now, granted = self.clock(), []
        for mq in mqs:
            lock = self._locks.get((group, mq))
            if lock is None or lock.client_id == client_id or now - lock.renewed > REBALANCE_LOCK_MAX_LIVE_S:
                self._locks[(group, mq)] = _Lock(client_id, now)
                granted.append(mq)
        return granted

    def unlock(self, group: str, client_id: str, mqs: list[MQ]) -> None:
        for mq in mqs:
            lock = self._locks.get((group, mq))
            if lock is not None and lock.client_id == client_id:
                del self._locks[(group, mq)]

    def holder(self, group: str, mq: MQ) -> str | None:
        lock = self._locks.get((group, mq))
        return lock.client_id if lock is not None and self.clock() - lock.renewed <= REBALANCE_LOCK_MAX_LIVE_S else None


class LockHandler:
    """``strict()``: lockInStrictMode (read at each request: an operator may change it);
    ``quorum()``: totalReplicas/2+1."""

    def __init__(self, locks: RebalanceLocks, ask_replicas: AskReplicas, strict: Callable[[], bool], quorum: Callable[[], int]):
        self.locks, self.ask_replicas, self.strict, self.quorum = locks, ask_replicas, strict, quorum

    def handlers(self) -> dict[int, Callable]:
        return {RequestCode.LOCK_BATCH_MQ: self.lock, RequestCode.UNLOCK_BATCH_MQ: self.unlock}

    @staticmethod
    def _body(request: RemotingCommand) -> tuple[str, str, bool, list[MQ]]:
        try:
            body = json.loads(request.body.decode()) if request.body else None
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadLockRequest(f"the body is no JSON ({exc})") from None
        if not isinstance(body, dict):
            raise BadLockRequest("the body must be a JSON object")
        group, client_id = body.get("consumerGroup"), body.get("clientId")
        if not isinstance(group, str) or not group or not isinstance(client_id, str) or not client_id:
            raise BadLockRequest("consumerGroup and clientId must be non-empty strings")
        return group, client_id, body.get("onlyThisBroker") is True, parse_mq_set(body.get("mqSet", []))

    async def lock(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        try:
            group, client_id, only_here, mqs = self._body(request)
        except BadLockRequest as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"lock refused: {exc}")
        granted = self.locks.try_lock(group, client_id, mqs)
        quorum = self.quorum()
        if not only_here and self.strict() and quorum > 1:
            votes = dict.fromkeys(granted, 1)
            asked = {"consumerGroup": group, "clientId": client_id, "onlyThisBroker": True, "mqSet": [mq_json(m) for m in mqs]}
            for reply in await self.ask_replicas(RequestCode.LOCK_BATCH_MQ, asked):
                try:
                    for mq in parse_mq_set(reply.get("lockOKMQSet", [])):
                        votes[mq] = votes.get(mq, 0) + 1
                except BadLockRequest as exc:
                    log.info("a replica's lock answer was not read (%s)", exc)
            granted = [mq for mq in mqs if votes.get(mq, 0) >= quorum]
        body = {"lockOKMQSet": [mq_json(mq) for mq in granted]}
        return request.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    async def unlock(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        try:
            group, client_id, only_here, mqs = self._body(request)
        except BadLockRequest as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"unlock refused: {exc}")
        self.locks.unlock(group, client_id, mqs)
        if not only_here and self.strict() and self.quorum() > 1:
            asked = {"consumerGroup": group, "clientId": client_id, "onlyThisBroker": True, "mqSet": [mq_json(m) for m in mqs]}
            await self.ask_replicas(RequestCode.UNLOCK_BATCH_MQ, asked)
        return request.response(ResponseCode.SUCCESS)


async def gather_replies(calls: list[Awaitable[dict]]) -> list[dict]:
    """The replies of the calls that answered (a replica that did not is no vote)."""
    replies = await asyncio.gather(*calls, return_exceptions=True)
    return [r for r in replies if isinstance(r, dict)]
