"""Shared fixtures, and the test tiers.

Every test module chooses one tier with ``pytestmark`` (tests/tiers.py): ``unit`` tests touch no
service; for the others Postgres and Redis are real, and a missing service fails the run loudly, but
only when a selected test needs it.
"""

from __future__ import annotations

import logging

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from brokers.store.cuts import MARKER as GUARD_MARKER
from controlplane.auth import forget_cached_tokens
from controlplane.models import ApiToken, TokenScope
from testkit.brokers import broker_log_ends, guard_errors
from tests.aio import forget_channel_layer
from tests.lanes import pytest_xdist_make_scheduler  # noqa: F401  (how `make test` shares the work: a hook by name)
from tests.tiers import pytest_collection_modifyitems  # noqa: F401  (the tier check: a hook by name)


def pytest_sessionstart(session):
    assert settings.REDIS_KEY_PREFIX.startswith("rmqha-test"), "tests must run with controlplane.settings_test"


@pytest.fixture(scope="session")
def redis_reachable() -> None:
    """Checked once, by the first selected test that needs Redis."""
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        pytest.exit(
            f"Redis at {settings.REDIS_URL} is not reachable ({exc}); run the tests with "
            "`make test`, which starts an embedded one, or set REDIS_URL.",
            returncode=3,
        )


def clear_redis() -> None:
    """Delete every key of this test run (of this xdist worker): what a Redis restart with nothing on
    disk leaves of them."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(settings.REDIS_KEY_PREFIX + "*", count=1000))
    if keys:
        client.delete(*keys)


class _GuardLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if GUARD_MARKER in message:
            self.lines.append(message)


@pytest.fixture(autouse=True)
def acknowledged_data_guard(request):
    """Every test fails whose brokers (processes started through testkit.brokers, or stores in this
    process) logged the acknowledged-data guard's marker (brokers/store/cuts.py): a refused cut of
    acknowledged data, or replicated bytes that are no record. Tests that provoke it on purpose say
    so with ``@pytest.mark.log_guard_expected``."""
    handler = _GuardLines()
    logging.getLogger().addHandler(handler)
    ends = broker_log_ends()
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
    if request.node.get_closest_marker("log_guard_expected") is None:
        found = handler.lines + guard_errors(since=ends)
        assert not found, f"the acknowledged-data guard fired ({GUARD_MARKER}):\n" + "\n".join(found[:20])


@pytest.fixture(autouse=True)
def clean_state(request):
    """Every integration and e2e test starts with empty liveness, channel-layer and Celery keys, empty
    caches and a channel layer of its own (tests/aio.py says why). Unit tests share neither services
    nor caches: nothing to clean."""
    if request.node.get_closest_marker("unit") is not None:
        yield
        return
    from controlplane.controller import config_store
    from nameserver import route_cache, settings_store

    def clear_caches():
        route_cache.clear()
        forget_cached_tokens()
        settings_store.invalidate()
        config_store.invalidate()

    request.getfixturevalue("redis_reachable")
    clear_redis()
    clear_caches()
    forget_channel_layer()
    yield
    clear_caches()
    forget_channel_layer()


def _token(scope: str, name: str, cluster: str = "") -> str:
    return ApiToken.issue(name, scope, cluster)[1]


@pytest.fixture
def admin_token(db) -> str:
    return _token(TokenScope.ADMIN, "test-admin")


@pytest.fixture
def broker_token(db) -> str:
    return _token(TokenScope.BROKER, "test-broker")


@pytest.fixture
def read_token(db) -> str:
    return _token(TokenScope.READ, "test-read")


@pytest.fixture
def api(admin_token) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {admin_token}")
    return client


@pytest.fixture
def anon() -> APIClient:
    return APIClient()
