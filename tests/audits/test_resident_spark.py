"""The audits' resident Spark (spark_jobs/server.py): a real server process (Spark Connect, token
required, warmed by an audit of its own) that audit runs connect to instead of starting a JVM. The
same synthetic rollbacks come out as from a session of the job's own; a wrong token is refused; a
server that does not answer makes the run start its own session. Real Spark, Postgres, Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from audits import services
from audits.models import AuditRun, Finding, RunStatus
from controlplane.audit import record
from spark_jobs import pg
from spark_jobs.offset_audit import execute
from testkit.ports import free_port

from .helpers import now_ms, store
from .test_job_synthetic import elect, synthetic_events

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def resident(tmp_path_factory):
    """The server, started once for this module and stopped after it: (url, token file)."""
    folder = tmp_path_factory.mktemp("resident-spark")
    token_file, log_path, port = folder / "token", folder / "server.log", free_port()
    cmd = [sys.executable, "-m", "spark_jobs.server", "--master", "local[2]", "--port", str(port)]
    cmd += ["--token-file", str(token_file)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while b"ready sc://localhost:" not in log_path.read_bytes():
            tail = log_path.read_text(errors="replace")[-3000:]
            assert proc.poll() is None, f"the server exited:\n{tail}"
            assert time.monotonic() < deadline, f"the server was not ready in time:\n{tail}"
            time.sleep(0.5)
        assert b"warm-up audit:" in log_path.read_bytes()
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        yield f"sc://localhost:{port}", token_file
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log_path.read_text(errors="replace")[-3000:]


def _findings(run: AuditRun) -> set[tuple]:
    return {
        (f.kind, f.cause, f.broker_name, f.consumer_group, f.queue_id, f.master_epoch, f.previous_offset, f.offset)
        + (f.messages_again,)
        for f in Finding.objects.filter(run=run)
    }


def _run(settings, events_uri: str, remote: str, token_file: Path) -> AuditRun:
    settings.AUDIT_EVENTS_URI = events_uri
    settings.AUDIT_SPARK_MASTER = "local[2]"
    settings.AUDIT_SPARK_REMOTE, settings.AUDIT_SPARK_TOKEN_FILE = remote, str(token_file)
    run = AuditRun.objects.create(trigger="cli", status=RunStatus.QUEUED, active=True)
    services.execute_run(run.pk)
    run.refresh_from_db()
    return run


def test_an_audit_on_the_resident_spark_finds_what_a_session_of_its_own_finds(spark, events_uri, settings, resident):
    url, token_file = resident
    elect("rg-failover", 2, new_master=2, old_sss=[1, 2])
    elect("rg-unclean", 3, new_master=3, old_sss=[1])
    record("user:alice", "reset_offset", broker_name="rg-other", params={"consumerGroup": "g-reset", "topic": "t4"})
    store(events_uri, *synthetic_events(now_ms()))

    on_server = _run(settings, events_uri, url, token_file)
    assert on_server.status == RunStatus.SUCCEEDED, on_server.error
    assert on_server.summary["residentSpark"] is True and on_server.spark_master == url
    assert "stageSeconds" in on_server.summary and on_server.progress == 1

    own = AuditRun.objects.create(trigger="cli", status=RunStatus.RUNNING, active=True)
    with pg.connect(services.job_environment()["DATABASE_URL"]) as conn:
        execute(spark, conn, own.pk, events_uri, lookback_days=7)
    assert _findings(on_server) == _findings(own) and len(_findings(own)) == 5  # 4 rollbacks, 1 beyond max
    assert (on_server.rollbacks, on_server.messages_again) == (4, 240)


def test_a_wrong_token_is_refused(events_uri, settings, resident, tmp_path):
    url, _ = resident
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    store(events_uri, *synthetic_events(now_ms()))
    run = _run(settings, events_uri, url, wrong)
    assert run.status == RunStatus.FAILED
    assert "UNAUTHENTICATED" in run.error or "authenticat" in run.error.lower(), run.error[-2000:]


def test_a_resident_spark_that_does_not_answer_makes_the_run_start_its_own(events_uri, settings, tmp_path):
    store(events_uri, *synthetic_events(now_ms()))
    run = _run(settings, events_uri, f"sc://localhost:{free_port()}", tmp_path / "no-token")
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.summary["residentSpark"] is False and run.rollbacks == 5  # g-reset's reset is not in this test's operator log
    log = (Path(settings.DATA_DIR) / "logs").glob(f"offset-audit-*-{run.pk}.log")
    assert "does not answer; starting a session" in next(log).read_text()
    assert os.environ.get("SPARK_CONNECT_AUTHENTICATE_TOKEN") is None  # nothing leaked into the test process
