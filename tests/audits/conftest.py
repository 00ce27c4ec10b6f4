"""Audit fixtures: one real local Spark session per test run (UI off, 127.0.0.1), and an event
store folder of the test's own."""

from __future__ import annotations

import pytest

from spark_jobs.offset_audit import build_session


@pytest.fixture(scope="session")
def spark():
    session = build_session(
        "local[2]", {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g"}, app_name="offset-audit-tests"
    )
    yield session
    session.stop()


@pytest.fixture
def events_uri(tmp_path, settings) -> str:
    uri = str(tmp_path / "offset-events")
    settings.AUDIT_EVENTS_URI = uri
    return uri
