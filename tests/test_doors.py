"""Doors shut to guessing (issue 39 item 4): REST throttles for anonymous, token and operator callers with
broker calls exempt, token guessing throttled by address, login lockout (django-axes), and the
security headers ``check --deploy`` asks for. Real Postgres and Redis (the throttles count in Redis)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from controlplane.models import ApiToken, TokenScope
from controlplane.throttling import parse_rate

from .nameserver.helpers import NS

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LOW = {"anon": "3/min", "token": "4/min", "operator": "4/min", "auth_failure": "3/min"}


@pytest.fixture
def low_rates(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": LOW}


def client_from(address: str, token: str | None = None) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def statuses(client, n: int, path: str = f"{NS}/cluster-info") -> list[int]:
    return [client.get(path).status_code for _ in range(n)]


@pytest.mark.parametrize(
    "raw, expected",
    [("3/min", (3, 60)), ("10/s", (10, 1)), ("5/hour", (5, 3600)), ("1/day", (1, 86400))],
)
def test_rate_forms(raw, expected):
    assert parse_rate(raw) == expected


@pytest.mark.parametrize("raw", ["", "x/min", "3", "3/fortnight", "-1/min"])
def test_bad_rates_are_refused(raw):
    with pytest.raises(ValueError):
        parse_rate(raw)


def test_anonymous_callers_are_throttled_by_address(low_rates):
    assert statuses(client_from("10.0.0.1"), 4) == [401, 401, 401, 429]
    other = client_from("10.0.0.2").get(f"{NS}/cluster-info")
    assert other.status_code == 401  # another address has its own count


def test_a_token_is_throttled_and_told_when_to_come_back(low_rates):
    _, token = ApiToken.issue("tools", TokenScope.READ)
    codes = statuses(client_from("10.0.1.1", token), 5)
    assert codes == [200, 200, 200, 200, 429]
    refused = client_from("10.0.1.2", token).get(f"{NS}/cluster-info")  # counted by token, not address
    assert refused.status_code == 429
    assert refused.json()["name"] == "SYSTEM_BUSY"
    assert 1 <= int(refused["Retry-After"]) <= 61


def test_broker_calls_are_never_throttled(low_rates):
    _, broker = ApiToken.issue("broker-a", TokenScope.BROKER)
    _, admin = ApiToken.issue("ops", TokenScope.ADMIN)
    for token in (broker, admin):  # a heartbeat is exempt whoever sends it
        client = client_from("10.0.2.1", token)
        beats = [
            client.post(f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": "127.0.0.1:10911"}, format="json")
            for _ in range(8)
        ]
        assert [b.status_code for b in beats] == [200] * 8
    assert statuses(client_from("10.0.2.1", broker), 8) == [200] * 8  # a broker token is exempt everywhere


def test_token_guessing_is_throttled_by_address(low_rates):
    guesser = client_from("10.0.3.1", "not-a-token")
    assert statuses(guesser, 4) == [401, 401, 401, 429]
    _, token = ApiToken.issue("real", TokenScope.READ)
    assert client_from("10.0.3.2", token).get(f"{NS}/cluster-info").status_code == 200


def test_operators_are_throttled_by_login(low_rates):
    user = User.objects.create_superuser("opal", password="correct horse battery")
    client = APIClient(REMOTE_ADDR="10.0.4.1")
    client.force_login(user)
    assert statuses(client, 5) == [200, 200, 200, 200, 429]


def login(address: str, username: str, password: str) -> int:
    response = Client(REMOTE_ADDR=address).post("/accounts/login/", {"username": username, "password": password})
    return response.status_code


def test_login_locks_out_after_repeated_failures(settings):
    settings.AXES_FAILURE_LIMIT = 3
    User.objects.create_user("olga", password="correct horse battery")
    assert login("10.0.5.1", "olga", "correct horse battery") == 302  # logs in
    failures = [login("10.0.5.1", "olga", f"guess{i}") for i in range(3)]
    assert failures[:2] == [200, 200] and failures[2] == 429  # the form again, then locked out
    assert login("10.0.5.1", "olga", "correct horse battery") == 429  # even the right password
    assert login("10.0.5.2", "olga", "correct horse battery") == 302  # username and address are locked together


def test_a_success_resets_the_count(settings):
    settings.AXES_FAILURE_LIMIT = 3
    User.objects.create_user("otto", password="correct horse battery")
    for _ in range(3):
        assert login("10.0.6.1", "otto", "wrong") == 200
        assert login("10.0.6.1", "otto", "wrong") == 200
        assert login("10.0.6.1", "otto", "correct horse battery") == 302


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings", "DJANGO_DEBUG": "0", **env}
    return subprocess.run([sys.executable, "manage.py", *args], env=environ, capture_output=True, text=True, timeout=120)


def test_deploy_check_is_clean_over_https():
    done = manage("check", "--deploy", "--fail-level", "WARNING", DJANGO_HTTPS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_security_headers_are_sent(anon):
    response = Client().get("/accounts/login/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


def test_a_bad_rate_stops_the_process_with_one_line():
    done = manage("check", RMQHA_THROTTLE_TOKEN="lots/min")
    assert done.returncode != 0
    assert "RMQHA_THROTTLE_TOKEN" in done.stderr and "Traceback" not in done.stderr.splitlines()[-1]
