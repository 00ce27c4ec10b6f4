"""A token bound to one cluster is bound everywhere (docs/api.md, docs/websocket.md): every REST
endpoint and websocket frame that names a cluster or a broker set refuses a request that reaches
another cluster with 403 + 16 NO_PERMISSION (an ``error`` frame with 16) before anything changes, and
the same call for the token's own cluster goes through. A broker set counts by the cluster the control
plane stored it in, not by the clusterName a request claims.

The world: cluster cA with broker set a1 and cluster cB with broker set b1, each registered with the
nameserver (ids 0 and 1, topics TopicA and TopicB) and with the controller (replicas 1, 2 and 3;
1 master, SyncStateSet {1, 2}, 1 and 2 heartbeating, 3 silent). The tokens under test are bound to cA.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from audits.models import AuditRun, Finding
from controlplane.auth import binding_refusal
from controlplane.controller import liveness as ctl_liveness
from controlplane.controller import selectors as ctl_selectors
from controlplane.controller.models import Replica, ReplicaGroup, Transition
from controlplane.models import ApiToken, Isolation, OperatorAction
from controlplane.redis import sync_client
from nameserver.models import BrokerGroup, BrokerMember, TopicQueue
from tests.nameserver.helpers import register_body
from tests.nameserver.test_websocket import call, connected

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NS, CTL, OPS, AUDITS = "/api/v1/nameserver", "/api/v1/controller", "/api/v1/operations/brokers", "/api/v1/audits"
OWN_CLUSTER, OTHER_CLUSTER = "cA", "cB"
SET_OF = {OWN_CLUSTER: "a1", OTHER_CLUSTER: "b1"}


def addr(broker_set: str, n: int) -> str:
    return f"127.0.0.1:{(11000 if broker_set == 'a1' else 12000) + 10 * n}"


_names = itertools.count()


def token(scope: str, cluster: str = "") -> str:
    return ApiToken.issue(f"{scope}-{cluster or 'unbound'}-{next(_names)}", scope, cluster)[1]


def client(scope: str, cluster: str = "") -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token(scope, cluster)}")
    return c


def ok(resp) -> dict:
    assert resp.status_code in (200, 202), resp.content
    return resp.json()


@pytest.fixture
def world() -> None:
    broker = client("broker")
    for cluster, name in SET_OF.items():
        for i in (1, 2, 3):
            ok(broker.post(f"{CTL}/brokers/apply-broker-id", ctl_apply(cluster, name, i), format="json"))
        for i in (1, 2):
            ok(broker.post(f"{CTL}/brokers/heartbeat", ctl_heartbeat(cluster, name, i), format="json"))
        elected = ok(
            broker.post(f"{CTL}/elect-master", {"clusterName": cluster, "brokerName": name, "brokerId": 1}, format="json")
        )
        assert elected["masterBrokerId"] == 1
        ok(broker.post(f"{CTL}/alter-sync-state-set", alter(None, name, [1, 2]), format="json"))
        for ns_id, n in ((0, 1), (1, 2)):
            ok(
                broker.post(
                    f"{NS}/brokers/register", register_body(ns_id, addr(name, n), cluster=cluster, name=name), format="json"
                )
            )


# --- what a request names, built for a (clusterName, brokerName) pair (None: not named) -----------------


def ctl_apply(cluster, name, broker_id: int = 4) -> dict:
    code = f"{addr(name, broker_id)};1"
    return {"clusterName": cluster, "brokerName": name, "appliedBrokerId": broker_id, "registerCheckCode": code}


def ctl_heartbeat(cluster, name, broker_id: int = 2) -> dict:
    return {
        "clusterName": cluster,
        "brokerName": name,
        "brokerAddr": addr(name, broker_id),
        "brokerId": broker_id,
        "epoch": 1,
        "maxOffset": 0,
        "confirmOffset": 0,
        "heartbeatTimeoutMillis": 60_000,
    }


def _with_cluster(cluster, body: dict) -> dict:
    return {"clusterName": cluster, **body} if cluster else body


def alter(cluster, name, sync_state_set=(1,)) -> dict:
    state = ctl_selectors.replica_info(name)
    return _with_cluster(
        cluster,
        {
            "brokerName": name,
            "masterBrokerId": 1,
            "masterEpoch": state.master_epoch,
            "syncStateSet": list(sync_state_set),
            "syncStateSetEpoch": state.sync_state_set_epoch,
        },
    )


def water_levels(name) -> dict:
    return {
        "brokerName": name,
        "brokerId": 0,
        "role": "MASTER",
        "masterEpoch": 1,
        "maxOffset": 9,
        "confirmOffset": 9,
        "minOffset": 0,
    }


def offset_events(cluster, name) -> dict:
    event = {"consumerGroup": "g", "topic": "TopicA", "queueId": 0, "offset": 5, "source": "client_commit", "timestampMs": 1}
    return {"clusterName": cluster, "brokerName": name, "brokerId": 1, "role": "SYNC_MASTER", "masterEpoch": 1, "events": [event]}


Body = Callable[[str | None, str | None], dict]

BODIES: dict[str, Body] = {
    "ns register": lambda c, s: register_body(2, addr(s, 5), cluster=c, name=s),
    "ns unregister": lambda c, s: {"clusterName": c, "brokerAddr": addr(s, 2), "brokerName": s},
    "ns heartbeat": lambda c, s: {"clusterName": c, "brokerAddr": addr(s, 1), "brokerName": s},
    "ns heartbeat, water levels only": lambda c, s: {"clusterName": c, "brokerAddr": addr(s, 1), "waterLevels": water_levels(s)},
    "cluster and set": lambda c, s: _with_cluster(c, {"brokerName": s}),
    "ctl apply": ctl_apply,
    "ctl register": lambda c, s: {"clusterName": c, "brokerName": s, "brokerId": 2, "brokerAddress": addr(s, 6)},
    "ctl heartbeat": ctl_heartbeat,
    "ctl broker elect": lambda c, s: _with_cluster(c, {"brokerName": s, "brokerId": 2}),
    "ctl designated elect": lambda c, s: _with_cluster(c, {"brokerName": s, "brokerId": 2, "designateElect": True}),
    "ctl alter": alter,
    "offset events": offset_events,
}


def masters_silent() -> None:
    """Both sets' masters stop heartbeating: a broker's election would now go through."""
    ctl_liveness.forget([ctl_liveness.member(c, s, 1) for c, s in SET_OF.items()])


# --- the variants: (what the request names as clusterName, as brokerName) ------------------------------

OWN = (OWN_CLUSTER, "a1")
NAMES_OTHER_CLUSTER = ("names the other cluster", (OTHER_CLUSTER, "b1"))
CLAIMS_OWN_CLUSTER = ("claims its own cluster for the other's set", (OWN_CLUSTER, "b1"))
NAMES_OTHER_SET = ("names the other cluster's set", (None, "b1"))
EVERY_CLUSTER = ("reaches every cluster", (None, None))
BOTH = (NAMES_OTHER_CLUSTER, CLAIMS_OWN_CLUSTER)
ALL = (NAMES_OTHER_CLUSTER, CLAIMS_OWN_CLUSTER, NAMES_OTHER_SET)


@dataclass(frozen=True)
class Rest:
    token: str  # the bound token's scope
    method: str
    path: str  # "{set}": the brokerName
    body: Body  # the JSON body, or the query of a GET / DELETE
    variants: tuple = BOTH
    prepare: Callable[[], None] | None = None


REST = {
    "nameserver register": Rest("broker", "post", f"{NS}/brokers/register", BODIES["ns register"]),
    "nameserver unregister": Rest("broker", "post", f"{NS}/brokers/unregister", BODIES["ns unregister"]),
    "nameserver heartbeat": Rest("broker", "post", f"{NS}/brokers/heartbeat", BODIES["ns heartbeat"]),
    "nameserver heartbeat with water levels": Rest(
        "broker", "post", f"{NS}/brokers/heartbeat", BODIES["ns heartbeat, water levels only"]
    ),
    "member group": Rest("read", "get", f"{NS}/brokers/member-group", BODIES["cluster and set"], ALL),
    "wipe write perm": Rest("admin", "post", f"{NS}/brokers/{{set}}/wipe-write-perm", lambda c, s: {}, (NAMES_OTHER_SET,)),
    "add write perm": Rest("admin", "post", f"{NS}/brokers/{{set}}/add-write-perm", lambda c, s: {}, (NAMES_OTHER_SET,)),
    "water levels": Rest("read", "get", f"{NS}/water-levels", BODIES["cluster and set"]),
    "topic list of a cluster": Rest("read", "get", f"{NS}/topics", lambda c, s: {"clusterName": c}, (NAMES_OTHER_CLUSTER,)),
    "create a topic on a cluster": Rest(
        "admin", "post", f"{NS}/topics", lambda c, s: {"topicName": "TopicZ", "clusterName": c}, (NAMES_OTHER_CLUSTER,)
    ),
    "create a topic on broker sets": Rest(
        "admin",
        "post",
        f"{NS}/topics",
        lambda c, s: {"topicName": "TopicZ", "brokerNames": sorted({"a1", s})},
        (NAMES_OTHER_SET,),
    ),
    "delete a topic on a cluster": Rest(
        "admin", "delete", f"{NS}/topics/TopicA", lambda c, s: {"clusterName": c}, (NAMES_OTHER_CLUSTER,)
    ),
    "delete a topic on broker sets": Rest(
        "admin", "delete", f"{NS}/topics/TopicA", lambda c, s: {"brokerName": s}, (NAMES_OTHER_SET,)
    ),
    "delete a topic everywhere": Rest(
        "admin", "delete", f"{NS}/topics/TopicA", lambda c, s: {"clusterName": c} if c else {}, (EVERY_CLUSTER,)
    ),
    "next broker id": Rest("read", "get", f"{CTL}/groups/{{set}}/next-broker-id", lambda c, s: {"clusterName": c}),
    "apply broker id": Rest("broker", "post", f"{CTL}/brokers/apply-broker-id", BODIES["ctl apply"]),
    "controller register": Rest("broker", "post", f"{CTL}/brokers/register", BODIES["ctl register"]),
    "controller heartbeat": Rest("broker", "post", f"{CTL}/brokers/heartbeat", BODIES["ctl heartbeat"]),
    "a broker's election": Rest("broker", "post", f"{CTL}/elect-master", BODIES["ctl broker elect"], ALL, masters_silent),
    "an operator's designated election": Rest("admin", "post", f"{CTL}/elect-master", BODIES["ctl designated elect"], ALL),
    "alter the SyncStateSet": Rest("broker", "post", f"{CTL}/alter-sync-state-set", BODIES["ctl alter"], ALL),
    "replica info": Rest("read", "get", f"{CTL}/groups/{{set}}/replica-info", lambda c, s: {}, (NAMES_OTHER_SET,)),
    "sync state data": Rest(
        "read", "get", f"{CTL}/sync-state-data", lambda c, s: {"brokerName": sorted({"a1", s})}, (NAMES_OTHER_SET,)
    ),
    "clean broker data": Rest(
        "admin",
        "post",
        f"{CTL}/clean-broker-data",
        lambda c, s: _with_cluster(c, {"brokerName": s, "brokerControllerIdsToClean": "3"}),
        ALL,
    ),
    "history of a set": Rest("read", "get", f"{CTL}/history", lambda c, s: {"brokerName": s}, (NAMES_OTHER_SET,)),
    "isolate": Rest("admin", "post", f"{OPS}/isolate", lambda c, s: {"brokerName": s, "brokerId": 2}, (NAMES_OTHER_SET,)),
    "unisolate": Rest("admin", "post", f"{OPS}/unisolate", lambda c, s: {"brokerName": s, "brokerId": 2}, (NAMES_OTHER_SET,)),
    "offset events": Rest("broker", "post", f"{AUDITS}/offset-events", BODIES["offset events"]),
}


def rest_call(c: APIClient, case: Rest, cluster, name):
    path = case.path.format(set=name)
    body = case.body(cluster, name)
    if case.method in ("get", "delete"):
        body = {k: v for k, v in body.items() if v is not None}  # a query names what it names
    if case.method == "get":
        return c.get(path, body)
    if case.method == "delete":
        return c.delete(f"{path}?{urlencode(body, doseq=True)}" if body else path)
    return getattr(c, case.method)(path, body, format="json")


# --- "nothing changed" -------------------------------------------------------------------------------


def _redis_dump() -> dict:
    """Every key the control plane keeps in Redis (liveness, connections, water levels, offset
    events, registry versions) with its value; the channel layer's, Celery's, the dashboard's change
    notes (written by a thread of their own, late) and the REST throttles' counts (every call counts,
    a refused one too: controlplane/throttling.py) aside."""
    r = sync_client()
    prefix = settings.REDIS_KEY_PREFIX
    out = {}
    for k in sorted(r.scan_iter(prefix + "*")):
        if k.startswith((prefix + "asgi", prefix + "celery", prefix + "dash", prefix + "throttle")):
            continue
        kind = r.type(k)
        if kind == "string":
            out[k] = r.get(k)
        elif kind == "hash":
            out[k] = r.hgetall(k)
        elif kind == "zset":
            out[k] = r.zrange(k, 0, -1, withscores=True)
        elif kind == "set":
            out[k] = sorted(r.smembers(k))
        elif kind == "list":
            out[k] = r.lrange(k, 0, -1)
    return out


def snapshot() -> dict:
    return {
        "controller sets": list(ReplicaGroup.objects.order_by("id").values()),
        "controller replicas": list(Replica.objects.order_by("id").values()),
        "history": list(Transition.objects.order_by("id").values_list("id", flat=True)),
        "nameserver sets": list(BrokerGroup.objects.order_by("id").values()),
        "nameserver members": list(BrokerMember.objects.order_by("id").values()),
        "topic queues": list(TopicQueue.objects.order_by("id").values()),
        "isolations": list(Isolation.objects.order_by("id").values()),
        "redis": _redis_dump(),
        "operator actions done": list(OperatorAction.objects.exclude(result__startswith="http 4").values_list("id", flat=True)),
    }


def assert_nothing_changed(before: dict, actions_before: int) -> None:
    assert snapshot() == before
    # The operator audit log records an admin token's refused call as refused ("http 403"), nothing else.
    assert {a.result for a in OperatorAction.objects.order_by("id")[actions_before:]} <= {"http 403"}


def assert_refused(resp) -> None:
    assert resp.status_code == 403, resp.content
    body = resp.json()
    assert (body["code"], body["name"]) == (16, "NO_PERMISSION") and body["detail"], body


# --- REST ----------------------------------------------------------------------------------------------


def _rest_cases():
    for endpoint, case in REST.items():
        for variant, names in case.variants:
            yield pytest.param(case, names, id=f"{endpoint}: {variant}")


@pytest.mark.parametrize("case, names", list(_rest_cases()))
def test_a_bound_token_reaching_another_cluster_over_rest_is_refused_and_changes_nothing(world, case, names):
    bound = client(case.token, OWN_CLUSTER)
    if case.prepare:
        case.prepare()
    before, actions = snapshot(), OperatorAction.objects.count()
    assert_refused(rest_call(bound, case, *names))
    assert_nothing_changed(before, actions)

    body = ok(rest_call(bound, case, *OWN))  # its own cluster: as before
    assert body.get("code", 0) in (0, 2011), body


@pytest.mark.parametrize("case", [REST["wipe write perm"], REST["a broker's election"], REST["delete a topic everywhere"]])
def test_an_unbound_token_still_reaches_every_cluster(world, case):
    if case.prepare:
        case.prepare()
    ok(rest_call(client(case.token), case, None, "b1"))


@pytest.mark.parametrize("path", [f"{NS}/config", f"{CTL}/config"])
def test_the_config_is_every_clusters_so_a_bound_token_does_not_patch_it(world, path):
    key = "orderMessageEnable" if path.startswith(NS) else "enableElectUncleanMaster"
    before, actions = snapshot(), OperatorAction.objects.count()
    assert_refused(client("admin", OWN_CLUSTER).patch(path, {key: True}, format="json"))
    assert_nothing_changed(before, actions)
    assert ok(client("admin").patch(path, {key: True}, format="json"))[key] is True


def test_listings_that_name_no_cluster_show_a_bound_token_its_own_cluster(world):
    run = AuditRun.objects.create(trigger="api", status="succeeded", active=None, progress=1)
    for cluster, name in SET_OF.items():
        Finding.objects.create(
            run=run,
            kind="rollback",
            cause="unknown",
            cluster_name=cluster,
            consumer_group="g",
            topic="TopicA",
            broker_name=name,
            queue_id=0,
            master_epoch=1,
            broker_id=1,
            source="client_commit",
            previous_offset=9,
            offset=5,
            detected_at="2030-01-01T00:00:00Z",
        )
    bound, unbound = client("read", OWN_CLUSTER), client("read")

    def seen(c: APIClient) -> dict:
        return {
            "cluster-info": sorted(ok(c.get(f"{NS}/cluster-info"))["brokerAddrTable"]),
            "topics": {t: sorted(q["brokerName"] for q in qs) for t, qs in ok(c.get(f"{NS}/topics"))["topicList"].items()},
            "history": {t["brokerName"] for t in ok(c.get(f"{CTL}/history"))["transitions"]},
            "findings": sorted(f["brokerName"] for f in ok(c.get(f"{AUDITS}/findings", {"run": run.pk}))["findings"]),
        }

    assert seen(bound) == {
        "cluster-info": ["a1"],
        "topics": {"TopicA": ["a1"], "TopicB": ["a1"]},
        "history": {"a1"},
        "findings": ["a1"],
    }
    both = ["a1", "b1"]
    assert seen(unbound) == {
        "cluster-info": both,
        "topics": {"TopicA": both, "TopicB": both},
        "history": set(both),
        "findings": both,
    }


def test_a_dashboard_login_is_bound_to_no_cluster(world):
    user = User.objects.create_superuser("root", password="x" * 12)
    session = APIClient()
    session.force_login(user)
    assert sorted(ok(session.get(f"{NS}/cluster-info"))["brokerAddrTable"]) == ["a1", "b1"]
    ok(session.get(f"{CTL}/groups/b1/replica-info"))
    ok(session.post(f"{OPS}/isolate", {"brokerName": "b1", "brokerId": 2}, format="json"))


@pytest.mark.parametrize("registry", ["controller", "nameserver"])
def test_a_set_either_registry_keeps_in_another_cluster_is_refused_by_both(registry):
    """cB's set b9 known to one registry only: the other registry refuses to take it into cA too."""
    if registry == "controller":
        ok(client("broker").post(f"{CTL}/brokers/apply-broker-id", ctl_apply(OTHER_CLUSTER, "b9", 1), format="json"))
    else:
        ok(
            client("broker").post(
                f"{NS}/brokers/register", register_body(0, addr("b9", 1), cluster=OTHER_CLUSTER, name="b9"), format="json"
            )
        )
    bound = client("broker", OWN_CLUSTER)
    before, actions = snapshot(), OperatorAction.objects.count()
    assert_refused(
        bound.post(f"{NS}/brokers/register", register_body(0, addr("b9", 2), cluster=OWN_CLUSTER, name="b9"), format="json")
    )
    assert_refused(bound.post(f"{CTL}/brokers/apply-broker-id", ctl_apply(OWN_CLUSTER, "b9", 1), format="json"))
    assert_nothing_changed(before, actions)
    # A set known nowhere is the bound token's to create.
    ok(bound.post(f"{CTL}/brokers/apply-broker-id", ctl_apply(OWN_CLUSTER, "a9", 1), format="json"))


# --- the broker websocket ------------------------------------------------------------------------------

FRAMES = {
    "register": (BODIES["ns register"], BOTH, None),
    "heartbeat": (BODIES["ns heartbeat"], BOTH, None),
    "heartbeat with water levels": (BODIES["ns heartbeat, water levels only"], BOTH, None),
    "unregister": (BODIES["ns unregister"], BOTH, None),
    "controller_heartbeat": (BODIES["ctl heartbeat"], BOTH, None),
    "get_next_broker_id": (BODIES["cluster and set"], ALL, None),
    "apply_broker_id": (BODIES["ctl apply"], BOTH, None),
    "register_broker_to_controller": (BODIES["ctl register"], BOTH, None),
    "alter_sync_state_set": (BODIES["ctl alter"], ALL, None),
    "get_replica_info": (BODIES["cluster and set"], ALL, None),
    "get_broker_member_group": (BODIES["cluster and set"], ALL, None),
    "elect_master": (BODIES["ctl broker elect"], ALL, masters_silent),
    "offset_events": (BODIES["offset events"], BOTH, None),
}


def _frame_cases():
    for name, (_, variants, _) in FRAMES.items():
        for variant, names in variants:
            yield pytest.param(name, names, id=f"{name}: {variant}")


def frame(token: str, kind: str, payload: dict) -> dict:
    """One frame on a fresh socket, closed after the reply (its close hooks run before this returns)."""

    async def scenario():
        ws = await connected(token)
        try:
            return await call(ws, kind.split(" with ")[0], payload)
        finally:
            await ws.disconnect()

    return async_to_sync(scenario)()


@pytest.mark.parametrize("kind, names", list(_frame_cases()))
def test_a_bound_token_reaching_another_cluster_over_the_websocket_is_refused_and_changes_nothing(world, kind, names):
    bound = token("broker", OWN_CLUSTER)
    body, _, prepare = FRAMES[kind]
    if prepare:
        prepare()
    before, actions = snapshot(), OperatorAction.objects.count()
    reply = frame(bound, kind, body(*names))
    assert reply["type"] == "error" and reply["payload"]["code"] == 16 and reply["payload"]["name"] == "NO_PERMISSION", reply
    assert_nothing_changed(before, actions)

    reply = frame(bound, kind, body(*OWN))  # its own cluster: as before
    assert reply["type"] == f"{kind.split(' with ')[0]}_result", reply
    assert reply["payload"].get("code", 0) in (0, 2011), reply


def test_a_socket_remembers_only_the_sets_of_its_own_cluster(world):
    """Heartbeats skip the look-up for a set found in the token's cluster before; another cluster's
    set is looked up, and refused, every time."""
    bound = token("broker", OWN_CLUSTER)

    async def scenario():
        ws = await connected(bound)
        replies = []
        for seq, name in enumerate(["a1", "b1", "a1", "b1"], start=1):
            replies.append(await call(ws, "controller_heartbeat", ctl_heartbeat(OWN_CLUSTER, name), seq=seq))
        await ws.disconnect()
        return replies

    before = ctl_liveness.live_infos(OWN_CLUSTER, "b1", [2])
    assert [r["type"] for r in async_to_sync(scenario)()] == ["controller_heartbeat_result", "error"] * 2
    assert ctl_liveness.live_infos(OWN_CLUSTER, "b1", [2]) == before  # no entry for cA/b1


# --- the rule ------------------------------------------------------------------------------------------

RULE = {
    "unbound: anything": ("", ["cB"], {"b1": {"cB"}}, True, None),
    "own cluster, own set": ("cA", ["cA"], {"a1": {"cA"}}, False, None),
    "own cluster, unknown set": ("cA", ["cA"], {}, False, None),
    "no cluster named, own set": ("cA", [None, ""], {"a1": {"cA"}}, False, None),
    "another cluster named": ("cA", ["cB"], {}, False, "cluster cB"),
    "own cluster named, the set is another's": ("cA", ["cA"], {"b1": {"cB"}}, False, "broker set b1"),
    "a set known in both clusters": ("cA", [], {"x": {"cA", "cB"}}, False, "broker set x"),
    "every cluster": ("cA", [], {}, True, "bound to cluster cA"),
}


@pytest.mark.parametrize("bound, clusters, known, every, refusal", RULE.values(), ids=RULE.keys())
def test_the_binding_rule(bound, clusters, known, every, refusal):
    found = binding_refusal(bound, clusters, known, every_cluster=every)
    assert found is None if refusal is None else refusal in found
