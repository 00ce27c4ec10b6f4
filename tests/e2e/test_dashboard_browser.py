"""The dashboard in headless Chromium (Playwright, Debian's /usr/bin/chromium) against a live control
plane with two real brokers in controller mode: log in, open the replica group, elect the other
replica and see master and epoch change on the page within 2 s (pushed, not polled), isolate a broker
and see it leave the route, lift it. A screenshot of every page goes to test-artifacts/."""

from __future__ import annotations

import time

import httpx
import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import expect, sync_playwright

from controlplane.models import ApiToken
from dashboards.permissions import OPERATORS_GROUP
from testkit import browser as browsers
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_replication import Replica, stop_all
from tests.procs import ARTIFACTS, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_an_operator_elects_isolates_and_sees_it_live_in_the_browser(tmp_path):
    token = ApiToken.issue("browser-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('browser-admin', 'admin')[1]}"}
    operator = User.objects.create_user("ops", password="a-long-operator-password")
    operator.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    with uvicorn_server() as base:
        settings = dict(
            enableControllerMode="true",
            brokerHeartbeatInterval=500,
            controllerHeartBeatTimeoutMills=3000,
            checkSyncStateSetPeriod=1000,
            syncBrokerMetadataPeriod=1000,
        )
        replicas = [Replica(tmp_path, name, 0, "SYNC_MASTER", base, token, **settings) for name in ("a", "b")]

        def info() -> dict:
            r = httpx.get(f"{base}/api/v1/controller/groups/group-a/replica-info", headers=admin, timeout=5)
            return r.json() if r.status_code == 200 else {}

        def route_addrs() -> set[str]:
            r = httpx.get(f"{base}/api/v1/nameserver/routes/Replicated", headers=admin, timeout=5).json()
            return set(r["brokerDatas"][0]["brokerAddrs"].values()) if r.get("brokerDatas") else set()

        try:
            for x in replicas:
                x.start()
            wait_for(
                lambda: len(info().get("syncStateSet", [])) == 2 and len(route_addrs()) == 2,
                60,
                "a master with both replicas in sync, both in the route",
            )
            before = info()
            slave_id = next(i for i in before["syncStateSet"] if i != before["masterBrokerId"])
            with sync_playwright() as pw:
                browser = browsers.launch(pw)
                try:
                    page = browser.new_page()
                    page.goto(f"{base}/accounts/login/")
                    page.fill("input[name=username]", "ops")
                    page.fill("input[name=password]", "a-long-operator-password")
                    page.click("button[type=submit], input[type=submit]")
                    expect(page.locator("body")).to_contain_text("group-a")
                    page.screenshot(path=str(shots / "overview.png"), full_page=True)

                    page.goto(f"{base}/groups/group-a/")
                    expect(page.locator("#master-id")).to_have_text(str(before["masterBrokerId"]))
                    expect(page.locator("#master-epoch")).to_have_text(str(before["masterEpoch"]))
                    page.screenshot(path=str(shots / "group.png"), full_page=True)

                    # Elect the other replica, designated; the page learns it over its websocket.
                    page.click("#elect-button")
                    page.select_option("#elect-target", str(slave_id))
                    expect(page.locator("#elect-preview")).to_contain_text(f"Winner: replica {slave_id}")
                    clicked = time.monotonic()
                    page.click("#confirm-action")
                    expect(page.locator("#master-id")).to_have_text(str(slave_id), timeout=2000)
                    expect(page.locator("#master-epoch")).to_have_text(str(before["masterEpoch"] + 1), timeout=2000)
                    print(f"master and epoch changed on the page {time.monotonic() - clicked:.2f} s after the click")
                    expect(page.locator("#action-result")).to_contain_text("done")
                    page.screenshot(path=str(shots / "group-after-elect.png"), full_page=True)
                    old_master = before["masterBrokerId"]
                    old_addr = before["masterAddress"]
                    wait_for(lambda: old_addr in route_addrs(), 30, "the old master back in the route as a slave")

                    # Isolate the old master (now a slave): it leaves the route; then lift it.
                    page.reload()
                    page.click(f"#isolate-{old_master}")
                    page.click("#confirm-action")
                    expect(page.locator("#action-result")).to_contain_text("done")
                    wait_for(lambda: old_addr not in route_addrs(), 5, "the isolated broker leaving the route")
                    page.goto(f"{base}/topics/")
                    expect(page.locator("body")).to_contain_text("Replicated")
                    assert old_addr not in page.locator("body").inner_text()
                    page.screenshot(path=str(shots / "topics-isolated.png"), full_page=True)
                    page.goto(f"{base}/groups/group-a/")
                    page.click(f"#unisolate-{old_master}")
                    page.click("#confirm-action")
                    expect(page.locator("#action-result")).to_contain_text("done")
                    wait_for(lambda: old_addr in route_addrs(), 5, "the broker back in the route")

                    for name in ("brokers", "topics", "config", "audit"):
                        page.goto(f"{base}/{name}/")
                        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
                    expect(page.locator("body")).to_contain_text("isolate")  # the audit log shows the actions
                finally:
                    browser.close()
        finally:
            stop_all(*replicas)
