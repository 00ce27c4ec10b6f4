"""Topic administration on the dashboard (dashboards/topic_admin.py) over real Postgres and Redis:
create and update with a preview that changes nothing and names what a change puts at risk, delete
with a preview of the queues, messages and consumer groups that go; operators only (a viewer gets
403, an anonymous user the login page), CSRF, field errors, and every applied change in the audit log."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.models import OperatorAction
from nameserver import selectors as ns
from nameserver import services as nameserver
from nameserver.models import TopicQueue
from tests.dashboards.admin_helpers import RW, client_for, post, register_set

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

UPDATE = reverse("dashboards:update-topic")


def delete_url(topic: str) -> str:
    return reverse("dashboards:delete-topic", args=[topic])


@pytest.fixture
def sets(db):
    """Cluster c1 with broker sets a and b, cluster c2 with c; topic Orders (4 queues) on a and b."""
    register_set("c1", "a", 0, "127.0.0.1:10911")
    register_set("c1", "b", 0, "127.0.0.1:10921")
    register_set("c2", "c", 0, "127.0.0.1:10931")
    nameserver.create_or_update_topic("Orders", read_queue_nums=4, write_queue_nums=4, perm=RW, broker_names=["a", "b"])


@pytest.fixture
def operator(db) -> Client:
    return client_for("ops", operator=True)


def queues(topic: str) -> dict[str, tuple[int, int, int, dict]]:
    return {
        q.group.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm, q.attributes)
        for q in TopicQueue.objects.filter(topic=topic).select_related("group")
    }


def test_viewers_get_403_and_anonymous_users_the_login_page(sets):
    viewer = client_for("viewer", operator=False)
    body = {"topicName": "New", "clusterName": "c1"}
    assert post(viewer, UPDATE, body) == (403, {"detail": "operators only"})
    assert post(viewer, delete_url("Orders"), {}) == (403, {"detail": "operators only"})
    anonymous = Client()
    for url in (UPDATE, delete_url("Orders")):
        r = anonymous.post(url, "{}", content_type="application/json")
        assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    assert set(queues("Orders")) == {"a", "b"} and not queues("New")
    assert OperatorAction.objects.count() == 0
    # The pages show no form to a viewer; an operator gets both forms on the topic's page.
    assert 'id="topic-form"' not in viewer.get(reverse("dashboards:topics")).content.decode()
    page = viewer.get(reverse("dashboards:topic", args=["Orders"])).content.decode()
    assert 'id="topic-form"' not in page and 'id="topic-delete"' not in page and 'id="queue-datas"' in page
    page = client_for("ops", operator=True).get(reverse("dashboards:topic", args=["Orders"])).content.decode()
    assert 'id="topic-form"' in page and 'id="topic-delete"' in page and 'name="csrf-token"' in page


def test_topic_actions_need_the_csrf_token(sets):
    strict = client_for("root", operator=True, enforce_csrf=True)
    body = {"topicName": "New", "clusterName": "c1"}
    assert strict.post(UPDATE, body, content_type="application/json").status_code == 403
    assert strict.post(delete_url("Orders"), {}, content_type="application/json").status_code == 403
    assert not queues("New") and set(queues("Orders")) == {"a", "b"}
    strict.get(reverse("dashboards:topics"))  # the page sets the cookie
    token = strict.cookies["csrftoken"].value
    assert post(strict, UPDATE, body, HTTP_X_CSRFTOKEN=token)[0] == 200
    assert set(queues("New")) == {"a", "b"}


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"clusterName": "c1"}, {"topicName"}),
        ({"topicName": "bad name!", "clusterName": "c1"}, {"topicName"}),
        ({"topicName": "T", "clusterName": "c1", "readQueueNums": 0}, {"readQueueNums"}),
        ({"topicName": "T", "clusterName": "c1", "writeQueueNums": "8"}, {"writeQueueNums"}),
        ({"topicName": "T", "clusterName": "c1", "perm": 9}, {"perm"}),
        ({"topicName": "T", "clusterName": "c1", "attributes": {"message.type": "LOUD"}}, {"attributes"}),
        ({"topicName": "T"}, {"clusterName"}),
        ({"topicName": "T", "clusterName": "c1", "brokerNames": ["a"]}, {"clusterName"}),
        ({"topicName": "T", "brokerNames": ["a", "nope"]}, {"brokerNames"}),
        ({"topicName": "T", "clusterName": "c9"}, {"clusterName"}),
        ({"topicName": "T", "clusterName": "c1", "preview": "yes"}, {"preview"}),
    ],
)
def test_bad_topic_input_is_a_400_with_field_errors(sets, operator, body, fields):
    status, answer = post(operator, UPDATE, body)
    assert status == 400 and answer["detail"] == "invalid input", answer
    assert set(answer["fields"]) == fields
    assert not queues("T") and OperatorAction.objects.count() == 0


def test_bad_delete_input_is_a_400_and_an_unknown_topic_a_404(sets, operator):
    for body in ({"brokerNames": []}, {"brokerNames": "a"}, {"brokerNames": ["a b"]}, {"preview": 1}):
        status, answer = post(operator, delete_url("Orders"), body)
        assert status == 400 and answer["detail"] == "invalid input", body
    assert post(operator, delete_url("Orders"), [1]) == (400, {"detail": "the body must be a JSON object"})
    assert post(operator, delete_url("Nope"), {"preview": True})[0] == 404
    assert post(operator, delete_url("Orders"), {"brokerNames": ["c"]})[0] == 404  # not there
    assert set(queues("Orders")) == {"a", "b"} and OperatorAction.objects.count() == 0


def test_create_previews_then_applies_on_a_cluster_and_is_audited(sets, operator):
    body = {"topicName": "Payments", "clusterName": "c1", "readQueueNums": 2, "writeQueueNums": 2, "perm": RW}
    status, preview = post(operator, UPDATE, {**body, "attributes": {"message.type": "FIFO"}, "preview": True})
    assert status == 200 and preview["result"] == "preview" and preview["created"] is True
    assert [(c["brokerName"], c["before"], c["after"]["messageType"], c["warnings"]) for c in preview["changes"]] == [
        ("a", None, "FIFO", []),
        ("b", None, "FIFO", []),
    ]
    assert not queues("Payments") and OperatorAction.objects.count() == 0  # a preview changes nothing

    status, done = post(operator, UPDATE, {**body, "attributes": {"message.type": "FIFO"}})
    assert status == 200 and done["result"] == "ok" and done["brokerNames"] == ["a", "b"]
    assert queues("Payments") == {"a": (2, 2, RW, {"message.type": "FIFO"}), "b": (2, 2, RW, {"message.type": "FIFO"})}
    assert ns.topic_route("Payments") is not None
    entry = OperatorAction.objects.get()
    assert (entry.actor, entry.action, entry.cluster_name, entry.broker_name, entry.result) == (
        "ops",
        "update_topic",
        "c1",
        "a,b",
        "ok",
    )
    assert entry.before == {"a": None, "b": None} and entry.after["a"]["readQueueNums"] == 2
    assert entry.params["attributes"] == {"message.type": "FIFO"} and "preview" not in entry.params


def test_an_update_preview_names_what_is_at_risk(sets, operator):
    body = {"topicName": "Orders", "brokerNames": ["a"], "readQueueNums": 2, "writeQueueNums": 2, "perm": 4}
    status, preview = post(operator, UPDATE, {**body, "attributes": {"message.type": "DELAY"}, "preview": True})
    assert status == 200 and preview["created"] is False
    [change] = preview["changes"]
    assert change["before"]["readQueueNums"] == 4 and change["after"]["readQueueNums"] == 2
    warnings = " | ".join(change["warnings"])
    assert "queues 2–3 are no longer read" in warnings
    assert "producers stop writing to queues 2–3" in warnings
    assert "read-only here: sends are refused" in warnings
    assert "message type NORMAL → DELAY" in warnings
    assert queues("Orders")["a"] == (4, 4, RW, {})

    assert post(operator, UPDATE, body)[0] == 200  # the message type is kept when not named
    assert queues("Orders") == {"a": (2, 2, 4, {}), "b": (4, 4, RW, {})}
    entry = OperatorAction.objects.get()
    assert entry.before["a"]["readQueueNums"] == 4 and entry.after["a"]["perm"] == 4


def test_delete_previews_what_goes_then_deletes_on_one_set_then_everywhere(sets, operator):
    status, preview = post(operator, delete_url("Orders"), {"preview": True})
    assert status == 200 and preview["result"] == "preview" and preview["scope"] == "everywhere"
    assert [s["brokerName"] for s in preview["brokerSets"]] == ["a", "b"] and preview["queueCount"] == 8
    assert set(queues("Orders")) == {"a", "b"} and OperatorAction.objects.count() == 0

    status, one = post(operator, delete_url("Orders"), {"brokerNames": ["b"]})
    assert status == 200 and one["scope"] == ["b"] and one["deletedQueueDatas"] == 1
    assert set(queues("Orders")) == {"a"}
    status, rest = post(operator, delete_url("Orders"), {})
    assert status == 200 and rest["deletedQueueDatas"] == 1 and not queues("Orders")
    assert ns.topic_route("Orders") is None
    entries = list(OperatorAction.objects.order_by("id"))
    assert [(e.action, e.broker_name, e.after) for e in entries] == [
        ("delete_topic", "b", {"deletedQueueDatas": 1}),
        ("delete_topic", "a", {"deletedQueueDatas": 1}),
    ]
    assert entries[0].params == {"topic": "Orders", "brokerNames": ["b"]}
    assert post(operator, delete_url("Orders"), {"preview": True})[0] == 404  # nothing left


def test_the_topic_page_shows_its_queue_data_and_the_list_links_to_it(sets, operator):
    page = operator.get(reverse("dashboards:topics")).content.decode()
    assert 'href="/topics/Orders/"' in page and 'id="topic-form"' in page
    assert '<option value="c1">c1</option>' in page and '<option value="a">a (c1)</option>' in page
    page = operator.get(reverse("dashboards:topic", args=["Orders"])).content.decode()
    assert '<tr data-broker-name="a"><td>a</td><td>c1</td><td class="num">4</td>' in page
    assert 'value="Orders" readonly' in page and '<option value="a" selected>' in page
    assert operator.get(reverse("dashboards:topic", args=["Nope"])).status_code == 404
    assert operator.get("/topics/bad%20name/").status_code == 404
