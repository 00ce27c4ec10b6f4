"""The nameserver REST API against real Postgres and Redis: every endpoint, bad input, missing token."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from nameserver import liveness
from nameserver.models import BrokerGroup, BrokerMember, TopicQueue

from .helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

M, S1, S2 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"


def ok(response, status=200):
    assert response.status_code == status, response.content
    return response.json()


def err(response, status, code, name=None):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and isinstance(body["detail"], str)
    if name:
        assert body["name"] == name
    return body


def register(api, *args, **kw):
    return api.post(f"{NS}/brokers/register", register_body(*args, **kw), format="json")


# --- authentication ------------------------------------------------------------------------------

BROKER_CALLS = [
    ("post", "/brokers/register", register_body(0, M)),
    ("post", "/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}),
    ("post", "/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": M}),
]
READ_CALLS = [
    ("get", "/brokers/member-group?brokerName=b1", None),
    ("get", "/cluster-info", None),
    ("get", "/routes/TopicA", None),
    ("get", "/topics", None),
    ("get", "/config", None),
]
ADMIN_CALLS = [
    ("post", "/topics", {"topicName": "T", "clusterName": "c1"}),
    ("delete", "/topics/T", None),
    ("post", "/brokers/b1/wipe-write-perm", None),
    ("post", "/brokers/b1/add-write-perm", None),
    ("patch", "/config", {"supportActingMaster": True}),
]


@pytest.mark.parametrize("method, path, body", BROKER_CALLS + READ_CALLS + ADMIN_CALLS)
def test_every_call_without_a_token_is_401(anon, method, path, body):
    r = getattr(anon, method)(NS + path, body, format="json")
    err(r, 401, 16, "NO_PERMISSION")
    assert r["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("method, path, body", BROKER_CALLS[:1] + READ_CALLS[:1])
def test_an_unknown_token_is_401(method, path, body):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer rmq_not-a-real-token")
    err(getattr(client, method)(NS + path, body, format="json"), 401, 16)


@pytest.mark.parametrize("method, path, body", BROKER_CALLS + ADMIN_CALLS)
def test_a_read_token_cannot_write(read_token, method, path, body):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    err(getattr(client, method)(NS + path, body, format="json"), 403, 16)


@pytest.mark.parametrize("method, path, body", ADMIN_CALLS)
def test_a_broker_token_cannot_administer(broker_token, method, path, body):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {broker_token}")
    err(getattr(client, method)(NS + path, body, format="json"), 403, 16)


def test_a_broker_token_registers_and_heartbeats(broker_token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {broker_token}")
    ok(register(client, 0, M))
    assert ok(client.post(f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": M}, format="json"))["registered"]


def test_a_cluster_bound_token_cannot_act_on_another_cluster():
    from controlplane.models import ApiToken

    _, raw = ApiToken.issue("bound", "broker", "c1")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    ok(register(client, 0, M, cluster="c1"))
    err(register(client, 0, S1, cluster="c2", name="b2"), 403, 16)


# --- register / unregister / heartbeat -----------------------------------------------------------


def test_register_stores_the_set_and_starts_liveness(api):
    body = ok(register(api, 0, M))
    assert body == {"code": 0, "name": "SUCCESS", "masterAddr": None, "haServerAddr": None, "isolated": False}
    member = BrokerMember.objects.get(broker_addr=M)
    assert (member.broker_id, member.heartbeat_timeout_millis, member.ha_server_addr) == (0, 10_000, "127.0.0.1:10912")
    assert (member.group.cluster_name, member.group.broker_name, member.group.enable_acting_master) == ("c1", "b1", True)
    assert set(TopicQueue.objects.values_list("topic", "perm")) == {("TopicA", 6), ("TopicB", 6)}
    assert liveness.last_heartbeats([liveness.member("c1", M)])[liveness.member("c1", M)] is not None


def test_a_slave_is_told_its_master(api):
    ok(register(api, 0, M))
    assert ok(register(api, 1, S1)) == {
        "code": 0,
        "name": "SUCCESS",
        "masterAddr": M,
        "haServerAddr": "127.0.0.1:10912",
        "isolated": False,
    }


def test_a_stale_master_is_refused_with_2000_and_loses_its_entry(api):
    ok(register(api, 0, M, state=5))
    ok(register(api, 1, S1, state=5))
    body = err(register(api, 0, S1, state=4), 409, 2000, "CONTROLLER_FENCED_MASTER_EPOCH")
    assert body["conflictingStateVersion"] == 5
    assert dict(BrokerMember.objects.values_list("broker_id", "broker_addr")) == {0: M}
    assert liveness.last_heartbeats([liveness.member("c1", S1)])[liveness.member("c1", S1)] is None


def test_a_newer_master_takes_id_0_and_the_old_address_leaves(api):
    ok(register(api, 0, M, state=5))
    ok(register(api, 0, S1, state=6))
    assert dict(BrokerMember.objects.values_list("broker_id", "broker_addr")) == {0: S1}
    assert liveness.last_heartbeats([liveness.member("c1", M)])[liveness.member("c1", M)] is None


def test_promotion_at_the_same_address_keeps_it_live(api):
    ok(register(api, 1, S1))
    ok(register(api, 0, S1, state=1))
    assert dict(BrokerMember.objects.values_list("broker_id", "broker_addr")) == {0: S1}
    assert ok(api.post(f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": S1}, format="json"))["registered"]


def test_single_topic_registration_before_a_full_one_is_refused(api):
    ok(register(api, 0, M))
    err(register(api, 1, S1, topics={"OnlyOne": {}}), 409, 1, "SYSTEM_ERROR")
    assert not BrokerMember.objects.filter(broker_addr=S1).exists()


@pytest.mark.parametrize(
    "patch, fields",
    [
        ({"brokerId": -1}, {"brokerId"}),
        ({"brokerAddr": "no-port"}, {"brokerAddr"}),
        ({"clusterName": "bad/name"}, {"clusterName"}),
        ({"clusterName": None, "brokerName": ""}, {"clusterName", "brokerName"}),
        ({"heartbeatTimeoutMillis": 0}, {"heartbeatTimeoutMillis"}),
        ({"haServerAddr": "x"}, {"haServerAddr"}),
        ({"enableActingMaster": "maybe"}, {"enableActingMaster"}),
        ({"topicConfigWrapper": {"topicConfigTable": {"bad topic": {}}}}, {"topicConfigWrapper"}),
        ({"topicConfigWrapper": {"topicConfigTable": {"T": {"perm": 9}}}}, {"topicConfigWrapper"}),
        ({"topicConfigWrapper": {"dataVersion": {"stateVersion": "x"}}}, {"topicConfigWrapper"}),
    ],
)
def test_register_bad_input_is_400_with_field_errors(api, patch, fields):
    body = register_body(0, M)
    body.update(patch)
    r = api.post(f"{NS}/brokers/register", body, format="json")
    b = err(r, 400, 29, "INVALID_PARAMETER")
    assert fields <= set(b["fields"])
    assert not BrokerMember.objects.exists()


@pytest.mark.parametrize(
    "raw, content_type", [("{not json", "application/json"), ("[]", "application/json"), ("a=b", "text/plain")]
)
def test_malformed_bodies_are_400_not_500(api, raw, content_type):
    r = api.generic("POST", f"{NS}/brokers/register", raw, content_type=content_type)
    assert r.status_code in (400, 415), r.content
    assert r.json()["code"] == 29


def test_heartbeat_of_an_unknown_broker_says_register_again(api):
    body = ok(api.post(f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": M}, format="json"))
    assert body["registered"] is False


def test_heartbeat_bad_input(api):
    b = err(api.post(f"{NS}/brokers/heartbeat", {"brokerAddr": "x"}, format="json"), 400, 29)
    assert {"clusterName", "brokerAddr"} <= set(b["fields"])


def test_heartbeat_refreshes_liveness_without_writing_postgres(api, django_assert_num_queries):
    ok(register(api, 0, M))
    key = liveness.member("c1", M)
    before = liveness.last_heartbeats([key])[key]
    import time

    time.sleep(0.01)
    with django_assert_num_queries(0):
        assert ok(api.post(f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": M}, format="json"))["registered"]
    assert liveness.last_heartbeats([key])[key][0] > before[0]


def test_unregister_of_the_master_strips_write_and_shows_an_acting_master(api):
    ok(register(api, 0, M))
    ok(register(api, 1, S1))
    ok(register(api, 2, S2))
    ok(api.patch(f"{NS}/config", {"supportActingMaster": True}, format="json"))
    assert ok(api.post(f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}, format="json"))["unregistered"]
    route = ok(api.get(f"{NS}/routes/TopicA"))
    assert route["queueDatas"] == [
        {"brokerName": "b1", "readQueueNums": 4, "writeQueueNums": 4, "perm": 4, "topicSysFlag": 0, "attributes": {}}
    ]
    (bd,) = route["brokerDatas"]
    assert bd["brokerAddrs"] == {"0": S1, "2": S2} and bd["actingMaster"] is True
    again = api.post(f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}, format="json")
    assert ok(again)["unregistered"] is False


def test_the_master_returning_restores_write(api):
    ok(register(api, 0, M))
    ok(register(api, 1, S1))
    api.post(f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}, format="json")
    assert set(TopicQueue.objects.values_list("perm", flat=True)) == {4}
    ok(register(api, 0, M, counter=1))
    assert set(TopicQueue.objects.values_list("perm", flat=True)) == {6}


def test_last_member_leaving_removes_the_set_and_its_routes(api):
    ok(register(api, 0, M))
    api.post(f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}, format="json")
    assert not BrokerGroup.objects.exists() and not TopicQueue.objects.exists()
    err(api.get(f"{NS}/routes/TopicA"), 404, 17, "TOPIC_NOT_EXIST")


def test_unregister_bad_input(api):
    err(api.post(f"{NS}/brokers/unregister", {"clusterName": "c1"}, format="json"), 400, 29)


# --- reads ---------------------------------------------------------------------------------------


def test_member_group_is_looked_up_by_broker_name(api):
    ok(register(api, 0, M))
    ok(register(api, 1, S1))
    assert ok(api.get(f"{NS}/brokers/member-group", {"clusterName": "other", "brokerName": "b1"})) == {
        "cluster": "c1",
        "brokerName": "b1",
        "brokerAddrs": {"0": M, "1": S1},
    }
    assert ok(api.get(f"{NS}/brokers/member-group", {"brokerName": "nobody"}))["brokerAddrs"] == {}
    err(api.get(f"{NS}/brokers/member-group"), 400, 29)


def test_cluster_info_lists_sets_members_and_liveness(api):
    ok(register(api, 0, M))
    ok(register(api, 0, S1, cluster="c2", name="b2"))
    info = ok(api.get(f"{NS}/cluster-info"))
    assert info["clusterAddrTable"] == {"c1": ["b1"], "c2": ["b2"]}
    (m,) = info["brokerAddrTable"]["b1"]["members"]
    assert m["brokerAddr"] == M and m["expiresAt"] - m["lastUpdateTimestamp"] == 10_000


def test_route_of_an_unknown_topic_is_404_topic_not_exist(api):
    err(api.get(f"{NS}/routes/Nope"), 404, 17, "TOPIC_NOT_EXIST")


# --- topic administration ------------------------------------------------------------------------


def test_create_a_topic_on_a_cluster_and_on_chosen_brokers(api):
    ok(register(api, 0, M))
    ok(register(api, 0, S1, name="b2"))
    body = ok(
        api.post(
            f"{NS}/topics",
            {"topicName": "Orders", "clusterName": "c1", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6},
            format="json",
        )
    )
    assert body["brokerNames"] == ["b1", "b2"]
    route = ok(api.get(f"{NS}/routes/Orders"))
    assert [(q["brokerName"], q["writeQueueNums"]) for q in route["queueDatas"]] == [("b1", 8), ("b2", 8)]
    ok(
        api.post(
            f"{NS}/topics",
            {"topicName": "Orders", "brokerNames": ["b2"], "writeQueueNums": 2, "readQueueNums": 2, "perm": 4},
            format="json",
        )
    )
    route = ok(api.get(f"{NS}/routes/Orders"))
    assert [(q["brokerName"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] == [("b1", 8, 6), ("b2", 2, 4)]
    assert set(ok(api.get(f"{NS}/topics", {"clusterName": "c1"}))["topicList"]) == {"TopicA", "TopicB", "Orders"}


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"topicName": "T", "brokerNames": ["ghost"]}, 404, 211),
        ({"topicName": "T", "clusterName": "ghost"}, 404, 211),
        ({"topicName": "T"}, 400, 29),
        ({"topicName": "T", "clusterName": "c1", "brokerNames": ["b1"]}, 400, 29),
        ({"topicName": "bad topic", "clusterName": "c1"}, 400, 29),
        ({"topicName": "T", "clusterName": "c1", "perm": 8}, 400, 29),
        ({"topicName": "T", "clusterName": "c1", "writeQueueNums": 0}, 400, 29),
    ],
)
def test_create_topic_errors(api, body, status, code):
    ok(register(api, 0, M))
    err(api.post(f"{NS}/topics", body, format="json"), status, code)


def test_delete_a_topic_everywhere_or_on_one_broker(api):
    ok(register(api, 0, M))
    ok(register(api, 0, S1, name="b2"))
    assert ok(api.delete(f"{NS}/topics/TopicA?brokerName=b2"))["deletedQueueDatas"] == 1
    assert [q["brokerName"] for q in ok(api.get(f"{NS}/routes/TopicA"))["queueDatas"]] == ["b1"]
    assert ok(api.delete(f"{NS}/topics/TopicA"))["deletedQueueDatas"] == 1
    err(api.get(f"{NS}/routes/TopicA"), 404, 17)
    err(api.delete(f"{NS}/topics/TopicA"), 404, 17)


def test_wipe_and_add_write_perm(api):
    ok(register(api, 0, M))
    assert ok(api.post(f"{NS}/brokers/b1/wipe-write-perm"))["changedTopics"] == 2
    assert {q["perm"] for q in ok(api.get(f"{NS}/routes/TopicA"))["queueDatas"]} == {4}
    assert ok(api.post(f"{NS}/brokers/b1/add-write-perm"))["changedTopics"] == 2
    assert {q["perm"] for q in ok(api.get(f"{NS}/routes/TopicA"))["queueDatas"]} == {6}
    err(api.post(f"{NS}/brokers/ghost/wipe-write-perm"), 404, 211, "BROKER_NOT_EXIST")


# --- config --------------------------------------------------------------------------------------


def test_config_read_and_update(api):
    cfg = ok(api.get(f"{NS}/config"))
    assert cfg["scanNotActiveBrokerInterval"] == 5000 and cfg["supportActingMaster"] is False
    cfg = ok(api.patch(f"{NS}/config", {"supportActingMaster": True, "scanNotActiveBrokerInterval": 2000}, format="json"))
    assert cfg["supportActingMaster"] is True and cfg["scanNotActiveBrokerInterval"] == 2000
    assert ok(api.get(f"{NS}/config"))["scanNotActiveBrokerInterval"] == 2000


def test_config_black_listed_keys_are_403_no_permission_and_nothing_changes(api):
    err(api.patch(f"{NS}/config", {"kvConfigPath": "/tmp/x", "supportActingMaster": True}, format="json"), 403, 16)
    assert ok(api.get(f"{NS}/config"))["supportActingMaster"] is False


@pytest.mark.parametrize("body", [{"supportActingMaster": "perhaps"}, {"unknownKey": 1}, {}, []])
def test_config_bad_input_is_400(api, body):
    err(api.patch(f"{NS}/config", body, format="json"), 400, 29)


# --- schema --------------------------------------------------------------------------------------


def test_openapi_schema_and_docs_are_served(anon):
    schema = anon.get("/api/schema/")
    assert schema.status_code == 200 and b"registerBroker" in schema.content and b"bearer" in schema.content
    assert anon.get("/api/docs/").status_code == 200


def test_unknown_paths_answer_json_404(anon):
    r = anon.get("/api/v1/nameserver/nope")
    assert r.status_code == 404 and r.json()["code"] == 29


def test_routes_follow_every_registry_change_despite_the_route_cache(api):
    ok(register(api, 0, M))
    ok(register(api, 1, S1))
    assert ok(api.get(f"{NS}/routes/TopicA"))["brokerDatas"][0]["brokerAddrs"] == {"0": M, "1": S1}
    ok(api.post(f"{NS}/brokers/b1/wipe-write-perm"))
    assert ok(api.get(f"{NS}/routes/TopicA"))["queueDatas"][0]["perm"] == 4
    ok(api.post(f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}, format="json"))
    assert ok(api.get(f"{NS}/routes/TopicA"))["brokerDatas"][0]["brokerAddrs"] == {"1": S1}
    ok(api.patch(f"{NS}/config", {"supportActingMaster": True}, format="json"))
    assert ok(api.get(f"{NS}/routes/TopicA"))["brokerDatas"][0]["brokerAddrs"] == {"0": S1}
    ok(
        api.post(
            f"{NS}/topics", {"topicName": "TopicA", "clusterName": "c1", "writeQueueNums": 1, "readQueueNums": 1}, format="json"
        )
    )
    assert ok(api.get(f"{NS}/routes/TopicA"))["queueDatas"][0]["writeQueueNums"] == 1


def test_a_re_registration_that_changes_nothing_keeps_the_route_cache(api):
    from nameserver import route_cache

    ok(register(api, 0, M))
    ok(api.get(f"{NS}/routes/TopicA"))
    version = route_cache.current_version()
    ok(register(api, 0, M))  # the periodic 30 s re-registration: same data version
    assert route_cache.current_version() == version
    ok(register(api, 0, M, counter=2))
    assert route_cache.current_version() > version


def test_routes_carry_each_brokers_grpc_endpoint(api):
    ok(api.post(f"{NS}/brokers/register", {**register_body(0, M), "grpcAddr": "127.0.0.1:18081"}, format="json"))
    ok(register(api, 1, S1))
    bd = ok(api.get(f"{NS}/routes/TopicA"))["brokerDatas"][0]
    assert bd["brokerGrpcAddrs"] == {"0": "127.0.0.1:18081"}
    err(api.post(f"{NS}/brokers/register", {**register_body(0, M), "grpcAddr": "nope"}, format="json"), 400, 29)
