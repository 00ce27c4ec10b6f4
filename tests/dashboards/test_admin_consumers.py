"""Consumer progress on the dashboard over real Postgres and Redis, from broker status reports stored
as the frame handler stores them (``nameserver.broker_status.store``): the consumers page (sorted,
searched), a group's page with its queues and the lag chart's JSON, the offset reset (operators only,
CSRF, field errors; with no broker to carry it out, a clear refusal and nothing recorded), and the
topic page's per-queue offsets with the consumer groups a delete would strand."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.models import OperatorAction
from nameserver import services as nameserver
from tests.dashboards.admin_helpers import RW, client_for, post, register_set, report

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A, B = "127.0.0.1:10911", "127.0.0.1:10921"
RESET = reverse("dashboards:reset-offset", args=["billing"])


@pytest.fixture
def progress(db):
    """Sets a and b serve Orders (4 queues each). billing has committed 50 on each queue of a (max
    100, 200, 300, 400: lag 800) and all of b; audit has read a's queue 0 to its end."""
    register_set("c1", "a", 0, A)
    register_set("c1", "b", 0, B)
    nameserver.create_or_update_topic("Orders", read_queue_nums=4, write_queue_nums=4, perm=RW, broker_names=["a", "b"])
    report(
        "a",
        0,
        A,
        queues=[["Orders", q, 0, 100 * (q + 1)] for q in range(4)],
        offsets=[["billing", "Orders", q, 50] for q in range(4)] + [["audit", "Orders", 0, 100]],
    )
    report("b", 0, B, queues=[["Orders", q, 10, 20] for q in range(4)], offsets=[["billing", "Orders", q, 20] for q in range(4)])


@pytest.fixture
def viewer(db) -> Client:
    return client_for("viewer", operator=False)


@pytest.fixture
def operator(db) -> Client:
    return client_for("ops", operator=True)


def rows(page: str, attribute: str = "data-group") -> list[str]:
    return [chunk.split('"')[1] for chunk in page.split(f"<tr {attribute}=")[1:]]


def test_the_consumers_page_lists_every_group_sorted_and_searchable(progress, viewer):
    url = reverse("dashboards:consumers")
    page = viewer.get(url).content.decode()
    assert rows(page) == ["audit", "billing"]
    billing = page.split('<tr data-group="billing">')[1].split("</tr>")[0]
    assert '<a href="/consumers/billing/">billing</a>' in billing and "<td>Orders</td>" in billing
    assert '<td class="num">8</td>' in billing and '<td class="num" data-field="lag">800</td>' in billing
    assert 'id="total-lag">800<' in page
    assert rows(viewer.get(url, {"sort": "lag"}).content.decode()) == ["billing", "audit"]
    assert rows(viewer.get(url, {"q": "BILL"}).content.decode()) == ["billing"]
    assert rows(viewer.get(url, {"q": "orders"}).content.decode()) == ["audit", "billing"]  # by topic too
    assert rows(viewer.get(url, {"q": "nothing"}).content.decode()) == []
    assert rows(viewer.get(url, {"sort": "<script>"}).content.decode()) == ["audit", "billing"]
    r = Client().get(url)
    assert r.status_code == 302 and r["Location"] == "/accounts/login/?next=/consumers/"


def test_a_group_page_shows_each_queue_and_the_chart_reads_its_json(progress, viewer, operator):
    page = viewer.get(reverse("dashboards:consumer-group", args=["billing"])).content.decode()
    assert len(rows(page, "data-key")) == 8
    row = page.split('<tr data-key="Orders/a/3">')[1].split("</tr>")[0]
    assert '"committedOffset">50<' in row and '"maxOffset">400<' in row and '"lag">350<' in row
    assert 'id="lag-chart"' in page and 'id="reset-form"' not in page and '"actions": null' in page
    assert 'id="reset-form"' in operator.get(reverse("dashboards:consumer-group", args=["billing"])).content.decode()
    assert viewer.get(reverse("dashboards:consumer-group", args=["nobody"])).status_code == 404

    url = reverse("dashboards:consumer-progress", args=["billing"])
    assert Client().get(url).status_code == 403
    body = viewer.get(url).json()
    assert body["lag"] == 800 and len(body["queues"]) == 8 and body["atMs"] > 0
    assert body["topics"] == [{"topic": "Orders", "queues": 8, "lag": 800, "stale": False}]
    assert viewer.get(reverse("dashboards:consumer-progress", args=["nobody"])).status_code == 404


def test_reset_is_for_operators_with_the_csrf_token(progress, viewer):
    body = {"topic": "Orders", "offset": 0, "preview": True}
    assert post(viewer, RESET, body) == (403, {"detail": "operators only"})
    r = Client().post(RESET, "{}", content_type="application/json")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    strict = client_for("root", operator=True, enforce_csrf=True)
    assert strict.post(RESET, body, content_type="application/json").status_code == 403
    strict.get(reverse("dashboards:consumer-group", args=["billing"]))
    status, _ = post(strict, RESET, body, HTTP_X_CSRFTOKEN=strict.cookies["csrftoken"].value)
    assert status == 503  # past CSRF and the checks: no broker is there to answer


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"offset": 0}, {"topic"}),
        ({"topic": "Orders"}, {"timestampMs"}),
        ({"topic": "Orders", "timestampMs": 1, "offset": 0}, {"timestampMs"}),
        ({"topic": "Orders", "offset": -2}, {"offset"}),
        ({"topic": "Orders", "timestampMs": "yesterday"}, {"timestampMs"}),
        ({"topic": "Orders", "offset": 0, "preview": "yes"}, {"preview"}),
    ],
)
def test_bad_reset_input_is_a_400_with_field_errors(progress, operator, body, fields):
    status, answer = post(operator, RESET, body)
    assert status == 400 and answer["detail"] == "invalid input" and set(answer["fields"]) == fields, answer
    assert OperatorAction.objects.count() == 0


def test_a_reset_no_broker_answers_is_refused_clearly_and_changes_nothing(progress, operator):
    status, answer = post(operator, RESET, {"topic": "Orders", "timestampMs": 0, "preview": True})
    assert status == 503 and "did not answer" in answer["detail"] and "nothing was reset" in answer["detail"]
    status, answer = post(operator, RESET, {"topic": "Orders", "offset": -1})
    assert status == 503 and "nothing was reset" in answer["detail"]
    assert post(operator, RESET, {"topic": "Nope", "offset": 0})[0] == 404  # no route
    assert OperatorAction.objects.count() == 0  # refused before the record


def test_the_topic_page_shows_queue_offsets_and_the_groups_reading_it(progress, viewer, operator):
    page = viewer.get(reverse("dashboards:topic", args=["Orders"])).content.decode()
    assert len(rows(page, "data-broker-name")) >= 8
    row = page.split('<tr data-broker-name="a" data-queue="3">')[1].split("</tr>")[0]
    assert '<td class="num">0</td><td class="num">400</td><td class="num">400</td>' in row
    assert '<th class="num">1\u202f040</th>' in page  # 100+200+300+400 on a, 4 x 10 on b
    billing = page.split('<tr data-group="billing">')[1].split("</tr>")[0]
    assert '<a href="/consumers/billing/">billing</a>' in billing and '<td class="num">800</td>' in billing
    assert 'id="unreported"' not in page

    status, plan = post(operator, reverse("dashboards:delete-topic", args=["Orders"]), {"preview": True})
    assert status == 200 and plan["messages"] == 1040 and plan["unreported"] == []
    assert len(plan["queues"]) == 8 and plan["queues"][3] == {
        "brokerName": "a",
        "queueId": 3,
        "minOffset": 0,
        "maxOffset": 400,
        "stale": False,
        "messages": 400,
    }
    assert plan["consumerGroups"] == [
        {"group": "audit", "topicLag": 0, "lag": 0},
        {"group": "billing", "topicLag": 800, "lag": 800},
    ]
    status, on_b = post(operator, reverse("dashboards:delete-topic", args=["Orders"]), {"brokerNames": ["b"], "preview": True})
    assert on_b["messages"] == 40 and on_b["consumerGroups"] == [{"group": "billing", "topicLag": 0, "lag": 800}]

    # Fewer read queues strand what the dropped queues hold: the preview counts it.
    body = {"topicName": "Orders", "brokerNames": ["a"], "readQueueNums": 2, "writeQueueNums": 4, "preview": True}
    [change] = post(operator, reverse("dashboards:update-topic"), body)[1]["changes"]
    assert "queues 2–3 are no longer read: what they hold (700 messages)" in change["warnings"][0]


def test_a_group_whose_backlog_is_older_than_the_retention_horizon_is_marked(progress, viewer):
    """Set b's queues now start at 25 (retention deleted below it): billing committed 20 there."""
    report(
        "b",
        0,
        B,
        queues=[["Orders", q, 25, 40, 1_700_000_000_000] for q in range(4)],
        offsets=[["billing", "Orders", q, 20] for q in range(4)],
    )
    page = viewer.get(reverse("dashboards:consumers")).content.decode()
    billing = page.split('<tr data-group="billing">')[1].split("</tr>")[0]
    audit = page.split('<tr data-group="audit">')[1].split("</tr>")[0]
    assert "behind the retention horizon" in billing and "behind-horizon" not in audit
    group = viewer.get(reverse("dashboards:consumer-group", args=["billing"])).content.decode()
    assert 'id="behind-horizon"' in group
    marked = [
        k
        for k in rows(group, "data-key")
        if "behind the retention horizon" in group.split(f'<tr data-key="{k}">')[1].split("</tr>")[0]
    ]
    assert marked == [f"Orders/b/{q}" for q in range(4)]
    row = group.split('<tr data-key="Orders/b/0">')[1].split("</tr>")[0]
    assert '"minOffset">25<' in row
    body = viewer.get(reverse("dashboards:consumer-progress", args=["billing"])).json()
    assert body["behindHorizon"] and sum(q["behindHorizon"] for q in body["queues"]) == 4
