"""Isolating a broker over REST (/api/v1/operations/brokers/isolate and /unisolate): admin only, 400
with field errors, audited like every admin REST call; the broker hears it in every registration
answer ("isolated"), so a restart or a missed push cannot make it forget."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.controller.models import ReplicaGroup
from controlplane.models import ApiToken, Isolation, OperatorAction
from nameserver import selectors as ns_selectors
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body
from tests.nameserver.helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OPS = "/api/v1/operations/brokers"


def client(scope: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(f'{scope}-tool', scope)[1]}")
    return c


@pytest.fixture
def broker():
    """Group g1 of cluster c1: controller replicas 1 (master), 2 and 3 alive, all registered with the
    nameserver (master as id 0). Returns the broker-token client."""
    b = client("broker")
    for i in (1, 2, 3):
        assert b.post(f"{CTL}/brokers/apply-broker-id", apply_body(i), format="json").status_code == 200
        assert b.post(f"{CTL}/brokers/heartbeat", heartbeat_body(i), format="json").status_code == 200
    assert (
        b.post(f"{CTL}/elect-master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1}, format="json").json()[
            "masterBrokerId"
        ]
        == 1
    )
    for i in (1, 2, 3):
        r = b.post(f"{NS}/brokers/register", register_body(0 if i == 1 else i, addr(i), name="g1"), format="json")
        assert r.status_code == 200 and r.json()["isolated"] is False
    return b


def test_isolate_then_lift_over_rest_moves_routes_elections_and_the_registration_answer(broker):
    admin = client("admin")
    r = admin.post(f"{OPS}/isolate", {"brokerName": "g1", "brokerId": 2}, format="json")
    assert r.status_code == 200, r.content
    assert r.json() == {
        "code": 0,
        "name": "SUCCESS",
        "clusterName": "c1",
        "brokerName": "g1",
        "brokerId": 2,
        "brokerAddr": addr(2),
        "isolated": True,
        "changed": True,
    }
    assert admin.post(f"{OPS}/isolate", {"brokerName": "g1", "brokerId": 2}, format="json").json()["changed"] is False
    assert addr(2) not in ns_selectors.topic_route("TopicA").broker_datas[0].broker_addrs.values()
    # A restarted broker (or one that missed the push) hears it again when it registers.
    again = broker.post(f"{NS}/brokers/register", register_body(2, addr(2), name="g1"), format="json")
    assert again.status_code == 200 and again.json()["isolated"] is True
    other = broker.post(f"{NS}/brokers/register", register_body(3, addr(3), name="g1"), format="json")
    assert other.json()["isolated"] is False
    refused = broker.post(f"{CTL}/elect-master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 2}, format="json")
    assert refused.json().get("masterBrokerId") != 2 and ReplicaGroup.objects.get().master_broker_id == 1

    lifted = admin.post(f"{OPS}/unisolate", {"brokerName": "g1", "brokerId": 2}, format="json")
    assert lifted.status_code == 200 and (lifted.json()["isolated"], lifted.json()["changed"]) == (False, True)
    assert not Isolation.objects.exists()
    assert broker.post(f"{NS}/brokers/register", register_body(2, addr(2), name="g1"), format="json").json()["isolated"] is False
    assert addr(2) in ns_selectors.topic_route("TopicA").broker_datas[0].broker_addrs.values()

    audited = list(OperatorAction.objects.order_by("id").values_list("actor", "action", "broker_name", "result"))
    assert audited == [
        ("token:admin-tool", f"POST {OPS}/isolate", "g1", "ok"),
        ("token:admin-tool", f"POST {OPS}/isolate", "g1", "ok"),
        ("token:admin-tool", f"POST {OPS}/unisolate", "g1", "ok"),
    ]


def test_only_operators_may_isolate(broker):
    body = {"brokerName": "g1", "brokerId": 2}
    assert APIClient().post(f"{OPS}/isolate", body, format="json").status_code == 401
    assert client("read").post(f"{OPS}/isolate", body, format="json").status_code == 403
    assert broker.post(f"{OPS}/isolate", body, format="json").status_code == 403
    assert not Isolation.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"brokerId": 2}, "brokerName"),
        ({"brokerName": "g/1", "brokerId": 2}, "brokerName"),
        ({"brokerName": "g1"}, "brokerId"),
        ({"brokerName": "g1", "brokerId": "two"}, "brokerId"),
        ({"brokerName": "g1", "brokerId": -1}, "brokerId"),
        ({"brokerName": "g1", "brokerId": 9}, "brokerId"),  # not a member of g1
    ],
    ids=["no-name", "bad-name", "no-id", "id-not-a-number", "negative-id", "unknown-member"],
)
def test_bad_input_is_a_400_with_field_errors(broker, body, field):
    r = client("admin").post(f"{OPS}/isolate", body, format="json")
    assert r.status_code == 400 and r.json()["name"] == "INVALID_PARAMETER"
    assert list(r.json()["fields"]) == [field]
    assert not Isolation.objects.exists()


def test_an_unknown_broker_set_is_a_404(db):
    r = client("admin").post(f"{OPS}/unisolate", {"brokerName": "nope", "brokerId": 1}, format="json")
    assert r.status_code == 404 and r.json()["name"] == "BROKER_NOT_EXIST"


def test_a_nameserver_only_broker_is_isolated_by_its_nameserver_id(db):
    b = client("broker")
    assert b.post(f"{NS}/brokers/register", register_body(0, addr(5), name="plain"), format="json").status_code == 200
    r = client("admin").post(f"{OPS}/isolate", {"brokerName": "plain", "brokerId": 0}, format="json")
    assert r.status_code == 200 and r.json()["brokerAddr"] == addr(5)
    assert b.post(f"{NS}/brokers/register", register_body(0, addr(5), name="plain"), format="json").json()["isolated"] is True
