"""The dashboard's pages, rendered over real Postgres and Redis with state made through the services:
every page for a viewer, the login wall, the operators' buttons, the audit search."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from controlplane import audit
from controlplane.controller import liveness as ctl_liveness
from controlplane.controller import services as controller
from nameserver import services as nameserver
from nameserver import settings_store
from nameserver.core.registry import RegisterRequest
from nameserver.core.values import DataVersion, TopicConfig

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RW, READ_ONLY = 6, 4


def ctl_addr(broker_id: int) -> str:
    return f"127.0.0.1:{10900 + 10 * broker_id}"


def register_ns(cluster: str, name: str, broker_id: int, addr: str, topics: tuple[TopicConfig, ...]) -> None:
    request = RegisterRequest(cluster, addr, name, broker_id, "", "", 30_000, True, DataVersion(1, 1), topics)
    assert nameserver.register_broker(request).group.members


@pytest.fixture
def cluster(db):
    """c1/g1: a controller-managed group (replicas 1, 2, 3; 1 elected master, SyncStateSet {1, 2});
    c1/b2: a nameserver-only set whose master (id 0) is gone: its read-only topic shows an acting master."""
    for i in (1, 2, 3):
        assert controller.apply_broker_id("c1", "g1", i, f"{ctl_addr(i)};1").ok
        controller.heartbeat(
            ctl_liveness.Beat("c1", "g1", i, ctl_addr(i), epoch=0, max_offset=1000 * i, heartbeat_timeout_millis=60_000)
        )
    assert controller.elect_master("g1", broker_id=3).ok  # the most caught-up replica
    assert controller.alter_sync_state_set(
        "g1", master_broker_id=3, master_epoch=1, new_sync_state_set={2, 3}, sync_state_set_epoch=1
    ).ok
    topics = (TopicConfig("Orders", 4, 4, RW), TopicConfig("Payments", 2, 2, RW))
    register_ns("c1", "g1", 0, ctl_addr(3), topics)
    register_ns("c1", "g1", 2, ctl_addr(2), topics)
    register_ns("c1", "b2", 1, "127.0.0.1:20911", (TopicConfig("Audit", 2, 2, READ_ONLY), TopicConfig("Logs", 2, 2, READ_ONLY)))
    settings_store.update_config({"supportActingMaster": True})
    return "g1"


@pytest.fixture
def viewer(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("viewer", password="x" * 12))
    return client


@pytest.fixture
def operator(db) -> Client:
    user = User.objects.create_user("ops", password="x" * 12)
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def superuser(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x" * 12))
    return client


PAGES = [
    ("dashboards:overview", []),
    ("dashboards:group", ["g1"]),
    ("dashboards:brokers", []),
    ("dashboards:topics", []),
    ("dashboards:config", []),
    ("dashboards:audit", []),
]


def html(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_every_page_renders_for_a_viewer(cluster, viewer, name, args):
    page = html(viewer.get(reverse(name, args=args)))
    assert "<main>" in page and "Log out" in page


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_anonymous_users_are_sent_to_the_login_page(db, name, args):
    url = reverse(name, args=args)
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


def test_the_water_level_history_needs_a_login_and_answers_json(cluster, viewer):
    url = reverse("dashboards:water-levels", args=["g1"])
    assert Client().get(url).status_code == 403
    body = viewer.get(url).json()
    assert body["brokerName"] == "g1" and body["minutes"] == 15 and body["samples"] == []


def test_the_overview_shows_master_epoch_sync_state_set_and_health(cluster, viewer):
    page = html(viewer.get(reverse("dashboards:overview")))
    assert 'data-broker-name="g1"' in page and 'data-broker-name="b2"' in page
    assert 'href="/groups/g1/"' in page
    assert "<b>3</b>" in page  # g1's master
    assert "{2, 3}" in page  # g1's SyncStateSet
    assert "acting master 1" in page  # b2 lost its master; its slave stands in
    assert 'src="/static/js/overview.js"' in page


def test_the_group_page_shows_state_members_and_elections(cluster, viewer):
    page = html(viewer.get(reverse("dashboards:group", args=["g1"])))
    assert '<span id="master-id" class="big">3</span>' in page
    assert '<span id="master-epoch" class="big">1</span>' in page
    assert '<span id="sync-state-set" class="big">{2, 3}</span>' in page
    for i in (1, 2, 3):
        assert f'data-broker-id="{i}"' in page
    assert 'id="water-chart"' in page and 'id="epoch-timeline"' in page
    assert 'id="elections"' in page and 'id="sync-state-set-journal"' in page
    assert '<li data-epoch="1"><b>epoch 1</b> master 3' in page
    assert 'class="winner"' in page  # the election's candidates, the winner marked
    assert "{3} → <b>{2, 3}</b>" in page  # the alter in the SyncStateSet journal
    assert '<script src="/static/js/plotly.min.js">' in page
    assert 'id="page-data"' in page


def test_an_unknown_group_is_404(cluster, viewer):
    assert viewer.get(reverse("dashboards:group", args=["nope"])).status_code == 404


ACTION_IDS = (
    'id="elect-button"',
    'id="isolate-1"',
    'id="unisolate-1"',
    'id="confirm-action"',
    'id="action-result"',
    'id="wipe-write-perm"',
    'id="add-write-perm"',
    "<dialog",
)


@pytest.mark.parametrize("who", ["operator", "superuser"])
def test_operators_see_the_action_buttons(cluster, request, who):
    client = request.getfixturevalue(who)
    page = html(client.get(reverse("dashboards:group", args=["g1"])))
    for element in ACTION_IDS:
        assert element in page, element
    assert 'name="csrf-token"' in page
    assert reverse("dashboards:elect-preview", args=["g1"]) in page


def test_viewers_see_no_action_buttons(cluster, viewer):
    page = html(viewer.get(reverse("dashboards:group", args=["g1"])))
    for element in ACTION_IDS:
        assert element not in page, element
    assert '"actions": null' in page


def test_the_brokers_page_lists_every_broker(cluster, viewer):
    page = html(viewer.get(reverse("dashboards:brokers")))
    for addr in (ctl_addr(1), ctl_addr(2), ctl_addr(3), "127.0.0.1:20911"):
        assert addr in page, addr
    assert page.count('<tr data-broker-name="g1"') == 3


def test_the_topics_page_shows_routes_as_clients_see_them(cluster, viewer):
    page = html(viewer.get(reverse("dashboards:topics")))
    assert 'data-topic="Orders"' in page and 'data-topic="Audit"' in page
    # b2 has no id 0: its read-only topic's route names slave 1 as id 0, the acting master.
    assert '<tr data-broker-name="b2" class="acting-master">' in page
    assert '0: <span class="addr">127.0.0.1:20911</span>' in page


def test_the_config_page_shows_both_configs_read_only(cluster, viewer):
    page = html(viewer.get(reverse("dashboards:config")))
    assert 'id="config-controller"' in page and 'id="config-nameserver"' in page
    assert '<tr data-key="enableElectUncleanMaster">' in page
    assert '<tr data-key="supportActingMaster">' in page
    # RocketMQ keys accepted with nothing to do here are marked so.
    assert '<tr data-key="controllerType" class="no-effect">' in page and "No effect here: the controller keeps" in page
    assert '<tr data-key="enableControllerInNamesrv" class="no-effect">' in page
    assert "<form" not in page.split("</header>")[1]


@pytest.fixture
def actions(db):
    audit.record(
        "alice",
        "elect_master",
        cluster_name="c1",
        broker_name="orders-a",
        broker_id=2,
        before={"masterBrokerId": 1},
        after={"masterBrokerId": 2},
    )
    audit.record("bob", "isolate", cluster_name="c1", broker_name="orders-b", broker_id=3)
    audit.record("token:ci", "wipe_write_perm", cluster_name="c1", broker_name="orders-a", result="BROKER_NOT_EXIST")


def audit_rows(client, **query) -> list[str]:
    page = html(client.get(reverse("dashboards:audit"), query))
    return [row.split("<td>")[2].split("</td>")[0] for row in page.split("<tr data-action-id=")[1:]]


@pytest.mark.parametrize(
    ("query", "actors"),
    [
        ({}, ["token:ci", "bob", "alice"]),
        ({"actor": "ali"}, ["alice"]),
        ({"actor": "TOKEN:"}, ["token:ci"]),
        ({"action": "isolate"}, ["bob"]),
        ({"broker": "orders-a"}, ["token:ci", "alice"]),
        ({"broker": "orders-a", "action": "elect_master"}, ["alice"]),
        ({"broker": "nothing"}, []),
    ],
)
def test_the_audit_log_filters_by_actor_action_and_broker(actions, viewer, query, actors):
    assert audit_rows(viewer, **query) == actors


def test_the_audit_log_pages_keep_the_search(db, viewer):
    for i in range(120):
        audit.record(f"user{i % 2}", "isolate", broker_name="orders-a")
    page = html(viewer.get(reverse("dashboards:audit"), {"actor": "user1"}))
    assert "60 actions" in page and "page 1 of 2" in page
    assert 'href="?actor=user1&amp;page=2"' in page
    assert len(audit_rows(viewer, actor="user1", page=2)) == 10


def test_plotly_is_served_from_our_own_static_files():
    found = finders.find("js/plotly.min.js")
    assert found and found.endswith("plotly.min.js")
    with open(found, "rb") as f:
        assert b"plotly" in f.read(4096).lower()


def test_overview_rows_escape_every_value():
    from dashboards.templatetags.overview_rows import group_row

    row = group_row(
        {
            "brokerName": "<b>x</b>",
            "url": '/groups/"x"/',
            "health": "bad",
            "reasons": ["<i>no</i> master"],
            "masterBrokerId": None,
            "actingMaster": None,
            "masterEpoch": 0,
            "syncStateSet": [],
            "controllerManaged": True,
            "members": [],
        }
    )
    assert "<b>x</b>" not in row and "&lt;b&gt;x&lt;/b&gt;" in row
    assert "<i>" not in row and "&quot;x&quot;" in row
    assert '<span class="bad">no master</span>' in row
