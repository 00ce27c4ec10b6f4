"""The rollback rule on the engines: the whole audit job on Spark (its one pass over the files in
segments, the exact ordering of queues whose segments overlap, its judgement of the decreases),
``offset_audit.decreases_exact`` over Spark's own Parquet reader, and the Postgres query of
bench/audit.py (pg.rollback_steps_sql) find exactly what ``spark_jobs.rules`` finds (the decreases;
for the job, the very findings of ``rules.rollbacks``), on the table of cases and on random streams."""

from __future__ import annotations

import os
import random
import tempfile
from collections import Counter

import pyarrow.parquet as pq
import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs import pg, segments
from spark_jobs.offset_audit import audit, decreases, decreases_exact, list_event_files, scan
from spark_jobs.rules import History, rollbacks
from spark_jobs.schema import COLUMNS, FindingKind, arrow_schema

from .rollback_cases import (
    HISTORY,
    NAMES,
    STEP,
    TABLE_EVENTS,
    Ev,
    elections,
    reference_keys,
    resets,
    row_keys,
    streams,
    table,
)

pytestmark = pytest.mark.integration


def write_store(folder: str, events: list[Ev], files: int, rng: random.Random) -> str:
    """The events in ``files`` Parquet files of one date, in a random order and cut: segments overlap."""
    shuffled = list(events)
    rng.shuffle(shuffled)
    part = f"{folder}/event_date=2023-11-14"
    os.makedirs(part, exist_ok=True)
    cuts = sorted(rng.sample(range(1, len(shuffled)), min(files, len(shuffled)) - 1)) if len(shuffled) > 1 else []
    for n, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(shuffled)], strict=True)):
        pq.write_table(table(shuffled[a:b]), f"{part}/part-{n:05d}.parquet")
    return folder


def spark_forms(spark, events: list[Ev], history: History, rng: random.Random) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="rollback-rule-") as folder:
        write_store(folder, events, files=5, rng=rng)
        store = list_event_files(folder, tasks=3)
        found, _, _ = decreases(spark, store, scan(spark, store))
        exact, _ = decreases_exact(spark.read.schema(segments.ddl(arrow_schema())).parquet(folder))
        outcome = audit(spark, store, history)
        return {
            "job decreases": row_keys(found.collect()),
            "decreases_exact": row_keys(exact.collect()),
            "job": outcome,
        }


def postgres(events: list[Ev], partition: str) -> Counter:
    columns = ", ".join(f'"{n}" {"text" if k == "string" else "bigint"}' for n, k in COLUMNS)
    with connection.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE rollback_rule_events ({columns})")
        try:
            names = [n for n, _ in COLUMNS]
            rows = table(events).to_pylist()
            if rows:
                cur.executemany(
                    f"INSERT INTO rollback_rule_events ({', '.join(chr(34) + n + chr(34) for n in names)}) "
                    f"VALUES ({', '.join(['%s'] * len(names))})",
                    [[r[n] for n in names] for r in rows],
                )
            cur.execute(pg.rollback_steps_sql("rollback_rule_events", partition, (*NAMES, *STEP)))
            described = [d.name for d in cur.description]
            return row_keys(dict(zip(described, r, strict=True)) for r in cur.fetchall())
        finally:
            cur.execute("DROP TABLE rollback_rule_events")


def sorted_rollbacks(findings) -> list:
    return sorted((f for f in findings if f.kind == FindingKind.ROLLBACK), key=lambda f: f.identity())


@pytest.mark.django_db
@pytest.mark.parametrize("partition", ["queue_key", "consumer_group, topic, broker_name, queue_id"])
def test_the_postgres_query_finds_what_the_definition_finds(partition):
    assert postgres(TABLE_EVENTS, partition) == reference_keys(TABLE_EVENTS)


def test_the_job_on_spark_finds_what_the_definition_finds(spark):
    forms = spark_forms(spark, TABLE_EVENTS, HISTORY, random.Random(0))
    expected = reference_keys(TABLE_EVENTS)
    assert forms["job decreases"] == expected and forms["decreases_exact"] == expected
    judged = rollbacks([(e.queue, e.commit) for e in TABLE_EVENTS], HISTORY)
    outcome = forms["job"]
    assert sorted_rollbacks(outcome.findings) == sorted(judged.findings, key=lambda f: f.identity())
    assert (outcome.rollbacks, outcome.explained_by_reset) == (len(judged.findings), judged.explained_by_reset) == (7, 1)


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=streams)
def test_the_postgres_query_agrees_with_the_definition_on_random_streams(events):
    expected = reference_keys(events)
    assert postgres(events, "queue_key") == expected
    assert postgres(events, "consumer_group, topic, broker_name, queue_id") == expected


@settings(max_examples=8, deadline=None)
@given(events=streams.filter(bool), elections=elections, resets=resets, seed=st.integers(0, 2**16))
def test_the_job_on_spark_agrees_with_the_definition_on_random_streams(spark, events, elections, resets, seed):
    history = History(tuple(elections), tuple(resets))
    forms = spark_forms(spark, events, history, random.Random(seed))
    expected = reference_keys(events)
    assert forms["job decreases"] == expected and forms["decreases_exact"] == expected
    judged = rollbacks([(e.queue, e.commit) for e in events], history)
    outcome = forms["job"]
    assert sorted_rollbacks(outcome.findings) == sorted(judged.findings, key=lambda f: f.identity())
    assert (outcome.rollbacks, outcome.explained_by_reset) == (len(judged.findings), judged.explained_by_reset)
