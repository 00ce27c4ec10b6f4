"""The rollback rule's cases and random streams, and the events as the rule's forms read them
(tests/audits/test_rollback_rule.py, test_rollback_rule_engines.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
from hypothesis import strategies as st

from spark_jobs import segments
from spark_jobs.rules import Commit, Election, GroupElection, History, LoggedReset, Queue
from spark_jobs.rules import decreases as reference
from spark_jobs.schema import COLUMNS, Source, arrow_schema, queue_key

CC, SYNC, PRE, RESET, TAKEOVER = "client_commit", "slave_sync", "pre_online_sync", "operator_reset", "master_takeover"
M, S = "SYNC_MASTER", "SLAVE"
T0 = 1_700_000_000_000
NAMES = ("consumer_group", "topic", "broker_name", "queue_id")
STEP = ("ts_ms", "master_epoch", "broker_id", "offset")


@dataclass(frozen=True)
class Ev:
    queue: Queue
    commit: Commit


def ev(queue: Queue, ts_s: int, offset: int, source: str = CC, broker: int = 0, epoch: int = 1, role: str = M) -> Ev:
    return Ev(queue, Commit(broker, role, epoch, T0 + ts_s * 1000, offset, source, "c1"))


def key_of(queue: Queue, previous: tuple, current: tuple) -> tuple:
    """A decrease as every form can say it: the queue, then (time, epoch, broker, offset) of both commits."""
    return (queue.consumer_group, queue.topic, queue.broker_name, queue.queue_id, *previous, *current)


def step(c: Commit) -> tuple:
    return (c.ts_ms, c.master_epoch, c.broker_id, c.offset)


def reference_keys(events: list[Ev]) -> Counter:
    return Counter(key_of(d.queue, step(d.previous), step(d.current)) for d in reference([(e.queue, e.commit) for e in events]))


def row_keys(rows) -> Counter:
    """Decrease rows (dicts or Spark rows) with the names, ``STEP`` and ``prev_<STEP>``."""
    return Counter(
        key_of(Queue(*(r[n] for n in NAMES)), tuple(r[f"prev_{c}"] for c in STEP), tuple(r[c] for c in STEP)) for r in rows
    )


# --- the events as each form reads them ---------------------------------------------------------


def table(events: list[Ev]) -> pa.Table:
    rows: dict[str, list] = {n: [] for n, _ in COLUMNS}
    for e in events:
        q, c = e.queue, e.commit
        values = {
            "queue_key": queue_key(q.consumer_group, q.topic, q.broker_name, q.queue_id),
            "cluster_name": c.cluster_name,
            "broker_name": q.broker_name,
            "broker_id": c.broker_id,
            "role": c.role,
            "master_epoch": c.master_epoch,
            "consumer_group": q.consumer_group,
            "topic": q.topic,
            "queue_id": q.queue_id,
            "offset": c.offset,
            "queue_max_offset": c.queue_max_offset,
            "source": c.source,
            "ts_ms": c.ts_ms,
            "dv_state_version": 0,
            "dv_counter": 0,
            "dv_timestamp": 0,
            "received_ms": c.ts_ms,
        }
        for n in rows:
            rows[n].append(values[n])
    return pa.Table.from_pydict(rows, schema=arrow_schema())


def read_table(events: list[Ev]) -> pa.Table:
    """As segments.read_file hands a file's events to the scan."""
    return table(events).select(list(segments.INPUT)).cast(segments.READ)


# --- the cases ----------------------------------------------------------------------------------


def q(case: str, queue_id: int = 0, broker_name: str = "rg") -> Queue:
    return Queue(case, "t", broker_name, queue_id)


# (name, events, the decreases as (previous offset, offset) per queue in order)
CASES: list[tuple[str, list[Ev], list[tuple[Queue, int, int]]]] = [
    ("rising offsets are no decrease", [ev(q("rise"), t, o) for t, o in ((1, 10), (2, 20), (3, 20), (4, 30))], []),
    ("a commit below the one before it is", [ev(q("down"), 1, 100), ev(q("down"), 2, 40)], [(q("down"), 100, 40)]),
    (
        "commits are ordered by time, not as reported",
        [ev(q("late"), 3, 50), ev(q("late"), 1, 10), ev(q("late"), 2, 60)],
        [(q("late"), 60, 50)],
    ),
    ("a reported operator reset is intended", [ev(q("reset"), 1, 800), ev(q("reset"), 2, 0, RESET), ev(q("reset"), 3, 5)], []),
    (
        "after a reset the next decrease counts from it",
        [ev(q("after"), 1, 800), ev(q("after"), 2, 0, RESET), ev(q("after"), 3, 50), ev(q("after"), 4, 30)],
        [(q("after"), 50, 30)],
    ),
    (
        "a slave's synced copy is not served",
        [ev(q("sync"), 1, 100), ev(q("sync"), 2, 10, SYNC, broker=1, role=S), ev(q("sync"), 3, 110)],
        [],
    ),
    (
        "a takeover and a pre-online sync are served",
        [
            ev(q("served"), 1, 230, broker=1, role=S),
            ev(q("served"), 2, 200, TAKEOVER),
            ev(q("served"), 3, 300, PRE),
            ev(q("served"), 4, 250, PRE),
        ],
        [(q("served"), 230, 200), (q("served"), 300, 250)],
    ),
    (
        "at the same time, the later epoch comes after",
        [ev(q("epoch"), 5, 40, broker=2, epoch=2), ev(q("epoch"), 5, 100, broker=0, epoch=1)],
        [(q("epoch"), 100, 40)],
    ),
    (
        "at the same time and epoch, the higher broker id comes after",
        [ev(q("broker"), 5, 40, broker=1), ev(q("broker"), 5, 100, broker=0)],
        [(q("broker"), 100, 40)],
    ),
    (
        "a reset equal in all four to a commit comes after it",
        [ev(q("tie"), 1, 100), ev(q("tie"), 5, 50, RESET), ev(q("tie"), 5, 50)],
        [(q("tie"), 100, 50)],
    ),
    ("queues are apart", [ev(q("apart", 0), 1, 100), ev(q("apart", 1), 2, 50), ev(q("apart", 0, "rg2"), 3, 10)], []),
]
TABLE_EVENTS = [e for _, events, _ in CASES for e in events]


HISTORY = History(
    elections=(GroupElection("rg", Election(7, 2, 2, (0, 2), "operator")),),
    resets=(LoggedReset(9, "", "down", None, None, T0 + 1500),),  # explains "down"'s decrease
)


# --- random streams -----------------------------------------------------------------------------

QUEUES = [Queue("g1", "t", "rg-a", 0), Queue("g1", "t", "rg-a", 1), Queue("g2", "t", "rg-b", 0)]
event = st.builds(
    lambda queue, ts, epoch, broker, offset, source, role, max_offset: Ev(
        queue, Commit(broker, role, epoch, T0 + ts * 10_000, offset, source, "c1", max_offset)
    ),
    st.sampled_from(QUEUES),
    st.integers(0, 30),
    st.integers(1, 3),
    st.integers(0, 2),
    st.integers(0, 8).map(lambda o: o * 10),
    st.sampled_from([s.value for s in Source]),
    st.sampled_from([M, S]),
    st.none() | st.just(45),
)
# Commits equal in (queue, time, epoch, broker, offset) and otherwise different have no order between
# them (the table has the one tie the rule orders: a reset after a commit).
streams = st.lists(event, max_size=80, unique_by=lambda e: (e.queue, *step(e.commit)))
elections = st.lists(
    st.builds(
        lambda name, epoch, new, sss, trigger, id_: GroupElection(name, Election(id_, epoch, new, tuple(sorted(sss)), trigger)),
        st.sampled_from(["rg-a", "rg-b"]),
        st.integers(1, 3),
        st.integers(0, 2),
        st.frozensets(st.integers(0, 2)),
        st.sampled_from(["controller", "operator"]),
        st.integers(1, 10_000),
    ),
    max_size=4,
    unique_by=(lambda g: (g.broker_name, g.election.master_epoch), lambda g: g.election.transition_id),
)
resets = st.lists(
    st.builds(
        lambda id_, name, group, topic, qid, ts: LoggedReset(id_, name, group, topic, qid, T0 + ts * 10_000),
        st.integers(1, 10_000),
        st.sampled_from(["", "rg-a", "rg-b"]),
        st.sampled_from(["g1", "g2"]),
        st.sampled_from([None, "t"]),
        st.sampled_from([None, 0, 1]),
        st.integers(0, 30),
    ),
    max_size=2,
)
