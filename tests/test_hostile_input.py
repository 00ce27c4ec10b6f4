"""Hostile input (issue 14): every class a fuzzing run found gets a clean refusal, never a 500, and
changes nothing. The classes, over REST and, where the same input can arrive there, the broker
websocket:

* parsers that crash: JSON nested 50,000 deep, NUL in path and query parameters, form bodies of more
  than 1,000 fields, a 5,000-digit id list;
* values that should be refused: config integers beyond Java's int/long, text Postgres cannot store
  (NUL, lone surrogates) anywhere in a body, non-ASCII digits as a port, ids beyond a long, NaN;
* errors in the wrong shape: a 3 MB body, numbers where strings belong, a schema that does not say
  what the server takes.

Each refusal is checked for its status, its code and its JSON shape ``{code, name, detail}`` (with
``fields`` for 400s), and for nothing having changed: the nameserver's registry and routes, the
controller's state and history, both configs, isolations, the liveness keys in Redis, and the
operator audit log (a refused admin call may be recorded as refused, never as done).
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import redis
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test import Client
from rest_framework.test import APIClient

from controlplane import auth
from controlplane.controller.models import ControllerConfigEntry, Replica, ReplicaGroup, Transition
from controlplane.models import ApiToken, Isolation, OperatorAction
from mqrules.codes import ResponseCode
from mqrules.validation import INT_MAX, LONG_MAX
from nameserver.models import BrokerGroup, BrokerMember, NamesrvConfigEntry, TopicQueue
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body
from tests.nameserver.helpers import NS, register_body
from tests.nameserver.test_websocket import call, connected

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OPS = "/api/v1/operations"
AUD = "/api/v1/audits"
CLUSTERS = "/api/v1/clusters"
M, S1 = "127.0.0.1:10911", "127.0.0.1:10921"
DEEP = "[" * 50_000 + "]" * 50_000

# Every endpoint that reads a JSON body, with a body it would take.
BODY_ENDPOINTS = {
    "ns register": ("post", f"{NS}/brokers/register", register_body(0, "127.0.0.1:10931", name="b9")),
    "ns unregister": ("post", f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}),
    "ns heartbeat": ("post", f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": M}),
    "ns topics": ("post", f"{NS}/topics", {"topicName": "Orders", "clusterName": "c1"}),
    "ns config": ("patch", f"{NS}/config", {"supportActingMaster": True}),
    "ctl apply-broker-id": ("post", f"{CTL}/brokers/apply-broker-id", apply_body(3)),
    "ctl register": (
        "post",
        f"{CTL}/brokers/register",
        {"clusterName": "c1", "brokerName": "g1", "brokerId": 2, "brokerAddress": addr(2)},
    ),
    "ctl heartbeat": ("post", f"{CTL}/brokers/heartbeat", heartbeat_body(2)),
    "ctl elect-master": ("post", f"{CTL}/elect-master", {"brokerName": "g1", "brokerId": 2, "designateElect": True}),
    "ctl alter-sync-state-set": (
        "post",
        f"{CTL}/alter-sync-state-set",
        {"brokerName": "g1", "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1], "syncStateSetEpoch": 1},
    ),
    "ctl clean-broker-data": ("post", f"{CTL}/clean-broker-data", {"brokerName": "g1", "brokerControllerIdsToClean": "2"}),
    "ctl config": ("patch", f"{CTL}/config", {"enableElectUncleanMaster": True}),
    "ops isolate": ("post", f"{OPS}/brokers/isolate", {"brokerName": "b1", "brokerId": 0}),
    "ops unisolate": ("post", f"{OPS}/brokers/unisolate", {"brokerName": "b1", "brokerId": 0}),
    "dlq resend": ("post", f"{CLUSTERS}/c1/dlq/g1/resend", {"msgIds": ["7F00000100002A9F0000000000000000"], "dryRun": True}),
    "audits offset-events": (
        "post",
        f"{AUD}/offset-events",
        {
            "clusterName": "c1",
            "brokerName": "b1",
            "brokerId": 0,
            "role": "SYNC_MASTER",
            "masterEpoch": 1,
            "events": [
                {"consumerGroup": "g", "topic": "TopicA", "queueId": 0, "offset": 1, "source": "COMMIT", "timestampMs": 1}
            ],
        },
    ),
}


# --- the cluster every test starts from, and what "nothing changed" means -------------------------


def ok(response, status=200) -> dict:
    assert response.status_code == status, response.content[:500]
    return response.json()


def refused(response, status: int = 400, code: ResponseCode = ResponseCode.INVALID_PARAMETER) -> dict:
    """The error format: JSON ``{code, name, detail}``, with ``fields`` for a 400."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert (body["code"], body["name"]) == (int(code), code.name), body
    assert isinstance(body["detail"], str) and body["detail"], body
    if status == 400:
        assert isinstance(body["fields"], dict) and body["fields"], body
    return body


def _client(scope: str, name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(name, scope)[1]}")
    return client


@pytest.fixture
def broker(db) -> APIClient:
    return _client("broker", "hostile-broker")


@pytest.fixture
def cluster(api, broker):
    """A nameserver broker set b1 (master and slave, two topics) and a controller group g1 (brokers 1
    and 2, 1 the master), made through the API."""
    ok(broker.post(f"{NS}/brokers/register", register_body(0, M), format="json"))
    ok(broker.post(f"{NS}/brokers/register", register_body(1, S1), format="json"))
    for broker_id in (1, 2):
        ok(broker.get(f"{CTL}/groups/g1/next-broker-id"))
        ok(broker.post(f"{CTL}/brokers/apply-broker-id", apply_body(broker_id), format="json"))
        ok(
            broker.post(
                f"{CTL}/brokers/register",
                {"clusterName": "c1", "brokerName": "g1", "brokerId": broker_id, "brokerAddress": addr(broker_id)},
                format="json",
            )
        )
        ok(broker.post(f"{CTL}/brokers/heartbeat", heartbeat_body(broker_id), format="json"))
    ok(broker.post(f"{CTL}/elect-master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1}, format="json"))
    assert Transition.objects.exists() and TopicQueue.objects.exists()


def _rows(model) -> list[dict]:
    return list(model.objects.order_by("pk").values())


def _redis_keys() -> list[str]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = (k.decode() for k in client.scan_iter(settings.REDIS_KEY_PREFIX + "*", count=1000))
    # not the channel layer's, the dashboard's change notes (handed over by a thread, in its own time), nor
    # the REST throttles' counts (every call counts, a refused one too; a new minute starts a new key)
    aside = tuple(settings.REDIS_KEY_PREFIX + part for part in ("asgi", "dash", "throttle"))
    return sorted(k for k in keys if not k.startswith(aside))


def snapshot(client: APIClient) -> dict:
    return {
        "registry": [_rows(m) for m in (BrokerGroup, BrokerMember, TopicQueue)],
        "route": client.get(f"{NS}/routes/TopicA").content,
        "controller": [_rows(m) for m in (ReplicaGroup, Replica)],
        "history": _rows(Transition),
        "configs": [_rows(NamesrvConfigEntry), _rows(ControllerConfigEntry)],
        "isolations": _rows(Isolation),
        "liveness": _redis_keys(),
        "audit log, done": list(OperatorAction.objects.filter(result="ok").order_by("pk").values()),
    }


@contextmanager
def nothing_changes(client: APIClient):
    before = snapshot(client)
    last_action = OperatorAction.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    yield
    after = snapshot(client)
    for part in before:
        assert after[part] == before[part], part
    recorded = OperatorAction.objects.filter(pk__gt=last_action).values_list("result", flat=True)
    assert all(result.startswith("http 4") for result in recorded), list(recorded)


def send(client, method: str, path: str, body, **extra):
    """A JSON body as raw text (so that it can be anything, not only what json.dumps writes)."""
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return getattr(client, method)(path, raw, content_type="application/json", **extra)


def ws_scenario(token: str, frames: list[str]) -> list[dict]:
    """Raw frames over one broker socket: the reply to each, then a ping proves the socket is open."""

    async def scenario():
        sock = await connected(token)
        replies = []
        for raw in frames:
            await sock.send_to(text_data=raw)
            replies.append(await sock.receive_json_from(timeout=10))
        assert (await call(sock, "ping", seq=999))["type"] == "ping_result"
        await sock.disconnect()
        return replies

    return async_to_sync(scenario)()


def ws_refused(reply: dict, seq) -> dict:
    assert reply["type"] == "error" and reply["seq"] == seq, reply
    body = reply["payload"]
    assert (body["code"], body["name"]) == (29, "INVALID_PARAMETER"), body
    assert isinstance(body["detail"], str) and isinstance(body["fields"], dict) and body["fields"], body
    return body


def frame(kind: str, payload, seq: int = 7) -> str:
    return json.dumps({"type": kind, "seq": seq, "payload": payload})


# --- 3. parsers that crash --------------------------------------------------------------------------


@pytest.mark.parametrize("method, path, body", BODY_ENDPOINTS.values(), ids=BODY_ENDPOINTS.keys())
def test_json_nested_50000_deep_is_400_on_every_endpoint(cluster, api, method, path, body):
    with nothing_changes(api):
        fields = refused(send(api, method, path, DEEP))["fields"]
        assert fields == {"non_field_errors": ["JSON nested too deeply"]}
        inside = json.dumps(body)[:-1] + ', "extra": ' + DEEP + "}"
        refused(send(api, method, path, inside))


def test_json_nested_50000_deep_over_the_websocket_is_an_error_frame_29(cluster, broker_token):
    raw = '{"type": "register", "seq": 3, "payload": ' + DEEP + "}"
    with nothing_changes(APIClient()):
        (reply,) = ws_scenario(broker_token, [raw])
    assert ws_refused(reply, None)["fields"] == {"non_field_errors": ["JSON nested too deeply"]}


BAD_PARAMETERS = {
    "history ?brokerName": ("get", f"{CTL}/history?brokerName=g%001"),
    "history ?limit as a decimal": ("get", f"{CTL}/history?limit=1.0"),
    "history ?limit in Arabic digits": ("get", f"{CTL}/history?limit=%D9%A1%D9%A2"),
    "history ?limit too large": ("get", f"{CTL}/history?limit=1001"),
    "history ?brokerName empty": ("get", f"{CTL}/history?brokerName="),
    "route of a topic": ("get", f"{NS}/routes/Topic%00A"),
    "route of a non-ASCII topic": ("get", f"{NS}/routes/T%C3%B6pic"),
    "topics ?clusterName": ("get", f"{NS}/topics?clusterName=c%001"),
    "delete a topic": ("delete", f"{NS}/topics/Topic%00A"),
    "delete a topic ?clusterName": ("delete", f"{NS}/topics/TopicA?clusterName=c%001"),
    "delete a topic ?brokerName": ("delete", f"{NS}/topics/TopicA?brokerName=b%001"),
    "wipe write perm": ("post", f"{NS}/brokers/b%001/wipe-write-perm"),
    "add write perm": ("post", f"{NS}/brokers/b%001/add-write-perm"),
    "water levels ?clusterName": ("get", f"{NS}/water-levels?clusterName=c%001"),
    "member group ?brokerName": ("get", f"{NS}/brokers/member-group?brokerName=b%001"),
    "next broker id": ("get", f"{CTL}/groups/g%001/next-broker-id"),
    "next broker id ?clusterName": ("get", f"{CTL}/groups/g1/next-broker-id?clusterName=c%001"),
    "replica info": ("get", f"{CTL}/groups/g%001/replica-info"),
    "sync state data ?brokerName": ("get", f"{CTL}/sync-state-data?brokerName=g%001"),
    "audit findings ?run with a newline": ("get", f"{AUD}/findings?run=latest%0A"),
    "audit findings ?run in Arabic digits": ("get", f"{AUD}/findings?run=%D9%A1"),
    "audit runs ?limit": ("get", f"{AUD}/runs?limit=%00"),
    "messages ?topic": ("get", f"{CLUSTERS}/c1/messages?topic=T%00"),
    "messages ?key": ("get", f"{CLUSTERS}/c1/messages?topic=TopicA&key=k%00"),
    "messages ?max in Arabic digits": ("get", f"{CLUSTERS}/c1/messages?topic=TopicA&max=%D9%A1"),
    "message id": ("get", f"{CLUSTERS}/c1/messages/%00"),
    "message id of 5000 digits": ("get", f"{CLUSTERS}/c1/messages/{'7' * 5000}/trace"),
    "by offset ?commitLogOffset beyond a long": (
        "get",
        f"{CLUSTERS}/c1/messages/by-offset?brokerName=b1&commitLogOffset=9223372036854775808",
    ),
    "dead letters of a group": ("get", f"{CLUSTERS}/c1/dlq/g%001"),
    "clients ?group": ("get", f"{CLUSTERS}/c1/clients?group=g%001"),
}


@pytest.mark.parametrize("method, path", BAD_PARAMETERS.values(), ids=BAD_PARAMETERS.keys())
def test_path_and_query_parameters_follow_the_body_rules(cluster, api, method, path):
    with nothing_changes(api):
        refused(getattr(api, method)(path))


@pytest.mark.parametrize(
    "method, path",
    [("get", f"{CTL}/sync-state-data"), ("delete", f"{NS}/topics/TopicA")],
    ids=["a read (the view parses the query)", "an admin's write (the audit log reads the query first)"],
)
def test_a_query_string_of_more_than_1000_fields_is_400(cluster, api, method, path):
    query = "&".join(["brokerName=b1"] * 1001)
    with nothing_changes(api):
        refused(getattr(api, method)(f"{path}?{query}"))


def test_a_run_id_beyond_a_long_is_400(api):
    refused(api.get(f"{AUD}/runs/{LONG_MAX + 1}"))
    refused(api.get(f"{AUD}/runs/{LONG_MAX}"), 404)


@pytest.mark.parametrize("path", [f"{CTL}/alter-sync-state-set", f"{NS}/topics"])
@pytest.mark.parametrize("encoding", ["multipart", "form"])
def test_a_form_body_of_more_than_1000_fields_is_415(cluster, api, path, encoding):
    fields = {f"f{i}": "x" for i in range(1001)}
    with nothing_changes(api):
        if encoding == "multipart":
            response = api.post(path, fields)  # APIClient's default: multipart/form-data
        else:
            response = api.post(
                path, "&".join(f"{k}={v}" for k, v in fields.items()), content_type="application/x-www-form-urlencoded"
            )
        refused(response, 415)


def test_a_form_body_of_more_than_1000_fields_from_an_operator_login_is_415_too(cluster, api):
    """A session's CSRF check reads the form (DRF's request.POST) before the view: through the same
    parser, so the same 415, not Django's TooManyFieldsSent."""
    user = User.objects.create_user("hostile-operator", password="x" * 12)
    user.groups.add(Group.objects.get_or_create(name=auth.OPERATORS_GROUP)[0])
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies[settings.CSRF_COOKIE_NAME] = "a" * 32  # a cookie but no token in a header: the form is read
    with nothing_changes(api):
        refused(client.post(f"{NS}/topics", {f"f{i}": "x" for i in range(1001)}), 415)


@pytest.mark.parametrize(
    "ids",
    ["9" * 5000, "99999999999999999999", str(LONG_MAX + 1), "1;" + "9" * 5000, "-1", "0", "١", "1;;2", "1,2"],
    ids=[
        "5,000 digits",
        "20 digits",
        "Long.MAX+1",
        "a second id of 5,000 digits",
        "negative",
        "zero",
        "Arabic digit",
        "empty id",
        "comma",
    ],
)
def test_broker_ids_to_clean_beyond_a_long_are_refused_before_anything_changes(cluster, api, ids):
    with nothing_changes(api):
        body = {"clusterName": "c1", "brokerName": "g1", "brokerControllerIdsToClean": ids}
        assert set(refused(send(api, "post", f"{CTL}/clean-broker-data", body))["fields"]) == {"brokerControllerIdsToClean"}


# --- 4. values that should be refused ---------------------------------------------------------------

CONFIG_VALUES = {
    # NamesrvConfig: scanNotActiveBrokerInterval is a long, waitSecondsForService an int
    "ns int key: 2^31": (NS, "waitSecondsForService", INT_MAX + 1),
    "ns int key: 10^40": (NS, "waitSecondsForService", 10**40),
    "ns long key: 2^63": (NS, "scanNotActiveBrokerInterval", LONG_MAX + 1),
    "ns long key: 10^40": (NS, "scanNotActiveBrokerInterval", 10**40),
    "ns long key as text: 2^63": (NS, "scanNotActiveBrokerInterval", str(LONG_MAX + 1)),
    "ns int key in Arabic digits": (NS, "waitSecondsForService", "١٢"),
    "ns int key as 1.0": (NS, "waitSecondsForService", 1.0),
    "ns int key as true": (NS, "waitSecondsForService", True),
    "ns bool key as ' true'": (NS, "supportActingMaster", " true"),
    # ControllerConfig: the two scan intervals are longs, electMasterMaxRetryCount an int
    "ctl int key: 2^31": (CTL, "electMasterMaxRetryCount", INT_MAX + 1),
    "ctl int key as text: 2^31": (CTL, "electMasterMaxRetryCount", str(INT_MAX + 1)),
    "ctl long key: 2^63": (CTL, "scanInactiveMasterInterval", LONG_MAX + 1),
    "ctl long key: 10^40": (CTL, "scanNotActiveBrokerInterval", 10**40),
    "ctl text key with NUL": (CTL, "controllerType", "DLedger\x00"),
    "ctl text key with a lone surrogate": (CTL, "controllerType", "DLedger\ud800"),
    "ctl text key too long": (CTL, "controllerType", "x" * 4097),
}


@pytest.mark.parametrize("base, key, value", CONFIG_VALUES.values(), ids=CONFIG_VALUES.keys())
def test_config_values_beyond_their_java_type_or_unstorable_are_refused(cluster, api, base, key, value):
    with nothing_changes(api):
        assert key in refused(send(api, "patch", f"{base}/config", {key: value}))["fields"]


@pytest.mark.parametrize(
    "base, key, value",
    [
        (NS, "waitSecondsForService", INT_MAX),
        (NS, "scanNotActiveBrokerInterval", LONG_MAX),
        (CTL, "electMasterMaxRetryCount", str(INT_MAX)),
        (CTL, "scanInactiveMasterInterval", str(LONG_MAX)),
        (CTL, "controllerType", "jRaft ✓"),
    ],
)
def test_config_values_at_their_java_bound_are_stored(api, base, key, value):
    stored = ok(send(api, "patch", f"{base}/config", {key: value}))[key]
    assert stored == (int(value) if isinstance(value, str) and value.isdigit() else value)


PORTS = {"Arabic digits": "10.1.2.3:١٢٣", "port 0": "10.1.2.3:0", "port 65536": "10.1.2.3:65536", "a trailing newline": f"{M}\n"}


@pytest.mark.parametrize("address", PORTS.values(), ids=PORTS.keys())
def test_addresses_with_a_port_outside_1_to_65535_in_ascii_are_refused(cluster, api, broker_token, address):
    ns = register_body(2, "127.0.0.1:10941")
    ns["brokerAddr"] = address
    ctl = {"clusterName": "c1", "brokerName": "g1", "brokerId": 2, "brokerAddress": address}
    apply = {**apply_body(3), "registerCheckCode": f"{address};1"}
    with nothing_changes(api):
        assert "brokerAddr" in refused(send(api, "post", f"{NS}/brokers/register", ns))["fields"]
        assert "brokerAddress" in refused(send(api, "post", f"{CTL}/brokers/register", ctl))["fields"]
        assert (
            "brokerAddr"
            in refused(send(api, "post", f"{CTL}/brokers/heartbeat", {**heartbeat_body(2), "brokerAddr": address}))["fields"]
        )
        assert "registerCheckCode" in refused(send(api, "post", f"{CTL}/brokers/apply-broker-id", apply))["fields"]
        replies = ws_scenario(
            broker_token,
            [
                frame("register", ns, 1),
                frame("heartbeat", {"clusterName": "c1", "brokerAddr": address}, 2),
                frame("register_broker_to_controller", ctl, 3),
                frame("apply_broker_id", apply, 4),
                frame("controller_heartbeat", {**heartbeat_body(2), "brokerAddr": address}, 5),
            ],
        )
    for seq, (reply, field) in enumerate(
        zip(replies, ["brokerAddr", "brokerAddr", "brokerAddress", "registerCheckCode", "brokerAddr"], strict=True), 1
    ):
        assert field in ws_refused(reply, seq)["fields"]


def test_a_port_from_1_to_65535_is_taken(api):
    body = register_body(0, "10.1.2.3:65535", name="b7", topics={})
    body["haServerAddr"], body["grpcAddr"] = "10.1.2.3:1", "[::1]:8081"
    ok(send(api, "post", f"{NS}/brokers/register", body))


WATER_LEVELS = {
    "brokerName": "b1",
    "brokerId": 0,
    "role": "SYNC_MASTER",
    "masterEpoch": 1,
    "maxOffset": 9,
    "confirmOffset": 9,
    "minOffset": 0,
}
SLAVE = {
    "brokerId": 1,
    "addr": S1,
    "ackOffset": 9,
    "lagBytes": 0,
    "lastCaughtUpMs": 1,
    "transferBytesPerS": 0,
    "inSyncStateSet": True,
}

# Text Postgres cannot store, in every kind of place a request carries text.
UNSTORABLE = {"NUL": "\x00", "lone surrogate": "\ud800"}
PLACES = {
    "zoneName": lambda bad: ("post", f"{NS}/brokers/register", {**register_body(2, "127.0.0.1:10941"), "zoneName": "z" + bad}),
    "a topic name as a topicConfigTable key": lambda bad: (
        "post",
        f"{NS}/brokers/register",
        register_body(2, "127.0.0.1:10941", topics={"T" + bad: {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}),
    ),
    "brokerName": lambda bad: ("post", f"{NS}/brokers/register", register_body(2, "127.0.0.1:10941", name="b" + bad)),
    "registerCheckCode": lambda bad: (
        "post",
        f"{CTL}/brokers/apply-broker-id",
        {**apply_body(3), "registerCheckCode": f"{addr(3)};1{bad}"},
    ),
    "topicName": lambda bad: ("post", f"{NS}/topics", {"topicName": "T" + bad, "clusterName": "c1"}),
    "a controller heartbeat's brokerName": lambda bad: (
        "post",
        f"{CTL}/brokers/heartbeat",
        {**heartbeat_body(2), "brokerName": bad},
    ),
    "a water level's slave address": lambda bad: (
        "post",
        f"{NS}/brokers/heartbeat",
        {
            "clusterName": "c1",
            "brokerAddr": M,
            "brokerName": "b1",
            "waterLevels": {**WATER_LEVELS, "slaves": [{**SLAVE, "addr": bad}]},
        },
    ),
    "a config key": lambda bad: ("patch", f"{NS}/config", {"supportActingMaster" + bad: True}),
    "an offset event's group": lambda bad: (
        "post",
        f"{AUD}/offset-events",
        {
            **BODY_ENDPOINTS["audits offset-events"][2],
            "events": [{**BODY_ENDPOINTS["audits offset-events"][2]["events"][0], "consumerGroup": bad}],
        },
    ),
}


@pytest.mark.parametrize("bad", UNSTORABLE.values(), ids=UNSTORABLE.keys())
@pytest.mark.parametrize("place", PLACES.values(), ids=PLACES.keys())
def test_text_postgres_cannot_store_is_refused_wherever_it_is(cluster, api, place, bad):
    method, path, body = place(bad)
    with nothing_changes(api):
        refused(send(api, method, path, body))


@pytest.mark.parametrize("bad", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_text_postgres_cannot_store_over_the_websocket_is_an_error_frame_with_its_seq(cluster, broker_token, bad):
    frames = [
        frame("register", {**register_body(2, "127.0.0.1:10941"), "zoneName": bad}, 1),
        frame("register", register_body(2, "127.0.0.1:10941", topics={"T" + bad: {"perm": 6}}), 2),
        frame("apply_broker_id", {**apply_body(3), "registerCheckCode": f"{addr(3)};1{bad}"}, 3),
        frame("unregister", {"clusterName": "c1", "brokerAddr": M, "brokerName": "b" + bad}, 4),
        frame("get_replica_info", {"brokerName": "g" + bad}, 5),
        frame("get_next_broker_id", {"brokerName": "g" + bad}, 6),
    ]
    with nothing_changes(APIClient()):
        replies = ws_scenario(broker_token, frames)
    message = "must not contain " + ("NUL characters" if bad == "\x00" else "unpaired UTF-16 surrogates")
    assert ws_refused(replies[0], 1)["fields"] == {"zoneName": [message]}
    (table,) = ws_refused(replies[1], 2)["fields"]["topicConfigWrapper"].values()  # keyed by the name (escaped)
    assert list(table.values()) == [["invalid topic name"]]
    assert message in ws_refused(replies[2], 3)["fields"]["registerCheckCode"]
    for seq, reply in enumerate(replies[3:], 4):
        assert message in ws_refused(reply, seq)["fields"]["brokerName"]


@pytest.mark.parametrize("bad", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_unknown_fields_are_dropped_whatever_they_hold(cluster, api, broker_token, bad):
    """The schema lets a body carry fields it does not name; nothing keeps them, so they may hold
    anything (the operator audit log keeps an escaped rendering of what was sent)."""
    assert ok(send(api, "post", f"{NS}/brokers/heartbeat", {"clusterName": "c1", "brokerAddr": M, "x" + bad: bad}))["registered"]
    (reply,) = ws_scenario(broker_token, [frame("heartbeat", {"clusterName": "c1", "brokerAddr": M, "note": [bad]}, 4)])
    assert reply == {"type": "heartbeat_result", "seq": 4, "payload": {"registered": True}}


NON_FINITE = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e400": "1e400"}


@pytest.mark.parametrize("number", NON_FINITE.values(), ids=NON_FINITE.keys())
def test_nan_and_infinity_are_refused_at_their_field(cluster, api, broker_token, number):
    body = json.dumps(BODY_ENDPOINTS["ctl alter-sync-state-set"][2]).replace('"masterEpoch": 1', f'"masterEpoch": {number}')
    with nothing_changes(api):
        assert refused(send(api, "post", f"{CTL}/alter-sync-state-set", body))["fields"] == {
            "masterEpoch": ["must be a finite number (NaN and Infinity are not JSON)"]
        }
        (reply,) = ws_scenario(broker_token, ['{"type": "alter_sync_state_set", "seq": 5, "payload": ' + body + "}"])
    assert ws_refused(reply, 5)["fields"] == {"masterEpoch": ["must be a finite number (NaN and Infinity are not JSON)"]}


# --- 5. errors in the wrong shape -------------------------------------------------------------------


def test_a_3_mb_body_is_413_in_the_json_error_format(cluster, api, broker):
    big = json.dumps({"clusterName": "c1", "brokerAddr": M, "padding": "x" * 3_000_000})
    with nothing_changes(api):
        # a broker's call: the body parser's limit
        refused(send(broker, "post", f"{NS}/brokers/heartbeat", big), 413)
        # an admin's call: the audit log reads the body first (Django's limit, then handler400)
        refused(send(api, "post", f"{NS}/topics", big), 413)
        refused(send(api, "patch", f"{CTL}/config", big), 413)


def test_an_unsupported_media_type_is_415_in_the_json_error_format(cluster, api):
    with nothing_changes(api):
        refused(api.post(f"{NS}/topics", "topicName=Orders&clusterName=c1", content_type="text/plain"), 415)


WRONG_TYPES = {
    "a number as a name": ("post", f"{NS}/topics", {"topicName": 0, "clusterName": "c1"}, "topicName"),
    "a list as a name": (
        "post",
        f"{CTL}/brokers/register",
        {**BODY_ENDPOINTS["ctl register"][2], "brokerName": ["g1"]},
        "brokerName",
    ),
    "a name with a space": ("post", f"{NS}/topics", {"topicName": " Orders", "clusterName": "c1"}, "topicName"),
    "a name with a trailing newline": ("post", f"{NS}/topics", {"topicName": "Orders\n", "clusterName": "c1"}, "topicName"),
    "an id as text": ("post", f"{CTL}/brokers/register", {**BODY_ENDPOINTS["ctl register"][2], "brokerId": "2"}, "brokerId"),
    "an id as 2.0": ("post", f"{CTL}/brokers/register", {**BODY_ENDPOINTS["ctl register"][2], "brokerId": 2.0}, "brokerId"),
    "an id as true": ("post", f"{OPS}/brokers/isolate", {"brokerName": "b1", "brokerId": True}, "brokerId"),
    "a flag as text": (
        "post",
        f"{CTL}/elect-master",
        {"brokerName": "g1", "brokerId": 2, "designateElect": "true"},
        "designateElect",
    ),
    "a flag as 1": ("post", f"{CTL}/clean-broker-data", {"brokerName": "g1", "isCleanLivingBroker": 1}, "isCleanLivingBroker"),
    "a zone as a number": ("post", f"{NS}/brokers/register", {**register_body(2, "127.0.0.1:10941"), "zoneName": 5}, "zoneName"),
    "queue numbers as text": (
        "post",
        f"{NS}/topics",
        {"topicName": "Orders", "clusterName": "c1", "readQueueNums": "8"},
        "readQueueNums",
    ),
}


@pytest.mark.parametrize("method, path, body, field", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_values_of_the_wrong_json_type_are_refused_not_converted(cluster, api, method, path, body, field):
    with nothing_changes(api):
        assert field in refused(send(api, method, path, body))["fields"]


def test_values_of_the_wrong_json_type_over_the_websocket_are_refused(cluster, broker_token):
    with nothing_changes(APIClient()):
        replies = ws_scenario(
            broker_token,
            [
                frame("register", {**register_body(2, "127.0.0.1:10941"), "brokerName": 0}, 1),
                frame("register_broker_to_controller", {**BODY_ENDPOINTS["ctl register"][2], "brokerId": "2"}, 2),
                frame("unregister", {"clusterName": "c1", "brokerAddr": M, "brokerId": "0"}, 3),
            ],
        )
    for seq, (reply, field) in enumerate(zip(replies, ["brokerName", "brokerId", "brokerId"], strict=True), 1):
        assert field in ws_refused(reply, seq)["fields"]


def test_django_s_own_400_and_403_are_json_under_api_and_pages_elsewhere(rf):
    from django.core.exceptions import RequestDataTooBig, SuspiciousOperation

    from controlplane.errors import json_400, json_403

    api_request, page = rf.get("/api/v1/nameserver/topics"), rf.get("/overview")
    assert refused(json_400(api_request, RequestDataTooBig("big")), 413)
    assert refused(json_400(api_request, SuspiciousOperation("odd")), 400)
    assert refused(json_403(api_request), 403, ResponseCode.NO_PERMISSION)
    assert not json_400(page, SuspiciousOperation("odd"))["Content-Type"].startswith("application/json")
    assert not json_403(page)["Content-Type"].startswith("application/json")


# --- the schema says what the server takes ----------------------------------------------------------


@pytest.fixture
def schema(read_token) -> dict:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    return ok(client.get("/api/schema/", {"format": "json"}))


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _unbounded(schema: dict, node: dict, where: str, seen: set) -> list[str]:
    """Where a request schema lets a string or an integer through without the server's rule: a string
    with no pattern or enum, an integer without minimum and maximum."""
    if "$ref" in node:
        if node["$ref"] in seen:
            return []
        seen.add(node["$ref"])
    node = _resolve(schema, node)
    found = []
    for key in ("oneOf", "anyOf", "allOf"):
        for i, part in enumerate(node.get(key, [])):
            if "type" in part or "$ref" in part:  # not a rule across an object's fields (required: [...])
                found += _unbounded(schema, part, f"{where}/{key}{i}", seen)
    kind = node.get("type")
    if kind == "string" and "pattern" not in node and "enum" not in node and node.get("maxLength") != 0:
        found.append(where)
    if kind == "integer" and not ("minimum" in node and "maximum" in node):
        found.append(where)
    for name, prop in (node.get("properties") or {}).items():
        found += _unbounded(schema, prop, f"{where}.{name}", seen)
    if isinstance(node.get("items"), dict):
        found += _unbounded(schema, node["items"], f"{where}[]", seen)
    if isinstance(node.get("additionalProperties"), dict):
        found += _unbounded(schema, node["additionalProperties"], f"{where}{{}}", seen)
    return found


def test_the_schema_declares_every_rule_of_request_bodies_and_parameters(schema):
    unbounded, media_types = [], set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                where = f"{method.upper()} {path} {parameter['in']}:{parameter['name']}"
                unbounded += _unbounded(schema, parameter["schema"], where, set())
            for media_type, content in (operation.get("requestBody") or {}).get("content", {}).items():
                media_types.add(media_type)
                unbounded += _unbounded(schema, content.get("schema", {}), f"{method.upper()} {path} body", set())
    assert media_types == {"application/json"}
    assert unbounded == []


def test_the_schema_bounds_config_integers_as_java_types_them(schema):
    patch = schema["paths"]["/api/v1/controller/config"]["patch"]["requestBody"]["content"]["application/json"]["schema"]
    as_number = {key: prop["oneOf"][0] for key, prop in patch["properties"].items() if "oneOf" in prop}
    assert as_number["scanInactiveMasterInterval"]["maximum"] == LONG_MAX
    assert as_number["electMasterMaxRetryCount"]["maximum"] == INT_MAX
    assert patch["additionalProperties"] is False and "configBlackList" not in patch["properties"]
