"""A finding is one typed record (spark_jobs.schema.Finding): its fields are named once, and the
table the job writes (pg.FINDING_COLUMNS, the Django model, the migrated columns) and the REST shape
(FindingSerializer) are checked against it here; a record written by the job reads back equal."""

from __future__ import annotations

import dataclasses
import typing
from datetime import UTC, datetime

import pytest
from django.db import connection

from audits.models import AuditRun, Finding, RunStatus
from audits.serializers import FindingSerializer
from audits.services import job_environment
from spark_jobs import pg, schema
from spark_jobs.schema import FINDING_FIELDS, Cause, FindingKind

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

AT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
ROLLBACK = schema.Finding(
    kind=FindingKind.ROLLBACK,
    cause=Cause.UNCLEAN_ELECTION,
    cluster_name="c1",
    consumer_group="orders",
    topic="t1",
    broker_name="rg-a",
    queue_id=3,
    master_epoch=7,
    broker_id=2,
    role="SYNC_MASTER",
    source="master_takeover",
    previous_broker_id=1,
    previous_master_epoch=6,
    previous_offset=100,
    previous_at=AT,
    offset=40,
    messages_again=60,
    queue_max_offset=90,
    detected_at=AT,
    operator_initiated=True,
)
BEYOND = schema.Finding(
    kind=FindingKind.BEYOND_MAX_OFFSET,
    cluster_name="c1",
    consumer_group="orders",
    topic="t1",
    broker_name="rg-a",
    queue_id=4,
    master_epoch=7,
    broker_id=2,
    role="SYNC_MASTER",
    source="client_commit",
    offset=120,
    queue_max_offset=100,
    excess=20,
    event_count=2,
    detected_at=AT,
    last_seen_at=AT,
)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def test_the_model_has_the_record_s_fields_with_the_same_nullability():
    hints = typing.get_type_hints(schema.Finding)
    fields = {f.attname: f for f in Finding._meta.concrete_fields if f.attname not in ("id", "run_id")}
    assert tuple(fields) == FINDING_FIELDS  # the same names, in the same order
    for name in FINDING_FIELDS:
        optional = type(None) in typing.get_args(hints[name])
        assert fields[name].null is optional, name
    record_kinds = {k.value for k in FindingKind}
    assert {c for c, _ in Finding._meta.get_field("kind").choices} == record_kinds
    assert {c for c, _ in Finding._meta.get_field("cause").choices} == {c.value for c in Cause}


def test_the_job_writes_every_field_to_a_migrated_column():
    with connection.cursor() as cur:
        columns = {c.name for c in connection.introspection.get_table_description(cur, Finding._meta.db_table)}
    assert pg.FINDING_COLUMNS == ("run_id", *FINDING_FIELDS) and set(pg.FINDING_COLUMNS) == columns - {"id"}


def test_the_rest_shape_is_the_record_in_camel_case():
    fields = FindingSerializer().fields
    assert list(fields) == ["id", *map(camel, FINDING_FIELDS), "replicaGroupUrl", "historyUrl"]
    assert all(fields[camel(n)].source == n for n in FINDING_FIELDS)


def test_a_record_written_by_the_job_reads_back_equal_and_serializes_each_field():
    run = AuditRun.objects.create(trigger="cli", status=RunStatus.RUNNING, active=True)
    totals = dict.fromkeys(("events_scanned", "rollbacks", "messages_again", "beyond_max_offset", "explained_by_reset"), 1)
    with pg.connect(job_environment()["DATABASE_URL"]) as conn:
        pg.write_results(conn, run.pk, [ROLLBACK, BEYOND], {**totals, "session_seconds": 1.0, "job_seconds": 2.0, "summary": {}})
    rows = Finding.objects.filter(run=run).order_by("queue_id")
    assert [f.as_record() for f in rows] == [ROLLBACK, BEYOND]
    shown = FindingSerializer(rows[0]).data
    for name, value in dataclasses.asdict(ROLLBACK).items():
        expected = value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value
        assert shown[camel(name)] == expected, name
