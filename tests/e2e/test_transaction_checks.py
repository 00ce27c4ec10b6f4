"""One check per transaction per interval reaches the producer (issue 34; brokers/transaction_check.py),
with three real replicas and the official Python producer, whose Telemetry streams go to the two
replicas its routes name (the slaves): 100 transactions never resolved by their producer.

- Controller mode: the master's checks, relayed by one slave, then (kill -9 of the master) the new
  master's, relayed by itself: every transaction is asked once per run, never twice within
  transactionTimeOut. Answered COMMIT, each is delivered once and never asked about again.
- Classic mode with slave-acting-master: after a kill -9 of the master, the slave acting for it checks
  (once per run) and keeps the producer's commits; the returning master takes them back at
  pre-online, stores each message once, and asks about none of them again."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from rocketmq import TransactionChecker
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb

from brokers.topics import TopicConfigManager
from controlplane.models import ApiToken
from tests.e2e.test_acting_master import ACTING, broker_log
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_escape import kill_and_wait_for_the_acting_slave
from tests.e2e.test_failover import three_replicas
from tests.e2e.test_replication import Replica, send, stop_all
from tests.e2e.test_transaction_messages import TXN_TOPIC, access_of, producer_of, receive, send_half
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TIMEOUT_MS = 2000  # transactionTimeOut: the least time between two checks of a transaction
INTERVAL_MS = 3000  # transactionCheckInterval
CHECKS = {"transactionTimeOut": TIMEOUT_MS, "transactionCheckInterval": INTERVAL_MS}
TRANSACTIONS = 100


class Checker(TransactionChecker):
    """The producer's checker: records every check (transaction, when); answers UNKNOWN until
    ``commit_from_now``, then COMMIT, except for the transactions ``kept_open`` (whose checks show
    that check runs go on)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.asked: list[tuple[str, float]] = []
        self.kept_open: set[str] = set()
        self.committed_at: dict[str, float] = {}
        self._committing = False

    def check(self, message) -> int:
        now = time.monotonic()
        with self._lock:
            self.asked.append((message.message_id, now))
            if not self._committing or message.message_id in self.kept_open:
                return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
            self.committed_at.setdefault(message.message_id, now)
        return TransactionResolution.COMMIT

    def commit_from_now(self) -> None:
        with self._lock:
            self._committing = True

    def times_asked(self, txns: set[str], since: float = 0.0) -> int:
        """The fewest checks any of ``txns`` got after ``since`` (time.monotonic())."""
        with self._lock:
            counts = dict.fromkeys(txns, 0)
            for txn, at in self.asked:
                if txn in counts and at > since:
                    counts[txn] += 1
        return min(counts.values())

    def asked_twice_within(self, seconds: float) -> dict[str, float]:
        """Transactions asked twice less than ``seconds`` apart: the shortest gap of each."""
        with self._lock:
            by_txn: dict[str, list[float]] = {}
            for txn, at in self.asked:
                by_txn.setdefault(txn, []).append(at)
        gaps = {txn: min(b - a for a, b in zip(ats, ats[1:], strict=False)) for txn, ats in by_txn.items() if len(ats) > 1}
        return {txn: gap for txn, gap in gaps.items() if gap < seconds}

    def asked_after_commit(self) -> set[str]:
        with self._lock:
            return {txn for txn, at in self.asked if txn in self.committed_at and at > self.committed_at[txn]}


def unresolved(producer, checker: Checker) -> tuple[set[str], str]:
    """TRANSACTIONS half messages never ended by their producer, and one more it never resolves."""
    txns = {send_half(producer, f"txn-{i}")[1].message_id for i in range(TRANSACTIONS)}
    open_one = send_half(producer, "kept-open")[1].message_id
    checker.kept_open.add(open_one)
    return txns, open_one


def assert_once_per_interval(checker: Checker) -> None:
    # Two checks of one run reach the producer within milliseconds; two runs' are at least
    # transactionTimeOut apart (a check waits that long after the last), less their delivery.
    twice = checker.asked_twice_within(TIMEOUT_MS / 2000)
    assert not twice, f"{len(twice)} transactions asked twice within one check run, e.g. {sorted(twice.items())[:3]}"


def test_one_check_per_transaction_per_interval_reaches_the_producer_before_and_after_a_failover(tmp_path):
    with three_replicas(tmp_path, "tx-once", topics=(TXN_TOPIC,), **CHECKS) as (replicas, master, info, master_of):
        checker = Checker()
        producer = producer_of(access_of(replicas), checker)
        try:
            txns, open_one = unresolved(producer, checker)
            everyone = txns | {open_one}
            wait_for(lambda: checker.times_asked(everyone) >= 2, 90, "two check runs of the master")

            master.stop(signal.SIGKILL)
            wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
            elected = time.monotonic()
            wait_for(lambda: checker.times_asked(everyone, elected) >= 2, 90, "two check runs of the new master")

            checker.commit_from_now()
            survivors = access_of([r for r in replicas if r is not master])
            assert receive(survivors, "tx-once", txns, 90) == dict.fromkeys(txns, 1)
            received = time.monotonic()
            wait_for(lambda: checker.times_asked({open_one}, received) >= 2, 60, "two check runs after every commit")
        finally:
            producer.shutdown()
        assert_once_per_interval(checker)
        assert checker.committed_at.keys() == txns
        assert not checker.asked_after_commit(), "a committed transaction was asked about again"


@contextmanager
def classic_acting_set(tmp_path, tag: str, **extra) -> Iterator[tuple[Replica, Replica, Replica]]:
    """group-a in classic mode with slave-acting-master: a master and two slaves, every send on all
    three (inSyncReplicas=3), with the transaction topic, taking writes: (master, slave 1, slave 2)."""
    token = ApiToken.issue(f"{tag}-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue(f'{tag}-admin', 'admin')[1]}"}
    settings = ACTING | {"totalReplicas": 3} | extra
    with uvicorn_server() as base:
        r = httpx.patch(f"{base}/api/v1/nameserver/config", headers=admin, timeout=5, json={"supportActingMaster": True})
        assert r.status_code == 200, r.text
        master = Replica(tmp_path, "master", 0, "SYNC_MASTER", base, token, inSyncReplicas=3, **settings)
        slaves = [Replica(tmp_path, f"slave{i}", i, "SLAVE", base, token, **settings) for i in (1, 2)]
        replicas = [master, *slaves]
        for replica in replicas:
            TopicConfigManager(replica.root / "config" / "topics.json").update(TXN_TOPIC)
        try:
            for replica in replicas:
                replica.start()
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 60, "the master taking writes with both slaves")
            yield master, slaves[0], slaves[1]
        finally:
            stop_all(*replicas)


def test_the_slave_acting_for_a_dead_master_checks_once_per_interval_and_hands_the_commits_back(tmp_path):
    with classic_acting_set(tmp_path, "tx-acting", **CHECKS) as (master, acting, other):
        everyone_addrs = access_of([master, acting, other])
        checker = Checker()
        producer = producer_of(everyone_addrs, checker)
        try:
            txns, open_one = unresolved(producer, checker)
            everyone = txns | {open_one}
            wait_for(lambda: checker.times_asked(everyone) >= 1, 90, "a check run of the master")

            kill_and_wait_for_the_acting_slave(master, acting)
            killed = time.monotonic()
            wait_for(lambda: checker.times_asked(everyone, killed) >= 2, 90, "two check runs of the acting slave")
            checker.commit_from_now()
            wait_for(lambda: checker.committed_at.keys() == txns, 60, "the producer's commits, kept by the acting slave")

            master.start()  # pre-online takes the acting slave's resolutions back
            wait_for(lambda: "pre-online done" in broker_log(master), 90, "the master back online")
            assert receive(everyone_addrs, "tx-acting", txns, 90) == dict.fromkeys(txns, 1)
            received = time.monotonic()
            wait_for(lambda: checker.times_asked({open_one}, received) >= 2, 60, "two check runs of the returning master")
        finally:
            producer.shutdown()
        assert_once_per_interval(checker)
        assert not checker.asked_after_commit(), "a transaction the acting slave resolved was asked about again"
        assert f"took back {TRANSACTIONS} transactions the acting master resolved" in broker_log(master)
