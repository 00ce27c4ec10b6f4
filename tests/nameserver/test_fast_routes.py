"""The REST route's fast path (nameserver/fast_routes.py) through the real ASGI application, real Redis
and Postgres: it answers what Django answers, byte for byte but for the date, and leaves to Django
every request it could not answer alike."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from rest_framework.test import APIClient

from controlplane.asgi import router
from nameserver.fast_routes import FastRoutes

from .helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

M, S1 = "127.0.0.1:10911", "127.0.0.1:10921"


def fast_routes() -> FastRoutes:
    app = router.application_mapping["http"]
    assert isinstance(app, FastRoutes)
    return app


def get(path: str, token: str | None, host: bytes = b"127.0.0.1") -> dict:
    headers = [(b"host", host)] + ([(b"authorization", f"Bearer {token}".encode())] if token else [])

    async def call():
        return await HttpCommunicator(router, "GET", path, headers=headers).get_response(timeout=10)

    answer = async_to_sync(call)()
    answer["headers"] = sorted((k.lower(), v) for k, v in answer["headers"] if k.lower() != b"date")
    return answer


def fast_body(topic: str, token: str) -> bytes | None:
    """What the fast path alone would answer (None: it leaves the request to Django)."""
    scope = {
        "type": "http",
        "method": "GET",
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode())],
    }
    return async_to_sync(fast_routes()._cached_body)(scope, topic)


@pytest.fixture
def admin(admin_token) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {admin_token}")
    return client


def test_the_fast_path_answers_as_django_does_and_follows_every_registry_change(admin, read_token):
    assert admin.post(f"{NS}/brokers/register", register_body(0, M), format="json").status_code == 200
    assert admin.post(f"{NS}/brokers/register", register_body(1, S1), format="json").status_code == 200
    fast_routes().headers = None  # (another test's answers taught it before)
    by_django = get(f"{NS}/routes/TopicA", read_token)
    assert by_django["status"] == 200 and fast_body("TopicA", read_token) == by_django["body"]
    assert get(f"{NS}/routes/TopicA", read_token) == by_django  # now from the fast path

    # a change of the registry or of the config: the fast path has nothing at the new version, Django renders it
    assert admin.post(f"{NS}/brokers/b1/wipe-write-perm").status_code == 200
    assert fast_body("TopicA", read_token) is None
    wiped = get(f"{NS}/routes/TopicA", read_token)
    assert wiped["status"] == 200 and b'"perm":4' in wiped["body"] and wiped["headers"] == by_django["headers"]
    assert get(f"{NS}/routes/TopicA", read_token) == wiped
    assert admin.patch(f"{NS}/config", {"supportActingMaster": True}, format="json").status_code == 200
    assert admin.post(f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}, format="json").status_code == 200
    acting = get(f"{NS}/routes/TopicA", read_token)
    assert b'"brokerAddrs":{"0":"127.0.0.1:10921"}' in acting["body"]
    assert get(f"{NS}/routes/TopicA", read_token) == acting


# One test for every case: each test through the ASGI application holds one more pooled connection.
REFUSALS = [
    (None, "TopicA", b"127.0.0.1", 401),  # no token
    ("rmq_unknown", "TopicA", b"127.0.0.1", 401),  # an unknown token
    ("read", "Topic%2A", b"127.0.0.1", 400),  # a name the rules refuse
    ("read", "TopicA", b"evil.example", 400),  # a host not allowed
    ("read", "NoSuchTopic", b"127.0.0.1", 404),  # no route
]


def test_what_the_fast_path_cannot_answer_alike_django_answers(admin, read_token):
    assert admin.post(f"{NS}/brokers/register", register_body(0, M), format="json").status_code == 200
    assert get(f"{NS}/routes/TopicA", read_token)["status"] == 200  # the route is rendered, the headers learnt
    assert fast_body("TopicA", read_token) is not None
    for token, path, host, status in REFUSALS:
        answer = get(f"{NS}/routes/{path}", read_token if token == "read" else token, host)
        assert answer["status"] == status, (token, path, host, answer["body"])
        assert b"brokerDatas" not in answer["body"]
