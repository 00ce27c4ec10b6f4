"""A broker's page on the dashboard over real Postgres and Redis, from its status report stored as the
frame handler stores it: status and configuration (dynamic keys marked, editable by operators only),
the config change (CSRF, field errors for keys a running broker cannot change; with no broker to
carry it out, a clear refusal and nothing recorded), and the Brokers page's link to it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.models import OperatorAction
from tests.dashboards.admin_helpers import client_for, post, register_set, report

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A = "127.0.0.1:10911"
PAGE = reverse("dashboards:broker", args=["a", 0])
CONFIG = reverse("dashboards:broker-config", args=["a", 0])


@pytest.fixture
def broker(db):
    register_set("c1", "a", 0, A)
    report("a", 0, A)


@pytest.fixture
def operator(db) -> Client:
    return client_for("ops", operator=True)


def test_the_broker_page_shows_status_and_config_and_only_operators_edit(broker, operator):
    viewer = client_for("viewer", operator=False)
    page = viewer.get(PAGE).content.decode()
    assert '<tr data-key="role"><th>role</th><td>SYNC_MASTER</td></tr>' in page
    assert '<tr data-key="metaMode"><th>consumer metadata</th><td>WRITER</td></tr>' in page
    assert '<span class="ok">alive</span>' in page and "0 – 4\u202f096" in page
    assert '<tr data-key="retryMaxTimes" class="dynamic"><td><code>retryMaxTimes</code> <b>dynamic</b>' in page
    assert '<tr data-key="listenPort"><td><code>listenPort</code></td>' in page
    assert "<input" not in page.split("</header>")[1] and 'id="config-form"' in page
    page = operator.get(PAGE).content.decode()
    assert '<input name="retryMaxTimes"' in page and '<input name="listenPort"' not in page
    assert 'name="csrf-token"' in page and CONFIG in page
    assert operator.get(reverse("dashboards:broker", args=["a", 7])).status_code == 404
    assert operator.get(reverse("dashboards:broker", args=["nope", 0])).status_code == 404
    r = Client().get(PAGE)
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    brokers = viewer.get(reverse("dashboards:brokers")).content.decode()
    assert '<a href="/brokers/a/0/">status</a>' in brokers


def test_config_changes_are_for_operators_with_the_csrf_token(broker):
    viewer = client_for("viewer", operator=False)
    body = {"updates": {"retryMaxTimes": "3"}, "preview": True}
    assert post(viewer, CONFIG, body) == (403, {"detail": "operators only"})
    r = Client().post(CONFIG, "{}", content_type="application/json")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    strict = client_for("root", operator=True, enforce_csrf=True)
    assert strict.post(CONFIG, body, content_type="application/json").status_code == 403
    strict.get(PAGE)
    assert post(strict, CONFIG, body, HTTP_X_CSRFTOKEN=strict.cookies["csrftoken"].value)[0] == 503


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {"updates"}),
        ({"updates": []}, {"updates"}),
        ({"updates": {"retryMaxTimes": "1\n2"}}, {"updates"}),
        ({"updates": {"listenPort": "10999"}}, {"updates"}),
        ({"updates": {"noSuchKey": "1"}}, {"updates"}),
        ({"updates": {"retryMaxTimes": "3"}, "preview": "no"}, {"preview"}),
    ],
)
def test_bad_config_input_is_a_400_with_field_errors(broker, operator, body, fields):
    status, answer = post(operator, CONFIG, body)
    assert status == 400 and answer["detail"] == "invalid input" and set(answer["fields"]) == fields, answer
    assert OperatorAction.objects.count() == 0


def test_why_a_key_is_refused_is_said_per_key(broker, operator):
    fields = post(operator, CONFIG, {"updates": {"listenPort": "1", "noSuchKey": "1"}})[1]["fields"]["updates"]
    assert fields == {
        "listenPort": ["not a key a running broker can change (restart with it in broker.conf)"],
        "noSuchKey": ["unknown broker.conf key"],
    }


def test_a_change_no_broker_answers_is_refused_clearly_and_changes_nothing(broker, operator):
    status, answer = post(operator, CONFIG, {"updates": {"retryMaxTimes": "3"}, "preview": True})
    assert status == 503 and "did not answer" in answer["detail"] and "nothing was changed" in answer["detail"]
    assert post(operator, CONFIG, {"updates": {"retryMaxTimes": "3"}})[0] == 503
    assert OperatorAction.objects.count() == 0


STORE = {
    "diskPath": "/data/store",
    "diskTotalBytes": 2 << 30,
    "diskUsedBytes": int(0.872 * (2 << 30)),
    "diskUsedRatio": 87.2,
    "diskMaxUsedSpaceRatio": 75,
    "diskSpaceCleanForciblyRatio": 85,
    "diskSpaceWarningLevelRatio": 90,
    "diskFull": True,
    "retentionMs": 72 * 3_600_000,
    "oldestMessageMs": 1_700_000_000_000,
    "commitLogBytes": 1 << 30,
    "bytesDeletedLastHour": 3 << 26,
    "filesDeletedTotal": 12,
    "bytesDeletedTotal": 12 << 26,
    "writeBytesPerS": 1 << 20,
    "secondsUntilFull": 150.0,
    "futureField": "dropped",
}


def test_the_broker_page_shows_the_disk_against_its_ratios_and_the_retention_horizon(db):
    register_set("c1", "a", 0, A)
    queues = [["Orders", 0, 5, 9, 1_700_000_100_000], ["Orders", 1, 2, 9, 1_700_000_050_000], ["Empty", 0, 0, 0, None]]
    stored = report("a", 0, A, store=STORE, queues=queues)
    assert "futureField" not in stored["status"]["store"]
    page = client_for("viewer", operator=False).get(PAGE).content.decode()
    assert 'style="width: 87.2%"' in page and 'style="left: 85%"' in page and 'class="disk-bar full"' in page
    assert '<b data-field="ratio">87.2 %</b> of 2.0 GiB' in page
    assert "yes: sends are refused until use is back at 85 %" in page
    assert "3 d 0 h" in page  # the retention, 72 h
    assert "2023-11-14 22:13:20 UTC" in page  # the oldest message kept
    assert '<span data-field="lastHour">192.0 MiB</span> in the last hour · 12 files, 768.0 MiB since start' in page
    assert '<span data-field="untilFull">2 min 30 s</span> at 1.0 MiB/s' in page
    # per topic: the oldest of its queues' first messages; a topic with no message kept is left out
    assert '<tr data-topic="Orders"><td>Orders</td><td>2023-11-14 22:14:10</td></tr>' in page
    assert 'data-topic="Empty"' not in page


def test_a_broker_that_reports_no_store_figures_shows_no_disk_section(broker):
    page = client_for("viewer", operator=False).get(PAGE).content.decode()
    assert "broker-disk" not in page and "<h2>Configuration" in page


def test_a_malformed_store_figure_refuses_the_report(db):
    from mqrules import validation as v
    from nameserver.core.broker_status import parse_report

    with pytest.raises(v.Invalid) as refused:
        parse_report(
            {
                "clusterName": "c1",
                "brokerName": "a",
                "brokerId": 0,
                "brokerAddr": A,
                "status": {"store": {"diskUsedRatio": "full"}},
                "config": {},
                "dynamicKeys": [],
                "queues": [],
                "offsets": [],
            }
        )
    assert "store" in refused.value.fields["status"]
