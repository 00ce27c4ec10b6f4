"""The audit job's Postgres I/O, from the driver with psycopg (no JDBC).

Why not Spark's JDBC source: the PostgreSQL JDBC jar is not in pyspark's wheel and would have to be
fetched from Maven Central (``spark.jars.packages``) on every fresh machine; the job's Postgres
traffic is small either way (the controller's elections and the operator's resets in, a few
thousand findings out), so the driver reads and writes it directly and the job runs offline.

Tables are the Django app ``audits``'s (``audits_auditrun``, ``audits_finding``) and the control
plane's (``controlplane_transition``, ``controlplane_operatoraction``); migrations own their shape.
``rollback_steps_sql`` is the rollback rule as a Postgres query (bench/audit.py's baseline).
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Sequence

import psycopg

from .rules import COMMIT_ORDER, Election, GroupElection, History, LoggedReset, reset_scope
from .schema import FINDING_FIELDS, SERVING_SOURCES, Finding, Source

RESET_ACTIONS = ("reset_offset", "reset_consumer_offset")


def connect(database_url: str) -> psycopg.Connection:
    return psycopg.connect(database_url, autocommit=True, connect_timeout=10)


def load_history(conn: psycopg.Connection, since_ms: int | None) -> History:
    """Elections that named a master, and operator offset resets, since ``since_ms`` (None: all)."""
    since = [] if since_ms is None else [since_ms]
    cond = "" if since_ms is None else " AND created_at >= to_timestamp(%s / 1000.0)"
    rows = conn.execute(
        "SELECT id, broker_name, new_master_epoch, new_master_broker_id, old_sync_state_set, trigger "
        "FROM controlplane_transition WHERE kind = 'elect' AND new_master_broker_id IS NOT NULL" + cond,
        since,
    ).fetchall()
    elections = tuple(GroupElection(r[1], Election(r[0], r[2], r[3], tuple(r[4] or ()), r[5])) for r in rows)
    cond = "" if since_ms is None else " AND at >= to_timestamp(%s / 1000.0)"
    rows = conn.execute(
        "SELECT id, broker_name, params, (extract(epoch FROM at) * 1000)::bigint FROM controlplane_operatoraction "
        "WHERE action = ANY(%s) AND result = 'ok'" + cond,
        [list(RESET_ACTIONS), *since],
    ).fetchall()
    resets = []
    for action_id, broker_name, params, at_ms in rows:
        scope = reset_scope(params if isinstance(params, dict) else {})
        if scope is not None:
            resets.append(LoggedReset(action_id, broker_name or "", scope[0], scope[1], scope[2], at_ms))
    return History(elections, tuple(resets))


def create_run(conn: psycopg.Connection, spark_master: str, events_uri: str, lookback_days: int | None) -> int:
    """A run started outside the control plane (``python -m`` / spark-submit): its own row. Refused
    by the one-active-run constraint while another run is queued or running."""
    actor = f"cli:{getpass.getuser()}@{socket.gethostname()}"
    return conn.execute(
        "INSERT INTO audits_auditrun (trigger, requested_by, status, active, stage, progress, created_at, started_at, "
        "heartbeat_at, spark_master, events_uri, lookback_days, summary, error) VALUES ('cli', %s, 'running', true, "
        "'starting Spark', 0, now(), now(), now(), %s, %s, %s, '{}', '') RETURNING id",
        [actor[:150], spark_master, events_uri, lookback_days],
    ).fetchone()[0]


def mark_running(conn: psycopg.Connection, run_id: int, spark_master: str, events_uri: str, lookback_days: int | None) -> None:
    updated = conn.execute(
        "UPDATE audits_auditrun SET status = 'running', started_at = now(), heartbeat_at = now(), stage = 'starting Spark', "
        "spark_master = %s, events_uri = %s, lookback_days = %s WHERE id = %s AND status IN ('queued', 'running')",
        [spark_master, events_uri, lookback_days, run_id],
    ).rowcount
    if updated != 1:
        raise RuntimeError(f"audit run {run_id} does not exist or has already finished")


def report_progress(conn: psycopg.Connection, run_id: int, stage: str, progress: float) -> None:
    conn.execute(
        "UPDATE audits_auditrun SET stage = %s, progress = GREATEST(progress, %s), heartbeat_at = now() "
        "WHERE id = %s AND status = 'running'",
        [stage, min(1.0, max(0.0, progress)), run_id],
    )


def mark_failed(conn: psycopg.Connection, run_id: int, error: str) -> None:
    conn.execute(
        "UPDATE audits_auditrun SET status = 'failed', active = NULL, finished_at = now(), stage = 'failed', error = %s "
        "WHERE id = %s AND status IN ('queued', 'running')",
        [error[-4000:], run_id],
    )


FINDING_COLUMNS = ("run_id", *FINDING_FIELDS)


def write_results(conn: psycopg.Connection, run_id: int, findings: Sequence[Finding], totals: dict) -> None:
    """Findings and the run's summary in one transaction: a run is either complete or failed."""
    with conn.transaction():
        with conn.cursor() as cur:
            cur.execute("DELETE FROM audits_finding WHERE run_id = %s", [run_id])
            quoted = ", ".join(f'"{c}"' for c in FINDING_COLUMNS)
            with cur.copy(f"COPY audits_finding ({quoted}) FROM STDIN") as copy:
                for f in findings:
                    copy.write_row((run_id, *f.values()))
            cur.execute(
                "UPDATE audits_auditrun SET status = 'succeeded', active = NULL, finished_at = now(), heartbeat_at = now(), "
                "stage = 'done', progress = 1, events_scanned = %s, rollbacks = %s, messages_again = %s, "
                "beyond_max_offset = %s, explained_by_reset = %s, session_seconds = %s, job_seconds = %s, summary = %s "
                "WHERE id = %s",
                [
                    totals["events_scanned"],
                    totals["rollbacks"],
                    totals["messages_again"],
                    totals["beyond_max_offset"],
                    totals["explained_by_reset"],
                    totals["session_seconds"],
                    totals["job_seconds"],
                    json.dumps(totals["summary"]),
                    run_id,
                ],
            )


def rollback_steps_sql(table: str, partition: str, columns: Sequence[str] = ("offset",)) -> str:
    """The rollback rule (rules.decreases) as one Postgres window query over a table of offset events
    (schema.COLUMNS), partitioned by ``partition`` (the queue_key column, or the four names): per
    queue its served commits in commit order, each one below the one before it that is not a reset.
    Rows: ``columns`` of that commit and ``prev_<column>`` of the one before it (``offset`` is one)."""
    served = ", ".join(f"'{s.value}'" for s in SERVING_SOURCES)
    reset = f"'{Source.OPERATOR_RESET.value}'"
    order = ", ".join(f'"{c}"' for c in COMMIT_ORDER) + f", source = {reset}"
    cols = ", ".join(f'"{c}"' for c in columns)
    lags = ", ".join(f'lag("{c}") OVER w AS "prev_{c}"' for c in columns)
    prevs = ", ".join(f'"prev_{c}"' for c in columns)
    return (
        f"SELECT {cols}, {prevs} FROM (SELECT {cols}, source, {lags} FROM {table} WHERE source IN ({served}) "
        f"WINDOW w AS (PARTITION BY {partition} ORDER BY {order})) steps "
        f'WHERE "offset" < "prev_offset" AND source <> {reset}'
    )
