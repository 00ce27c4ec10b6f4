"""The controller REST API against real Postgres and Redis: the flow of reference §1.5–§1.9 and §2.1,
fencing codes, bad input, tokens."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.controller.invariants import check_history
from controlplane.controller.models import Replica, ReplicaGroup, Transition
from controlplane.models import ApiToken

from .helpers import CTL, addr, apply_body, heartbeat_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def ok(r, status=200):
    assert r.status_code == status, r.content
    return r.json()


def err(r, status, code):
    assert r.status_code == status, r.content
    body = r.json()
    assert body["code"] == code and body["detail"], body
    return body


@pytest.fixture
def broker():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('ctl-broker', 'broker')[1]}")
    return client


def join(client, broker_id: int, name: str = "g1", **hb) -> dict:
    """What a broker does on start (reference §2.1): next id, apply, register, heartbeat."""
    assert ok(client.get(f"{CTL}/groups/{name}/next-broker-id"))["nextBrokerId"] == broker_id
    ok(client.post(f"{CTL}/brokers/apply-broker-id", apply_body(broker_id, name), format="json"))
    body = ok(
        client.post(
            f"{CTL}/brokers/register",
            {"clusterName": "c1", "brokerName": name, "brokerId": broker_id, "brokerAddress": addr(broker_id)},
            format="json",
        )
    )
    ok(client.post(f"{CTL}/brokers/heartbeat", heartbeat_body(broker_id, name, **hb), format="json"))
    return body


def elect(client, broker_id=None, name="g1", designate=False):
    body = {"clusterName": "c1", "brokerName": name, "designateElect": designate}
    if broker_id is not None:
        body["brokerId"] = broker_id
    return client.post(f"{CTL}/elect-master", body, format="json")


def alter(client, master, master_epoch, members, ss_epoch, name="g1"):
    return client.post(
        f"{CTL}/alter-sync-state-set",
        {
            "brokerName": name,
            "masterBrokerId": master,
            "masterEpoch": master_epoch,
            "syncStateSet": members,
            "syncStateSetEpoch": ss_epoch,
        },
        format="json",
    )


def test_a_broker_set_from_first_replica_to_switchover(broker, api):
    first = join(broker, 1)
    assert first["masterBrokerId"] is None and first["syncStateSet"] == []
    join(broker, 2)
    join(broker, 3)
    # The first election goes to whoever asks (reference §1.5 step 3).
    body = ok(elect(broker, 2))
    assert (body["masterBrokerId"], body["masterEpoch"], body["syncStateSetEpoch"], body["syncStateSet"]) == (2, 1, 1, [2])
    assert body["masterAddress"] == addr(2) and body["brokerMemberGroup"] == {"1": addr(1), "2": addr(2), "3": addr(3)}
    # Another broker asking while the master lives: 2011, no change (200, as brokers treat it as success).
    still = ok(elect(broker, 3))
    assert still["code"] == 2011 and still["masterBrokerId"] == 2 and still["masterEpoch"] == 1
    # The master expands its SyncStateSet, fenced by both epochs.
    assert ok(alter(broker, 2, 1, [1, 2, 3], 1))["syncStateSetEpoch"] == 2
    err(alter(broker, 2, 1, [2, 3], 1), 409, 2001)  # stale syncStateSetEpoch
    err(alter(broker, 2, 0, [2, 3], 2), 409, 2000)  # stale masterEpoch
    err(alter(broker, 3, 1, [2, 3], 2), 409, 2002)  # not the master
    err(alter(broker, 2, 1, [2, 9], 2), 409, 2003)  # 9 is no replica
    err(alter(broker, 2, 1, [1, 3], 2), 409, 2013)  # lacks the master
    err(alter(broker, 2, 1, [1, 2, 3], 2), 409, 2013)  # unchanged
    # An operator moves mastership to a designated live replica of the set.
    moved = ok(elect(api, 3, designate=True))
    assert (moved["masterBrokerId"], moved["masterEpoch"], moved["syncStateSet"]) == (3, 2, [3])
    # Replica info and sync-state data tell the same.
    info = ok(broker.get(f"{CTL}/groups/g1/replica-info"))
    assert (info["masterBrokerId"], info["masterEpoch"], info["syncStateSetEpoch"], info["syncStateSet"]) == (3, 2, 3, [3])
    data = ok(broker.get(f"{CTL}/sync-state-data", {"brokerName": ["g1", "unknown"]}))["brokerReplicasInfo"]
    assert list(data) == ["g1"]
    assert [r["brokerId"] for r in data["g1"]["inSyncReplicas"]] == [3]
    assert [(r["brokerId"], r["alive"]) for r in data["g1"]["notInSyncReplicas"]] == [(1, True), (2, True)]
    # History: every committed transition, and the invariants hold.
    kinds = list(Transition.objects.values_list("kind", flat=True))
    assert kinds.count("elect") == 2 and kinds.count("alter") == 1 and kinds.count("apply_broker_id") == 3
    last = ok(broker.get(f"{CTL}/history", {"brokerName": "g1", "limit": 1}))["transitions"][0]
    assert last["trigger"] == "operator" and last["requestedBy"] == "token:test-admin"
    assert {c["brokerId"] for c in last["candidates"]} == {1, 2, 3}
    assert check_history() == []


def test_membership_in_the_sync_state_set_is_stored_per_replica(broker):
    join(broker, 1)
    join(broker, 2)
    ok(elect(broker, 1))
    ok(alter(broker, 1, 1, [1, 2], 1))
    assert dict(Replica.objects.values_list("broker_id", "in_sync_state_set")) == {1: True, 2: True}


def test_apply_broker_id_rules(broker):
    err(broker.post(f"{CTL}/brokers/apply-broker-id", apply_body(2), format="json"), 409, 2014)  # a new set starts at 1
    assert not ReplicaGroup.objects.exists()
    ok(broker.post(f"{CTL}/brokers/apply-broker-id", apply_body(1), format="json"))
    ok(broker.post(f"{CTL}/brokers/apply-broker-id", apply_body(1), format="json"))  # idempotent retry
    err(broker.post(f"{CTL}/brokers/apply-broker-id", apply_body(1, millis=2), format="json"), 409, 2014)
    assert ok(broker.get(f"{CTL}/groups/g1/next-broker-id"))["nextBrokerId"] == 2
    assert Transition.objects.filter(kind="apply_broker_id").count() == 1


def test_register_of_an_unknown_id_is_2010_and_a_moved_address_is_updated(broker):
    body = {"clusterName": "c1", "brokerName": "g1", "brokerId": 1, "brokerAddress": addr(1)}
    err(broker.post(f"{CTL}/brokers/register", body, format="json"), 404, 2010)
    join(broker, 1)
    ok(broker.post(f"{CTL}/brokers/register", {**body, "brokerAddress": "127.0.0.1:19999"}, format="json"))
    assert Replica.objects.get().broker_address == "127.0.0.1:19999"


def test_election_codes(broker, api):
    err(elect(broker, 1, name="nobody"), 404, 2010)
    join(broker, 1)
    join(broker, 2, timeout=100)  # 2 will look dead in a moment
    ok(elect(broker, 1))
    import time

    time.sleep(0.3)
    # A designated replica that is not alive (and not in the set) cannot be elected.
    err(elect(api, 2, designate=True), 409, 2012)
    # Brokers may not designate.
    err(elect(broker, 2, designate=True), 403, 16)
    err(elect(broker), 400, 2005)
    # An operator's automatic election while the master lives: 2011.
    assert ok(elect(api))["code"] == 2011


def test_clean_broker_data(broker, api):
    join(broker, 1)
    join(broker, 2, timeout=100)
    ok(elect(broker, 1))
    import time

    time.sleep(0.3)
    err(api.post(f"{CTL}/clean-broker-data", {"brokerName": "g1"}, format="json"), 409, 2009)  # has a master
    err(
        api.post(f"{CTL}/clean-broker-data", {"brokerName": "g1", "brokerControllerIdsToClean": "1"}, format="json"), 409, 2009
    )  # 1 is alive
    body = ok(api.post(f"{CTL}/clean-broker-data", {"brokerName": "g1", "brokerControllerIdsToClean": "2"}, format="json"))
    assert body["brokerMemberGroup"] == {"1": addr(1)} and body["masterEpoch"] == 1
    err(broker.post(f"{CTL}/clean-broker-data", {"brokerName": "g1"}, format="json"), 403, 16)
    ok(api.post(f"{CTL}/clean-broker-data", {"brokerName": "g1", "isCleanLivingBroker": True}, format="json"))
    assert not ReplicaGroup.objects.exists()
    err(broker.get(f"{CTL}/groups/g1/replica-info"), 404, 2008)
    assert check_history() == []


@pytest.mark.parametrize(
    "path, body, fields",
    [
        (
            "/brokers/apply-broker-id",
            {"clusterName": "c1", "brokerName": "g1", "appliedBrokerId": 0, "registerCheckCode": "x"},
            {"appliedBrokerId", "registerCheckCode"},
        ),
        ("/brokers/register", {"clusterName": "c1", "brokerName": "g/1", "brokerId": "one"}, {"brokerName", "brokerId"}),
        ("/brokers/heartbeat", {"clusterName": "c1", "brokerName": "g1", "brokerAddr": addr(1)}, {"brokerId"}),
        ("/brokers/heartbeat", {**heartbeat_body(1), "maxOffset": -5}, {"maxOffset"}),
        ("/elect-master", {"brokerName": "g1", "designateElect": True}, {"brokerId"}),
        (
            "/alter-sync-state-set",
            {"brokerName": "g1", "masterBrokerId": 1, "masterEpoch": -1, "syncStateSet": [], "syncStateSetEpoch": "x"},
            {"masterEpoch", "syncStateSet", "syncStateSetEpoch"},
        ),
        ("/clean-broker-data", {"brokerName": "g1", "brokerControllerIdsToClean": "a;b"}, {"brokerControllerIdsToClean"}),
    ],
)
def test_bad_input_is_400_with_field_errors(api, path, body, fields):
    b = err(api.post(CTL + path, body, format="json"), 400, 29)
    assert fields <= set(b["fields"])


@pytest.mark.parametrize(
    "method, path",
    [
        ("get", "/groups/g1/next-broker-id"),
        ("post", "/brokers/apply-broker-id"),
        ("post", "/elect-master"),
        ("post", "/alter-sync-state-set"),
        ("get", "/history"),
        ("get", "/metadata"),
        ("patch", "/config"),
    ],
)
def test_every_call_without_a_token_is_401(anon, method, path):
    err(getattr(anon, method)(CTL + path, {}, format="json"), 401, 16)


def test_controller_config_and_metadata(api, read_token):
    cfg = ok(api.get(f"{CTL}/config"))
    keys = ("electMasterMaxRetryCount", "enableElectUncleanMaster", "scanInactiveMasterInterval", "notifyBrokerRoleChanged")
    assert [cfg[k] for k in keys] == [3, False, 5000, True]
    assert ok(api.patch(f"{CTL}/config", {"enableElectUncleanMaster": True}, format="json"))["enableElectUncleanMaster"]
    err(api.patch(f"{CTL}/config", {"configStorePath": "/tmp/x"}, format="json"), 403, 16)
    err(api.patch(f"{CTL}/config", {"electMasterMaxRetryCount": 0}, format="json"), 400, 29)
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    err(reader.patch(f"{CTL}/config", {"enableElectUncleanMaster": False}, format="json"), 403, 16)
    meta = ok(reader.get(f"{CTL}/metadata"))
    assert meta["isLeader"] is True and meta["controllerLeaderId"]


def test_unclean_election_when_enabled(broker, api):
    join(broker, 1)
    join(broker, 2, epoch=1, max_offset=500)
    ok(elect(broker, 1))  # set = {1}
    from controlplane.controller import liveness

    liveness.forget([liveness.member("c1", "g1", 1)])  # the master is gone
    err(elect(api), 409, 2004)  # clean only: nobody in the set is alive; the epoch still moved
    assert ReplicaGroup.objects.get().master_epoch == 2 and ReplicaGroup.objects.get().master_broker_id is None
    ok(api.patch(f"{CTL}/config", {"enableElectUncleanMaster": True}, format="json"))
    body = ok(elect(api))
    assert (body["masterBrokerId"], body["masterEpoch"]) == (2, 3)
    assert check_history() == []
