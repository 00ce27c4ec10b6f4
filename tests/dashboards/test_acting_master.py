"""The acting-master state the dashboard shows is the nameserver's: the routes' rule (reference §3.5:
supportActingMaster, the topic's permission, no id 0, the smallest id not isolated) held against the
mode the brokers report (``broker_status``'s metaMode, RIP-32). Over real Postgres and Redis, with
the registry made through the nameserver's services: one row per way the two agree or disagree, each
checked on the overview, the group page, the live payload and against the route clients get."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from controlplane.controller import liveness as ctl_liveness
from controlplane.controller import services as controller
from controlplane.operations import isolation
from dashboards import selectors
from nameserver import broker_status, services, settings_store, wire
from nameserver import selectors as ns
from nameserver.core.broker_status import parse_report
from nameserver.core.registry import RegisterRequest
from nameserver.core.values import DataVersion, TopicConfig

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MASTER, SLAVE_1, SLAVE_2 = "127.0.0.1:30911", "127.0.0.1:30921", "127.0.0.1:30931"
ADDRS = {0: MASTER, 1: SLAVE_1, 2: SLAVE_2}


def register(broker_id: int, *, name: str = "b1", cluster: str = "c1") -> None:
    topics = (TopicConfig("Orders", 4, 4, 6), TopicConfig("Payments", 2, 2, 6))
    request = RegisterRequest(cluster, ADDRS[broker_id], name, broker_id, "", "", 30_000, True, DataVersion(1, 1), topics)
    assert services.register_broker(request).group.members


def report(broker_id: int, mode: str, *, name: str = "b1", cluster: str = "c1", addr: str | None = None) -> None:
    """A broker's ``broker_status`` report, as the websocket frame stores it."""
    body = {
        "clusterName": cluster,
        "brokerName": name,
        "brokerId": broker_id,
        "brokerAddr": addr or ADDRS[broker_id],
        "status": {"metaMode": mode},
        "config": {},
        "dynamicKeys": [],
    }
    broker_status.store(parse_report(body))


def master_gone() -> None:
    """The master unregistered (its socket closed): the set's topics lost write (reference §3.4)."""
    assert services.unregister_broker("c1", MASTER) is not None


def support(on: bool) -> None:
    settings_store.update_config({"supportActingMaster": on})


def route_acting_addr(topic: str = "Orders") -> str | None:
    """The address the route clients get shows as an acting master's id 0, or None."""
    (bd,) = wire.topic_route(ns.topic_route(topic))["brokerDatas"]
    return bd["brokerAddrs"]["0"] if bd["actingMaster"] else None


# Each row: how the set is made (steps), then what every page must say.
CASES = [
    pytest.param(
        [lambda: report(1, "ACTING")],
        "agreed",
        1,
        "acting master 1 (read-only)",
        id="routes-show-slave-1-and-it-reports-acting",
    ),
    pytest.param(
        [lambda: report(1, "FOLLOWER")],
        "broker_not_acting",
        1,
        "acting master 1 in the routes — broker 1 not acting (it reports FOLLOWER)",
        id="routes-show-slave-1-but-it-is-not-acting-yet",
    ),
    pytest.param(
        [],
        "broker_unreported",
        1,
        "acting master 1 in the routes — broker 1 has not reported its mode",
        id="routes-show-slave-1-which-never-reported",
    ),
    pytest.param(
        [lambda: support(False), lambda: report(1, "ACTING")],
        "routes_not_acting",
        None,
        "acting master: none in the routes — broker 1 reports acting",
        id="supportActingMaster-off-but-the-broker-acts",
    ),
    pytest.param([lambda: support(False), lambda: report(1, "FOLLOWER")], None, None, None, id="supportActingMaster-off"),
    pytest.param(
        [lambda: services.change_write_perm("b1", writeable=True), lambda: report(1, "ACTING")],
        "routes_not_acting",
        None,
        "acting master: none in the routes — broker 1 reports acting",
        id="writeable-topic-is-not-substituted",
    ),
    pytest.param(
        [lambda: isolation.isolate("b1", 1, True, by="test"), lambda: report(2, "ACTING"), lambda: report(1, "FOLLOWER")],
        "agreed",
        2,
        "acting master 2 (read-only)",
        id="an-isolated-slave-leaves-the-routes-the-next-one-stands-in",
    ),
    pytest.param(
        [lambda: report(1, "ACTING"), lambda: report(2, "ACTING")],
        "another_broker_acting",
        1,
        "acting master 1 in the routes — broker 2 reports acting instead",
        id="another-slave-also-acting",
    ),
    pytest.param(
        [lambda: register(0), lambda: report(0, "WRITER"), lambda: report(1, "ACTING")],
        "routes_not_acting",
        None,
        "acting master: none in the routes — broker 1 reports acting",
        id="master-back-before-the-slave-handed-back",
    ),
    pytest.param(
        [lambda: register(0), lambda: report(0, "WRITER"), lambda: report(1, "FOLLOWER")], None, None, None, id="back-to-normal"
    ),
]


@pytest.fixture
def masterless(db):
    """c1/b1: master 0 and slaves 1, 2 (acting master enabled), a read-write topic; the master gone."""
    support(True)
    for broker_id in (0, 1, 2):
        register(broker_id)
    master_gone()


@pytest.fixture
def viewer(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("viewer", password="x" * 12))
    return client


@pytest.mark.parametrize("steps, agreement, broker_id, text", CASES)
def test_every_page_shows_the_routes_acting_master_against_the_brokers_mode(
    masterless, viewer, steps, agreement, broker_id, text
):
    for step in steps:
        step()
    assert ns.acting_masters(["b1"])["b1"].agreement.value == (agreement or "none")

    # the route clients get names the same acting master (or none)
    assert route_acting_addr() == (ADDRS[broker_id] if broker_id is not None else None)

    (group,) = [g for c in selectors.overview() for g in c["groups"] if g["brokerName"] == "b1"]
    detail = selectors.group_detail("b1")
    for shown in (group["actingMaster"], detail["actingMaster"]):
        if agreement is None:
            assert shown is None
        else:
            assert (shown["agreement"], shown["brokerId"], shown["text"]) == (agreement, broker_id, text)
            assert shown["brokerAddr"] == (ADDRS[broker_id] if broker_id is not None else None)
    if agreement is not None:
        assert text in group["reasons"] and group["health"] in ("warn", "bad")

    overview = viewer.get(reverse("dashboards:overview")).content.decode()
    page = viewer.get(reverse("dashboards:group", args=["b1"])).content.decode()
    if agreement is None:
        assert 'class="warn acting"' not in overview
        assert 'id="acting-master" class="warn acting" data-agreement="none" data-broker-id="" hidden' in page
    else:
        badge = f'class="warn acting" data-agreement="{agreement}" data-broker-id="{"" if broker_id is None else broker_id}"'
        assert f"<span {badge}>{text}</span>" in overview
        assert f'<span id="acting-master" {badge}>{text}</span>' in page


def test_the_health_says_no_master_only_when_no_route_shows_an_acting_master(masterless):
    report(1, "ACTING")
    (group,) = [g for c in selectors.overview() for g in c["groups"] if g["brokerName"] == "b1"]
    assert group["health"] == "warn" and "no master" not in group["reasons"]
    support(False)
    (group,) = [g for c in selectors.overview() for g in c["groups"] if g["brokerName"] == "b1"]
    assert group["health"] == "bad"
    assert group["reasons"][:2] == ["no master", "acting master: none in the routes — broker 1 reports acting"]


def test_the_live_state_payload_carries_the_same_acting_master(db):
    """A controller-managed group whose master left the nameserver: the state pushed to open pages
    (``group_states``) says what the pages render."""
    support(True)
    for i in (1, 2):
        assert controller.apply_broker_id("c1", "g1", i, f"{ADDRS[i]};1").ok
        controller.heartbeat(ctl_liveness.Beat("c1", "g1", i, ADDRS[i], epoch=0, max_offset=10, heartbeat_timeout_millis=60_000))
    register(1, name="g1")
    register(2, name="g1")
    report(1, "ACTING", name="g1")
    state = selectors.group_states(["g1"])["g1"]
    assert state["actingMaster"] == {
        "agreement": "agreed",
        "brokerId": 1,
        "brokerAddr": SLAVE_1,
        "topics": ["Orders", "Payments"],
        "otherTopics": 0,
        "reportedMode": "ACTING",
        "othersActing": [],
        "text": "acting master 1 (read-only)",
    }
    assert selectors.group_detail("g1")["actingMaster"] == state["actingMaster"]
