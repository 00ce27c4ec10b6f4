"""The Messages and Dead letters pages in headless Chromium (Playwright, Debian's /usr/bin/chromium) against
a live control plane and a real broker: an operator searches a topic by key, opens the message (its body,
properties, and its trace: consumed by one group, dead in another's DLQ), then on the Dead letters page
selects the dead letter, previews the resend and resends it, once, audited. Screenshots go to
test-artifacts/dashboard/."""

from __future__ import annotations

import signal

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq import Message as ClientMessage

from controlplane.models import ApiToken, OperatorAction
from testkit import browser as browsers
from tests.dashboards.admin_helpers import OPERATOR_LOGIN, browser_users
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_message_query import MAX_TIMES, consume, single_broker
from tests.procs import ARTIFACTS, create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

CLUSTER = "web"
BODY = b'{"order": 7, "state": "paid"}'


def send_one(config: ClientConfiguration, key: str) -> str | None:
    """The message's id, or None while the topic does not take sends yet."""
    producer = Producer(config, ("Orders",))
    try:
        producer.startup()
        msg = ClientMessage()
        msg.topic, msg.body, msg.tag = "Orders", BODY, "paid"
        msg.keys = key
        return producer.send(msg).message_id
    except Exception:
        return None
    finally:
        producer.shutdown()


def test_search_by_key_open_the_message_see_its_trace_and_resend_it_from_the_dlq_page(tmp_path):
    browser_users()
    token = ApiToken.issue("web-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('web-admin', 'admin')[1]}"}
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    with uvicorn_server() as base:
        ports, proc = single_broker(tmp_path, base, token, CLUSTER, retryMaxTimes=MAX_TIMES)
        try:
            rest = httpx.Client(base_url=f"{base}/api/v1", headers=admin, timeout=30)
            wait_for(lambda: CLUSTER in rest.get("/nameserver/cluster-info").text, 30, "the broker registered")
            create_topic(base, admin, "Orders", 1, clusterName=CLUSTER)
            config = ClientConfiguration(f"127.0.0.1:{ports.grpc}", Credentials())
            sent: list[str] = []
            wait_for(lambda: sent.append(send_one(config, "order-7")) or sent[-1], 30, "the topic taking sends")
            message_id = sent[-1]
            consume(config, "shipping", "Orders", message_id, 1, ack_last=True)
            consume(config, "audit", "Orders", message_id, MAX_TIMES + 1, ack_last=False)
            dlq = f"/clusters/{CLUSTER}/dlq/audit"
            wait_for(lambda: rest.get(dlq).json()["messages"], 90, "the audit group's dead letter")

            with sync_playwright() as pw:
                browser = browsers.launch(pw)
                try:
                    page = browser.new_page()
                    browsers.log_in(page, base, *OPERATOR_LOGIN)
                    page.click("header nav >> text=Messages")
                    search = page.locator("#message-search")
                    search.locator("input[name=topic]").fill("Orders")
                    search.locator("input[name=key]").fill("order-7")
                    search.locator("button[type=submit]").click()
                    results = page.locator("#message-results")
                    expect(results).to_contain_text(message_id)
                    page.screenshot(path=str(shots / "messages-search.png"), full_page=True)

                    results.locator("tbody tr a").first.click()
                    expect(page.locator("#message-body")).to_contain_text('"state": "paid"')
                    expect(page.locator("#message-properties")).to_contain_text("order-7")
                    expect(page.locator('section.trace[data-group="shipping"] .consumed')).to_have_text("consumed")
                    expect(page.locator('section.trace[data-group="audit"] .consumed')).to_have_text("dead")
                    expect(page.locator('section.trace[data-group="audit"] table.deliveries tbody tr')).to_have_count(
                        MAX_TIMES + 1
                    )
                    page.screenshot(path=str(shots / "message-trace.png"), full_page=True)

                    page.click("header nav >> text=Dead letters")
                    page.locator("#dlq-search input[name=group]").fill("audit")
                    page.locator("#dlq-search button[type=submit]").click()
                    row = page.locator("#dead-letters tbody tr").first
                    expect(row).to_contain_text("Orders")
                    row.locator("input[name=msgIds]").check()
                    form = page.locator("#dlq-resend")
                    form.locator(".preview-button").click()
                    result = form.locator(".admin-result")
                    expect(result).to_contain_text("1 message(s) would be resent; nothing sent yet")
                    page.screenshot(path=str(shots / "dlq-preview.png"), full_page=True)
                    form.locator(".apply-button").click()
                    expect(result).to_contain_text("resent 1 message(s)")
                    expect(result.locator("table.dlq-resent")).to_contain_text("Orders")
                    expect(page.locator("#dlq-export")).to_be_visible()
                finally:
                    browser.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    # The preview wrote nothing: one record, of the resend.
    (record,) = OperatorAction.objects.filter(action="dlq_resend")
    assert record.actor == OPERATOR_LOGIN[0] and record.result == "ok" and record.cluster_name == CLUSTER
    assert len(record.after["resent"]) == 1 and record.after["resent"][0][3] is False
