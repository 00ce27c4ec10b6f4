"""The skeleton every failover phase runs its trials on (timer-failover, txn-failover, fifo-failover):
its topic, a control-plane client, the paced load of normal messages that tells when the new master
writes, and a pop consumer group on the topic; then ``--kills`` trials, each begun once the group is
whole again and each with a kill -9 of the master (chaos/faults.py's Kill9: election, first write on
the new master, restart of the killed broker, back in the SyncStateSet); then every message the trials
sent is waited for, and the parts stop. A trial the group does not come back from stops the trials:
what was measured until then is reported."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from typing import Protocol, TypeVar

from bench.special.bed import Bed
from bench.special.receiving import TimerConsumers, wait_received
from chaos.faults import FaultRecord, Kill9
from chaos.harness import TOPIC
from chaos.workload import Producer
from testkit.procs import wait_until
from testkit.stats import rounded_median

WHOLE_TIMEOUT_S = 60.0
KILL_AFTER_S = 1.0  # a trial's kill -9, after its sends were answered (timer) or its first EndTransaction (txn)
LOAD_RATE = 100.0  # normal messages/s of the paced load (tells when the new master writes)
INVISIBLE_S = 10.0  # the consumers' invisible time: a message whose ack was lost comes again after it

W = TypeVar("W", bound=Collection[str])


class KilledTrial(Protocol):
    record: FaultRecord | None  # its kill -9, once it ran


class FailoverTrials:
    """The parts of one failover phase, made (the topic created, the consumers started) at once."""

    def __init__(
        self,
        bed: Bed,
        topic: str,
        message_type: str,
        group: str,
        load_prefix: str,
        *,
        invisible_s: float = INVISIBLE_S,
        consumers: type[TimerConsumers] = TimerConsumers,
    ):
        """``load_prefix``: the ids of the load's messages begin with it; ``consumers``: the class of the
        consumer group (a TimerConsumers) on ``topic``."""
        h = bed.h
        self.bed = bed
        self.body = os.urandom(bed.args.body_size)  # of the phase's messages
        bed.create_topic(topic, message_type)
        self.api = h.new_api()
        self.load = Producer(TOPIC, lambda: h.resolve(self.api), rate=LOAD_RATE, batch=4, id_prefix=load_prefix)
        self.consumers = bed.consumers(topic, group, invisible_s, consumers)
        self.problems: list[str] = []

    def kill_master(self) -> FaultRecord:
        return Kill9(self.bed.h, self.load).run()

    def run(
        self,
        trial: Callable[[int], None],
        sent: Callable[[], tuple[W, float]],
        *,
        before: Callable[[], None] | None = None,
        after: Callable[[], None] | None = None,
    ) -> W:
        """Starts the load; once it writes, ``before()``; ``trial(i)`` for each of ``--kills`` trials,
        once the group is whole again (the trial kills the master: ``kill_master``); ``after()``. Then
        the ids ``sent()`` names are waited for until the time it names (time.time()), and the
        consumers, the load and the client stop. Returns those ids."""
        try:
            self.load.start()
            wait_until(lambda: self.load.stats.acks, 30, "the first acknowledged write of the load")
            if before is not None:
                before()
            for i in range(self.bed.args.kills):
                wait_until(self.bed.whole, WHOLE_TIMEOUT_S, "the group whole before a trial")
                trial(i)
            if after is not None:
                after()
        except (RuntimeError, TimeoutError) as exc:  # the group did not come back: report what was measured
            self.problems.append(f"trials stopped: {exc!r}")
        finally:
            try:
                ids, until = sent()
                wait_received(self.consumers, ids, until)
            finally:
                self.consumers.stop()
                self.load.stop(grace_s=2.0)
                self.api.close()
        return ids

    def problem_lines(self, per_trial: Iterable[Iterable[str]]) -> list[str]:
        """What stopped the trials, then each trial's problems, numbered from 1."""
        return self.problems + [f"trial {i + 1}: {p}" for i, problems in enumerate(per_trial) for p in problems]


def records(trials: Iterable[KilledTrial]) -> list[FaultRecord]:
    """The kill -9 records of the trials that got as far as their kill."""
    return [t.record for t in trials if t.record is not None]


def kill_fields(record: FaultRecord | None, since: float) -> dict:
    """A trial's kill -9 in report.json: when (seconds after ``since``, time.time()), which node, its
    election, first write on the new master and heal."""
    r = record
    return {
        "killAtS": round(r.at_wall - since, 3) if r else None,
        "node": r.node if r else None,
        "electionS": r.detect_s if r else None,
        "firstWriteS": r.rto_s if r else None,
        "healS": r.heal_s if r else None,
    }


def kill_summary(r: FaultRecord) -> str:
    """A trial's kill -9 in a line."""
    return f"election {r.detect_s}, first write {r.rto_s}, heal {r.heal_s}"


def kill_figures(prefix: str, records: list[FaultRecord]) -> dict:
    """The medians of a failover phase's kill -9 trials: election, first write on the new master, heal."""
    return {
        f"{prefix}_election_s_median": rounded_median([r.detect_s for r in records if r.detect_s is not None]),
        f"{prefix}_first_write_s_median": rounded_median([r.rto_s for r in records if r.rto_s is not None]),
        f"{prefix}_heal_s_median": rounded_median([r.heal_s for r in records if r.heal_s is not None]),
    }
