"""Starting audits and reading results: the REST API (token scopes, 409 while one is active, 400 with
field errors), the results page (login, operators only for "Run audit now", CSRF, the operator audit
log), and plotly.js served from our static files."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test import Client

from audits import services
from audits.models import AuditRun, Finding, RunStatus
from controlplane.models import OperatorAction

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

RUNS = "/api/v1/audits/runs"


def finished_run() -> AuditRun:
    run = AuditRun.objects.create(
        trigger="schedule",
        status=RunStatus.SUCCEEDED,
        active=None,
        progress=1,
        finished_at=datetime.now(UTC),
        events_scanned=1234,
        rollbacks=2,
        messages_again=75,
        beyond_max_offset=1,
        explained_by_reset=0,
    )
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    common = dict(run=run, cluster_name="c1", topic="t1", role="SYNC_MASTER", detected_at=at)
    Finding.objects.create(
        kind="rollback",
        cause="failover_stale_replica",
        consumer_group="orders",
        broker_name="rg-a",
        queue_id=0,
        master_epoch=7,
        broker_id=2,
        source="master_takeover",
        previous_broker_id=1,
        previous_master_epoch=6,
        previous_offset=100,
        offset=40,
        messages_again=60,
        **common,
    )
    Finding.objects.create(
        kind="rollback",
        cause="unknown",
        consumer_group="billing",
        broker_name="rg-b",
        queue_id=1,
        master_epoch=3,
        broker_id=0,
        source="client_commit",
        previous_offset=20,
        offset=5,
        messages_again=15,
        **common,
    )
    Finding.objects.create(
        kind="beyond_max_offset",
        consumer_group="orders",
        broker_name="rg-a",
        queue_id=2,
        master_epoch=7,
        broker_id=2,
        source="client_commit",
        offset=120,
        queue_max_offset=100,
        excess=20,
        event_count=2,
        **common,
    )
    return run


def test_admins_start_a_run_once_at_a_time_and_the_operator_log_says_so(api, read_token, broker_token, anon):
    resp = api.post(RUNS)
    assert resp.status_code == 202, resp.content
    run = resp.json()
    assert (run["status"], run["trigger"], run["requestedBy"]) == ("queued", "api", "token:test-admin")
    again = api.post(RUNS)
    assert again.status_code == 409 and again.json()["code"] == 2 and again.json()["run"]["id"] == run["id"]
    actions = list(OperatorAction.objects.filter(action="start_offset_audit").order_by("id").values_list("result", "actor"))
    assert actions == [("ok", "token:test-admin"), ("already_running", "token:test-admin")]

    for token, code in ((read_token, 403), (broker_token, 403)):
        anon.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert anon.post(RUNS).status_code == code
    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    listed = anon.get(RUNS).json()
    assert listed["activeRunId"] == run["id"] and [r["id"] for r in listed["runs"]] == [run["id"]]
    detail = anon.get(f"{RUNS}/{run['id']}").json()
    assert (detail["status"], detail["stage"], detail["progress"]) == ("queued", "queued", 0.0)
    assert anon.get(f"{RUNS}/999999").status_code == 404
    anon.credentials()
    assert anon.get(RUNS).status_code == 401


def test_a_started_run_is_enqueued_by_task_name_once_committed(api, django_capture_on_commit_callbacks):
    """What a worker would pick up: the run task, by its name, with the run's id (a real Redis queue)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    queue = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] + "celery"
    client.delete(queue)
    with django_capture_on_commit_callbacks(execute=True):
        run_id = api.post(RUNS).json()["id"]
        assert client.llen(queue) == 0  # not before the run's row is committed
    (message,) = [json.loads(m) for m in client.lrange(queue, 0, -1)]
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert (message["headers"]["task"], args, kwargs) == (services.RUN_TASK, [run_id], {})
    client.delete(queue)


def test_findings_are_read_with_a_read_token_and_bad_queries_get_field_errors(anon, read_token):
    run = finished_run()
    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    body = anon.get("/api/v1/audits/findings").json()  # the latest finished run by default
    assert body["run"]["id"] == run.pk and body["run"]["messagesAgain"] == 75
    assert [(f["consumerGroup"], f["kind"], f["messagesAgain"]) for f in body["findings"]] == [
        ("orders", "rollback", 60),
        ("billing", "rollback", 15),
        ("orders", "beyond_max_offset", 0),
    ]
    first = body["findings"][0]
    assert (first["cause"], first["masterEpoch"], first["previousOffset"], first["offset"]) == (
        "failover_stale_replica",
        7,
        100,
        40,
    )
    assert first["historyUrl"] == "/api/v1/controller/history?brokerName=rg-a"
    only = anon.get("/api/v1/audits/findings", {"run": run.pk, "cause": "unknown"}).json()["findings"]
    assert [f["consumerGroup"] for f in only] == ["billing"]
    resp = anon.get("/api/v1/audits/findings", {"run": "x", "kind": "nope", "limit": 0})
    assert resp.status_code == 400 and resp.json()["code"] == 29
    assert set(resp.json()["fields"]) == {"run", "kind", "limit"}
    assert anon.get(RUNS, {"limit": "many"}).json()["fields"] == {"limit": ["A valid integer is required."]}


def login(username: str, *, operator: bool) -> Client:
    user = User.objects.create_user(username, password="pw-" + username)
    if operator:
        user.groups.add(Group.objects.get_or_create(name="operators")[0])
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_the_results_page_needs_a_login_and_shows_charts_and_findings():
    finished_run()
    assert Client().get("/audits/").status_code == 302  # to the login page
    page = login("viewer", operator=False).get("/audits/")
    html = page.content.decode()
    assert page.status_code == 200
    for text in (
        'id="chart-rollbacks"',
        'id="chart-top-groups"',
        'id="chart-messages-again"',
        "failover stale replica",
        "rg-a",
        "100 → 40",
        "beyond max offset",
        'src="/static/js/plotly.min.js"',
        'id="audit-charts"',
        "topGroups",
    ):
        assert text in html, text
    assert "Run audit now" not in html  # viewers do not start audits
    assert "cdn" not in html.lower()


def test_plotly_js_is_served_from_our_static_files():
    resp = Client().get("/static/js/plotly.min.js")
    assert resp.status_code == 200
    assert b"plotly" in b"".join(resp.streaming_content)[:2000].lower()


def test_run_audit_now_needs_an_operator_and_csrf_and_is_logged():
    viewer = login("viewer", operator=False)
    assert viewer.post("/audits/run").status_code == 403  # no CSRF token either way
    operator = login("opal", operator=True)
    page = operator.get("/audits/")
    assert "Run audit now" in page.content.decode()
    assert operator.post("/audits/run").status_code == 403  # CSRF missing
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else operator.cookies["csrftoken"].value
    resp = operator.post("/audits/run", {"csrfmiddlewaretoken": token})
    assert resp.status_code == 302 and resp["Location"] == "/audits/"
    run = AuditRun.objects.get()
    assert (run.trigger, run.requested_by, run.status) == ("operator", "user:opal", "queued")
    action = OperatorAction.objects.get(action="start_offset_audit")
    assert (action.actor, action.result, action.after["runId"]) == ("user:opal", "ok", run.pk)
    page = operator.get("/audits/").content.decode()
    assert f"Run {run.pk}" in page and "disabled" in page  # progress shown; the button waits for the run
    # a viewer's POST with a valid CSRF token is still refused
    viewer_page = viewer.get("/audits/")
    token = viewer.cookies["csrftoken"].value if "csrftoken" in viewer.cookies else viewer_page.cookies["csrftoken"].value
    assert viewer.post("/audits/run", {"csrfmiddlewaretoken": token}).status_code == 403
    assert AuditRun.objects.count() == 1
