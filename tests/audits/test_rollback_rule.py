"""One rollback rule, several forms: "a queue's served committed offset went down, and it was not a
reset" is defined once, ``spark_jobs.rules.decreases`` (pure). The numpy forms that the job runs in
its tasks (spark_jobs/segments.py: one segment, and segments combined at their ends) must find
exactly what the definition finds, on the table of cases and on random streams; the engines (Spark,
Postgres) are held to the same in test_rollback_rule_engines.py. A rule changed in one form and not
in the others fails here."""

from __future__ import annotations

import ast
import random
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs import rules, schema, segments
from spark_jobs.rules import Decrease, Queue, commit_order
from spark_jobs.rules import decreases as reference
from spark_jobs.schema import queue_key

from .rollback_cases import CASES, NAMES, RESET, Ev, read_table, reference_keys, row_keys, streams

pytestmark = pytest.mark.unit


def numpy_one_segment(events: list[Ev]) -> Counter:
    out = list(segments.scan_segment(read_table(events), seg=0, buckets=2))
    return row_keys(r for b in out for r in b.to_pylist() if r["kind"] == segments.DEC)


def numpy_segments(events: list[Ev], rng: random.Random, in_order: bool = False) -> tuple[Counter, set[Queue]]:
    """The events cut into segments, each scanned, the segments' ends combined: the decreases found,
    and the queues left to exact ordering (their segments overlap). Cut in a random order, or
    ``in_order`` (commit order, rows shuffled inside each segment: no queue's segments overlap)."""
    shuffled = sorted(events, key=lambda e: commit_order(e.commit)) if in_order else rng.sample(events, len(events))
    cuts = sorted(rng.sample(range(1, len(shuffled)), min(4, len(shuffled)) - 1)) if len(shuffled) > 1 else []
    out = []
    for n, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(shuffled)], strict=True)):
        out += segments.scan_segment(read_table(rng.sample(shuffled[a:b], b - a)), seg=n, buckets=1)
    rows = [r for b in out for r in b.to_pylist()]
    ends = pa.table({"blob": pa.array([r["blob"] for r in rows if r["kind"] == segments.END], pa.binary())})
    combined = segments.combine_ends(ends).to_pylist()
    overlapping = {r["k"] for r in combined if r["kind"] == segments.OVERLAP}
    found = [r for r in rows + combined if r["kind"] == segments.DEC and r["k"] not in overlapping]
    by_key = {queue_key(*(getattr(e.queue, n) for n in NAMES)): e.queue for e in events}
    return row_keys(found), {by_key[k] for k in overlapping}


@pytest.mark.parametrize("name, events, expected", CASES, ids=[c[0] for c in CASES])
def test_the_definition_row_by_row(name, events, expected):
    found = reference([(e.queue, e.commit) for e in events])
    assert [(d.queue, d.previous.offset, d.current.offset) for d in found] == expected
    assert all(isinstance(d, Decrease) and d.current.source != RESET for d in found)


@pytest.mark.parametrize("name, events, expected", CASES, ids=[c[0] for c in CASES])
def test_numpy_segments_find_what_the_definition_finds(name, events, expected):
    assert numpy_one_segment(events) == reference_keys(events)
    for seed in range(5):
        assert numpy_segments(events, random.Random(seed), in_order=True) == (reference_keys(events), set())
        found, overlapping = numpy_segments(events, random.Random(seed))
        assert found == reference_keys([e for e in events if e.queue not in overlapping])


@settings(max_examples=300, deadline=None)
@given(events=streams, seed=st.integers(0, 2**16))
def test_numpy_segments_agree_with_the_definition_on_random_streams(events, seed):
    assert numpy_one_segment(events) == reference_keys(events)
    assert numpy_segments(events, random.Random(seed), in_order=True) == (reference_keys(events), set())
    found, overlapping = numpy_segments(events, random.Random(seed))
    assert found == reference_keys([e for e in events if e.queue not in overlapping])


def test_the_definition_stands_on_the_standard_library_alone():
    """rules.py and the schema it reads (at import) name no third-party module: the reference runs anywhere."""
    for module in (rules, schema):
        tree = ast.parse(Path(module.__file__).read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module and not n.level}
        assert names <= sys.stdlib_module_names | {"__future__"}, (module.__name__, names)
