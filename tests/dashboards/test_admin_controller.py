"""The controller's side of the dashboard over real Postgres and Redis: clean broker metadata from the
group page (a preview by the controller's own rule; refused while a named replica heartbeats, as the
service refuses; audited), the controller metadata page with every group's master, epochs and
SyncStateSet, and isolate / un-isolate both reachable from the group page."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.controller import liveness
from controlplane.controller.models import Replica, ReplicaGroup
from controlplane.models import Drill, OperatorAction
from tests.dashboards.admin_helpers import addr, client_for, controller_group, post, register_set

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLEAN = reverse("dashboards:clean", args=["g1"])


@pytest.fixture
def group(db):
    """g1: replicas 1 (master) and 2 heartbeating, 3 registered and silent."""
    controller_group("g1", alive=(1, 2), dead=(3,))


@pytest.fixture
def operator(db) -> Client:
    return client_for("ops", operator=True)


def replica_ids() -> list[int]:
    return sorted(Replica.objects.filter(group__broker_name="g1").values_list("broker_id", flat=True))


def test_viewers_get_403_and_anonymous_users_the_login_page(group):
    viewer = client_for("viewer", operator=False)
    assert post(viewer, CLEAN, {"brokerIds": [3], "preview": True}) == (403, {"detail": "operators only"})
    assert post(viewer, CLEAN, {"brokerIds": [3]}) == (403, {"detail": "operators only"})
    r = Client().post(CLEAN, "{}", content_type="application/json")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    assert replica_ids() == [1, 2, 3] and OperatorAction.objects.count() == 0
    assert 'id="clean-button"' not in viewer.get(reverse("dashboards:group", args=["g1"])).content.decode()
    page = client_for("ops", operator=True).get(reverse("dashboards:group", args=["g1"])).content.decode()
    assert 'id="clean-button"' in page and 'id="clean-options"' in page and CLEAN in page


def test_clean_needs_the_csrf_token(group):
    strict = client_for("root", operator=True, enforce_csrf=True)
    assert strict.post(CLEAN, {"brokerIds": [3]}, content_type="application/json").status_code == 403
    assert replica_ids() == [1, 2, 3]
    strict.get(reverse("dashboards:group", args=["g1"]))
    status, answer = post(strict, CLEAN, {"brokerIds": [3]}, HTTP_X_CSRFTOKEN=strict.cookies["csrftoken"].value)
    assert status == 200 and answer["ok"] and replica_ids() == [1, 2]


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"brokerIds": "3"}, {"brokerIds"}),
        ({"brokerIds": [-1]}, {"brokerIds"}),
        ({"brokerIds": ["3"]}, {"brokerIds"}),
        ({"brokerIds": list(range(65))}, {"brokerIds"}),
        ({"brokerIds": [3], "preview": "yes"}, {"preview"}),
    ],
)
def test_bad_clean_input_is_a_400_with_field_errors(group, operator, body, fields):
    status, answer = post(operator, CLEAN, body)
    assert status == 400 and answer["detail"] == "invalid input" and set(answer["fields"]) == fields
    assert replica_ids() == [1, 2, 3] and OperatorAction.objects.count() == 0


def test_clean_of_an_unknown_group_is_a_404(group, operator):
    assert post(operator, reverse("dashboards:clean", args=["nope"]), {"preview": True})[0] == 404


def test_clean_previews_with_the_controllers_rule_and_refuses_a_live_replica(group, operator):
    status, alive = post(operator, CLEAN, {"brokerIds": [2], "preview": True})
    assert status == 200 and alive["ok"] is False and alive["detail"] == "still alive: [2]"
    assert alive["result"] == "CONTROLLER_INVALID_CLEAN_BROKER_METADATA" and alive["removed"] == []
    whole = post(operator, CLEAN, {"preview": True})[1]
    assert whole["ok"] is False and "still has a master" in whole["detail"]

    status, dead = post(operator, CLEAN, {"brokerIds": [3], "preview": True})
    assert status == 200 and dead["ok"] is True and dead["result"] == "preview"
    assert dead["removed"] == [{"brokerId": 3, "address": addr(3), "alive": False}]
    assert dead["dropsSet"] is False and dead["masterCleared"] is False
    assert dead["after"] == {"masterBrokerId": 1, "syncStateSet": [1, 2], "replicas": {"1": addr(1), "2": addr(2)}}
    assert replica_ids() == [1, 2, 3] and OperatorAction.objects.count() == 0  # previews change nothing

    # Refused when applied too: nothing changes, the refusal is recorded with its code.
    status, refused = post(operator, CLEAN, {"brokerIds": [2]})
    assert status == 200 and refused["ok"] is False and replica_ids() == [1, 2, 3]
    status, done = post(operator, CLEAN, {"brokerIds": [3]})
    assert status == 200 and done["ok"] is True and done["removedIds"] == [3] and done["droppedSet"] is False
    assert replica_ids() == [1, 2] and ReplicaGroup.objects.get(broker_name="g1").master_broker_id == 1
    first, second = OperatorAction.objects.order_by("id")
    assert (first.action, first.result) == ("clean_broker_data", "refused")
    assert first.detail == "2009 CONTROLLER_INVALID_CLEAN_BROKER_METADATA: still alive: [2]"
    assert (second.actor, second.action, second.broker_name, second.result) == ("ops", "clean_broker_data", "g1", "ok")
    assert second.params == {"brokerIds": [3]}
    assert second.before["replicas"] == {"1": addr(1), "2": addr(2), "3": addr(3)}
    assert second.after["replicas"] == {"1": addr(1), "2": addr(2)}


def test_cleaning_the_last_in_sync_replica_drops_the_set(db, operator):
    controller_group("g2", alive=(1,), dead=(2,))
    liveness.forget([liveness.member("c1", "g2", 1)])  # the master falls silent
    url = reverse("dashboards:clean", args=["g2"])
    preview = post(operator, url, {"brokerIds": [1], "preview": True})[1]
    assert preview["ok"] and preview["dropsSet"] is True and preview["masterCleared"] is True
    assert [r["brokerId"] for r in preview["removed"]] == [1, 2]  # the SyncStateSet empties: the whole set goes
    assert ReplicaGroup.objects.filter(broker_name="g2").exists()
    done = post(operator, url, {"brokerIds": [1]})[1]
    assert done["ok"] and done["droppedSet"] is True and done["removedIds"] == [1, 2]
    assert not ReplicaGroup.objects.filter(broker_name="g2").exists()
    assert OperatorAction.objects.get().after["replicas"] == {}


def test_the_controller_page_shows_metadata_and_every_managed_group(group, db):
    register_set("c1", "ns-only", 0, "127.0.0.1:20911")  # not managed by the controller: not listed
    viewer = client_for("viewer", operator=False)
    page = viewer.get(reverse("dashboards:controller")).content.decode()
    assert 'id="controller-metadata"' in page and "<code>postgres</code>" in page
    assert '<tr data-key="isLeader"><th>isLeader</th><td>yes</td></tr>' in page
    assert '<tr data-key="controllerLeaderAddress"><th>controllerLeaderAddress</th><td><code>testserver</code>' in page
    row = page.split('<tr data-broker-name="g1"')[1].split("</tr>")[0]
    assert '<a href="/groups/g1/">g1</a>' in row and "<b>1</b>" in row and "{1, 2}" in row
    assert 'data-broker-name="ns-only"' not in page
    assert 'href="/controller/" aria-current="page">Controller</a>' in page
    r = Client().get(reverse("dashboards:controller"))
    assert r.status_code == 302 and r["Location"] == "/accounts/login/?next=/controller/"


def test_isolate_and_unisolate_are_both_reachable(group, operator):
    isolate = reverse("dashboards:isolate", args=["g1"])
    assert post(operator, isolate, {"brokerId": 2, "isolated": True})[1]["after"] == {"isolated": True}
    page = operator.get(reverse("dashboards:group", args=["g1"])).content.decode()
    assert '<button type="button" id="unisolate-2" class="small" data-broker-id="2" data-isolate="false">' in page
    assert 'id="isolate-2" class="danger small" data-broker-id="2" data-isolate="true" hidden>' in page
    assert post(operator, isolate, {"brokerId": 2, "isolated": False})[1]["after"] == {"isolated": False}
    assert [a.action for a in OperatorAction.objects.order_by("id")] == ["isolate", "unisolate"]


def test_the_group_page_shows_the_headroom_and_the_drills(group, operator):
    page = operator.get(reverse("dashboards:group", args=["g1"])).content.decode()
    headroom = page.split('<div id="headroom"')[1].split("</div></dd></div>")[0]
    assert 'data-losses="1" data-writes="taken"' in headroom
    assert '<span class="big">1</span> more replica loss before writes stop' in headroom
    assert "defaults, the master has not reported" in headroom
    assert 'id="drill-button"' in page and 'id="drills"' in page and "No drill yet." in page
    Drill.objects.create(
        cluster_name="c1", broker_name="g1", actor="ops", from_broker_id=1, to_broker_id=2, old_epoch=1, new_epoch=2,
        rto_ms=1234, data_at_risk_bytes=0, data_lost_bytes=0, outcome="ok", detail="replica 2 serves g1",
    )  # fmt: skip
    page = client_for("viewer", operator=False).get(reverse("dashboards:group", args=["g1"])).content.decode()
    row = page.split('<tr data-drill-id="')[1].split("</tr>")[0]
    assert "1 → <b>2</b>" in row and '<td class="num">1\u202f234</td>' in row and '<span class="ok">ok</span>' in row
    assert 'id="drill-button"' not in page


def test_drills_are_for_operators_and_refused_with_the_reason(group, operator):
    url = reverse("dashboards:drill", args=["g1"])
    viewer = client_for("viewer", operator=False)
    assert post(viewer, url, {"preview": True}) == (403, {"detail": "operators only"})
    assert post(viewer, url, {}) == (403, {"detail": "operators only"})
    r = Client().post(url, "{}", content_type="application/json")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    assert post(operator, url, {"brokerId": "two", "preview": True})[1]["fields"] == {
        "brokerId": [f"must be an integer from 0 to {2**63 - 1}"]
    }
    status, answer = post(operator, url, {"brokerId": 3, "preview": True})
    assert status == 409 and "not in the SyncStateSet" in answer["detail"]
    status, answer = post(operator, url, {"brokerId": 1})
    assert status == 400 and answer["fields"] == {"brokerId": ["replica 1 is already the master of g1"]}
    # No broker runs behind the metadata: nothing registered with the nameserver to switch over.
    status, answer = post(operator, url, {"preview": True})
    assert status == 409 and "not registered with the nameserver" in answer["detail"]
    assert post(operator, reverse("dashboards:drill", args=["nope"]), {"preview": True})[0] == 404
    assert ReplicaGroup.objects.get(broker_name="g1").master_broker_id == 1
    assert not Drill.objects.exists() and OperatorAction.objects.count() == 0
