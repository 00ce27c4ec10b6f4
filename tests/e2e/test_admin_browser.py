"""The dashboard's administration in headless Chromium (Playwright, Debian's /usr/bin/chromium) against a
live control plane with two real controller-mode brokers: every new button clicked once.

An operator creates, updates and deletes a topic (each previewed first), reads the controller page,
changes a dynamic key of the running master (previewed, then applied by the broker), sees the group's
headroom, previews a refused metadata clean-up, runs a failover drill and sees its RTO, isolates and
un-isolates a broker both ways without a reload, and watches a consumer group's lag chart fill; its
offset reset, on a broker set with no broker behind it (its report stored as the frame handler stores
one), shows the clear refusal. A viewer sees none of the buttons, and the drill endpoint refuses it.
Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from controlplane.models import ApiToken, Drill, OperatorAction
from testkit import browser as browsers
from tests.dashboards.admin_helpers import OPERATOR_LOGIN, VIEWER_LOGIN, browser_users, report
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import group_views, start_in_sync, two_replicas
from tests.e2e.test_replication import stop_all
from tests.nameserver.helpers import NS, register_body
from tests.procs import ARTIFACTS, create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

GHOST = "127.0.0.1:29911"  # a broker set registered over REST, with no broker process behind it


def test_an_operator_clicks_every_admin_button_and_a_viewer_is_refused(tmp_path):
    token = ApiToken.issue("admin-browser-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('admin-browser-admin', 'admin')[1]}"}
    browser_users()
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    with uvicorn_server() as base:
        replicas = two_replicas(tmp_path, base, token, brokerStatusReportInterval=300)
        info, master_of = group_views(base, admin, replicas)

        def reports() -> list[dict]:
            r = httpx.get(f"{base}/api/v1/nameserver/brokers/status", params={"brokerName": "group-a"}, headers=admin, timeout=5)
            return r.json()["brokers"] if r.status_code == 200 else []

        try:
            before, master, slave = start_in_sync(replicas, info, master_of)
            slave_id = next(i for i in before["syncStateSet"] if i != before["masterBrokerId"])
            wait_for(
                lambda: any(r["brokerId"] == 0 and r["status"].get("metaMode") == "WRITER" for r in reports()),
                30,
                "the master's report, as broker 0",
            )
            # The ghost set: registered, its topic routed, a consumer group in its (stored) report.
            r = httpx.post(
                f"{base}{NS}/brokers/register",
                headers={"Authorization": f"Bearer {token}"},
                json=register_body(0, GHOST, name="ghost", cluster="ghost", topics={}, timeout=600_000),
                timeout=10,
            )
            assert r.status_code == 200, r.text
            create_topic(base, admin, "Ghosted", 2, brokerNames=["ghost"])
            report(
                "ghost",
                0,
                GHOST,
                cluster="ghost",
                queues=[["Ghosted", 0, 0, 30], ["Ghosted", 1, 0, 20]],
                offsets=[["billing", "Ghosted", 0, 10], ["billing", "Ghosted", 1, 20]],
            )
            with sync_playwright() as pw:
                browser = browsers.launch(pw)
                try:
                    page = browser.new_page()
                    browsers.log_in(page, base, *OPERATOR_LOGIN)

                    # --- a topic: created, updated, deleted, each previewed ---------------------------
                    page.goto(f"{base}/topics/")
                    form = page.locator("#topic-form")
                    form.locator("input[name=topicName]").fill("Browsed")
                    form.locator("input[name=readQueueNums]").fill("4")
                    form.locator("input[name=writeQueueNums]").fill("4")
                    form.locator("select[name=messageType]").select_option("FIFO")
                    form.locator("select[name=clusterName]").select_option("repl")
                    form.locator(".preview-button").click()
                    result = form.locator(".admin-result")
                    expect(result).to_contain_text("preview of Browsed: nothing changed yet")
                    expect(result.locator("table.topic-changes")).to_contain_text("group-a")
                    page.screenshot(path=str(shots / "admin-topic-preview.png"), full_page=True)
                    form.locator(".apply-button").click()
                    expect(result).to_contain_text("done: Browsed created on group-a")
                    page.goto(f"{base}/topics/Browsed/")
                    expect(page.locator("#queue-datas")).to_contain_text("FIFO")
                    form = page.locator("#topic-form")
                    form.locator("input[name=readQueueNums]").fill("2")
                    form.locator(".preview-button").click()
                    expect(form.locator(".admin-result")).to_contain_text("queues 2–3 are no longer read")
                    form.locator(".apply-button").click()
                    expect(form.locator(".admin-result")).to_contain_text("done: Browsed updated on group-a")
                    page.goto(f"{base}/topics/Browsed/")
                    expect(page.locator('#queue-datas tr[data-broker-name="group-a"]')).to_contain_text("2")
                    delete = page.locator("#topic-delete")
                    expect(delete.locator(".apply-button")).to_be_disabled()
                    delete.locator(".preview-button").click()
                    expect(delete.locator(".admin-result")).to_contain_text("deleting Browsed everywhere would remove")
                    expect(delete.locator(".admin-result")).to_contain_text("4 queues on group-a")
                    page.screenshot(path=str(shots / "admin-topic-delete-preview.png"), full_page=True)
                    delete.locator(".apply-button").click()
                    expect(delete.locator(".admin-result")).to_contain_text("deleted Browsed everywhere")
                    # The brokers' own topic, with the min / max offsets they report.
                    page.goto(f"{base}/topics/Replicated/")
                    expect(page.locator('#queue-offsets tr[data-broker-name="group-a"]')).to_have_count(4)

                    # --- the controller page ------------------------------------------------------------
                    page.click("header nav >> text=Controller")
                    expect(page.locator("#controller-metadata")).to_contain_text("postgres")
                    expect(page.locator('#controller-groups tr[data-broker-name="group-a"]')).to_contain_text(
                        str(before["masterBrokerId"])
                    )
                    page.screenshot(path=str(shots / "admin-controller.png"), full_page=True)

                    # --- a dynamic key of the running master, applied by the broker ----------------
                    page.goto(f"{base}/brokers/group-a/0/")
                    expect(page.locator('#broker-status tr[data-key="metaMode"]')).to_contain_text("WRITER")
                    config = page.locator("#config-form")
                    config.locator("input[name=retryMaxTimes]").fill("5")
                    config.locator(".preview-button").click()
                    expect(config.locator(".admin-result")).to_contain_text("preview: nothing changed yet")
                    expect(config.locator("table.config-changes")).to_contain_text("retryMaxTimes")
                    config.locator(".apply-button").click()
                    expect(config.locator(".admin-result")).to_contain_text("done: applied and written to broker.conf")
                    expect(page.locator('#broker-config tr[data-key="retryMaxTimes"] [data-field="value"]')).to_have_text("5")
                    assert "retryMaxTimes=5" in master.conf.read_text()
                    page.screenshot(path=str(shots / "admin-broker-config.png"), full_page=True)

                    # --- the group: headroom, a refused clean-up, a drill, isolation both ways ----
                    page.goto(f"{base}/groups/group-a/")
                    expect(page.locator("#headroom")).to_contain_text("more replica loss before writes stop")
                    page.click("#clean-button")
                    page.check(f'#clean-options input[value="{slave_id}"]')
                    expect(page.locator("#clean-preview")).to_contain_text("still alive")
                    expect(page.locator("#confirm-action")).to_be_disabled()
                    page.click("#cancel-action")

                    page.click("#drill-button")
                    expect(page.locator("#drill-preview")).to_contain_text(f"Replica {slave_id}")
                    expect(page.locator("#drill-preview")).to_contain_text("Data at risk")
                    page.screenshot(path=str(shots / "admin-drill-preview.png"), full_page=True)
                    page.click("#confirm-action")
                    expect(page.locator("#action-result")).to_contain_text("drill ok: RTO", timeout=30_000)
                    expect(page.locator("#drills tbody tr").first).to_contain_text(f"→ {slave_id}")
                    expect(page.locator("#master-id")).to_have_text(str(slave_id), timeout=5000)
                    page.screenshot(path=str(shots / "admin-drill-done.png"), full_page=True)

                    old_master = before["masterBrokerId"]
                    page.click(f"#isolate-{old_master}")
                    page.click("#confirm-action")
                    expect(page.locator(f"#unisolate-{old_master}")).to_be_visible()
                    expect(page.locator(f"#isolate-{old_master}")).to_be_hidden()
                    page.click(f"#unisolate-{old_master}")
                    page.click("#confirm-action")
                    expect(page.locator(f"#isolate-{old_master}")).to_be_visible()
                    expect(page.locator(f"#unisolate-{old_master}")).to_be_hidden()

                    # --- consumers: the list, a group's live lag, a reset no broker answers ---------
                    page.click("header nav >> text=Consumers")
                    expect(page.locator('#consumers tr[data-group="billing"]')).to_contain_text("Ghosted")
                    page.click('#consumers tr[data-group="billing"] a')
                    expect(page.locator("#group-lag")).to_have_text("20")
                    expect(page.locator("#lag-chart .main-svg").first).to_be_attached(timeout=10_000)
                    wait_for(lambda: int(page.locator("#lag-chart").get_attribute("data-points") or 0) >= 2, 10, "polled points")
                    reset = page.locator("#reset-form")
                    reset.locator("input[value=offset]").check()
                    reset.locator("input[name=offset]").fill("0")
                    reset.locator(".preview-button").click()
                    expect(reset.locator(".admin-result")).to_contain_text("refused (HTTP 503)")
                    expect(reset.locator(".admin-result")).to_contain_text("nothing was reset")
                    expect(reset.locator(".apply-button")).to_be_disabled()
                    page.screenshot(path=str(shots / "admin-consumer-group.png"), full_page=True)

                    # --- a viewer: no buttons, and the endpoint refuses it ----------------------------
                    viewer = browser.new_page()
                    browsers.log_in(viewer, base, *VIEWER_LOGIN)
                    viewer.goto(f"{base}/groups/group-a/")
                    expect(viewer.locator("#headroom")).to_be_visible()
                    expect(viewer.locator("#drills tbody tr").first).to_contain_text(f"→ {slave_id}")
                    expect(viewer.locator("#drill-button")).to_have_count(0)
                    viewer.goto(f"{base}/consumers/billing/")
                    expect(viewer.locator("#reset-form")).to_have_count(0)
                    viewer.goto(f"{base}/topics/")
                    expect(viewer.locator("#topic-form")).to_have_count(0)
                    status = viewer.evaluate(
                        """async () => {
                            const csrf = document.cookie.split("; ").find((c) => c.startsWith("csrftoken=")).split("=")[1];
                            const r = await fetch("/groups/group-a/drill", {method: "POST", credentials: "same-origin",
                                headers: {"Content-Type": "application/json", "X-CSRFToken": csrf}, body: "{}"});
                            return [r.status, (await r.json()).detail];
                        }"""
                    )
                    assert status == [403, "operators only"]
                    viewer.screenshot(path=str(shots / "admin-viewer.png"), full_page=True)
                finally:
                    browser.close()
        finally:
            stop_all(*replicas)
    # (Django's ORM only outside Playwright's event loop)
    assert Drill.objects.get().outcome == "ok"
    actions = list(OperatorAction.objects.filter(actor="ops").order_by("id").values_list("action", "result"))
    assert actions == [
        ("update_topic", "ok"),
        ("update_topic", "ok"),
        ("delete_topic", "ok"),
        ("update_broker_config", "ok"),
        ("failover_drill", "ok"),
        ("isolate", "ok"),
        ("unisolate", "ok"),
    ]
