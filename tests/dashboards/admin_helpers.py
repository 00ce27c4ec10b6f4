"""What the dashboard's admin tests share: logged-in clients (operator, viewer, anonymous), JSON posts,
and a small cluster made through the services (nameserver broker sets, a controller-managed group)."""

from __future__ import annotations

import json

from django.contrib.auth.models import Group, User
from django.test import Client

from controlplane.controller import liveness as ctl_liveness
from controlplane.controller import services as controller
from dashboards.permissions import OPERATORS_GROUP
from nameserver import broker_status
from nameserver import services as nameserver
from nameserver.core import broker_status as core_broker_status
from nameserver.core.registry import RegisterRequest
from nameserver.core.values import DataVersion, TopicConfig

RW = 6


OPERATOR_LOGIN = ("ops", "a-long-operator-password")
VIEWER_LOGIN = ("viewer", "a-long-viewer-password")


def browser_users() -> None:
    """The accounts the browser tests log in with: an operator (OPERATOR_LOGIN) and a viewer."""
    operator = User.objects.create_user(OPERATOR_LOGIN[0], password=OPERATOR_LOGIN[1])
    operator.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    User.objects.create_user(VIEWER_LOGIN[0], password=VIEWER_LOGIN[1])


def client_for(name: str, *, operator: bool, enforce_csrf: bool = False) -> Client:
    user = User.objects.create_user(name, password="x" * 12)
    if operator:
        user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(user)
    return client


def post(client: Client, url: str, body, **extra) -> tuple[int, dict]:
    r = client.post(url, json.dumps(body), content_type="application/json", **extra)
    return r.status_code, r.json() if r.headers.get("Content-Type", "").startswith("application/json") else {}


def addr(broker_id: int, base: int = 10900) -> str:
    return f"127.0.0.1:{base + 10 * broker_id}"


def register_set(cluster: str, name: str, broker_id: int, broker_addr: str, topics: tuple[TopicConfig, ...] = ()) -> None:
    request = RegisterRequest(cluster, broker_addr, name, broker_id, "", "", 30_000, True, DataVersion(1, 1), topics)
    assert nameserver.register_broker(request).group.members


def beat(name: str, broker_id: int, *, cluster: str = "c1", max_offset: int = 0) -> None:
    controller.heartbeat(
        ctl_liveness.Beat(
            cluster, name, broker_id, addr(broker_id), epoch=0, max_offset=max_offset, heartbeat_timeout_millis=60_000
        )
    )


def controller_group(name: str = "g1", *, alive: tuple[int, ...] = (1, 2), dead: tuple[int, ...] = (3,)) -> None:
    """``name`` in cluster c1: replicas ``alive`` (heartbeating) and ``dead`` (registered, silent); the
    first alive one elected; the SyncStateSet all alive ones."""
    for i in (*alive, *dead):
        assert controller.apply_broker_id("c1", name, i, f"{addr(i)};1").ok
    for i in alive:
        beat(name, i, max_offset=1000)
    master = alive[0]
    assert controller.elect_master(name, broker_id=master).ok  # the SyncStateSet: {master}
    if len(alive) > 1:
        assert controller.alter_sync_state_set(
            name, master_broker_id=master, master_epoch=1, new_sync_state_set=set(alive), sync_state_set_epoch=1
        ).ok


def report(
    name: str,
    broker_id: int,
    broker_addr: str,
    *,
    cluster: str = "c1",
    meta_mode: str = "WRITER",
    queues: list | None = None,
    offsets: list | None = None,
    config: dict | None = None,
    dynamic: tuple[str, ...] = ("retryMaxTimes", "minInSyncReplicas"),
    store: dict | None = None,
) -> dict:
    """A broker's ``broker_status`` report as the nameserver keeps it (checked as the frame handler checks
    it, stored through ``nameserver.broker_status.store``); the broker must be registered to count as alive."""
    payload = {
        "clusterName": cluster,
        "brokerName": name,
        "brokerId": broker_id,
        "brokerAddr": broker_addr,
        "status": {
            "role": "SYNC_MASTER" if meta_mode == "WRITER" else "SLAVE",
            "metaMode": meta_mode,
            "masterEpoch": 1,
            "writable": meta_mode == "WRITER",
            "writeRefusal": None,
            "isolated": False,
            "commitLogMinOffset": 0,
            "commitLogMaxOffset": 4096,
            "confirmOffset": 4096,
            "startedAtMs": 1_700_000_000_000,
            "uptimeMs": 60_000,
            "storeCodec": "python",
            "pid": 4242,
            "topics": 1,
            "consumerGroups": 1,
            **({"store": store} if store is not None else {}),
        },
        "config": {"retryMaxTimes": "16", "minInSyncReplicas": "1", "listenPort": "10911", **(config or {})},
        "dynamicKeys": list(dynamic),
        "queues": queues or [],
        "offsets": offsets or [],
    }
    parsed = core_broker_status.parse_report(payload)
    broker_status.store(parsed)
    return parsed
