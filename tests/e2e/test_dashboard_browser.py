"""The dashboard in headless Chromium (Playwright, Debian's /usr/bin/chromium) against a live control
plane with two real brokers in controller mode: log in, open the replica group, elect the other
replica and see master and epoch change on the page within 2 s (pushed, not polled), isolate a broker
and see it leave the route, lift it. Then a classic pair with slave-acting-master: kill -9 the master
and see the pages show the acting master the route serves and the slave reports, say so when the
routes stop showing it while the slave still acts, and go back to normal once the master has
returned through pre-online. A screenshot of every page goes to test-artifacts/."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import expect, sync_playwright
from rocketmq.grpc_protocol import definition_pb2 as pb

from controlplane.models import ApiToken
from dashboards.permissions import OPERATORS_GROUP
from testkit import browser as browsers
from tests.e2e.test_acting_master import acting_pair
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_replication import Replica, send, stop_all
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


def test_the_pages_show_the_acting_master_the_route_serves_and_the_broker_reports(tmp_path):
    token = ApiToken.issue("acting-browser-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('acting-browser-admin', 'admin')[1]}"}
    User.objects.create_user("viewer", password="a-long-viewer-password")
    shots = ARTIFACTS / "dashboard-acting"
    shots.mkdir(parents=True, exist_ok=True)
    with uvicorn_server() as base:

        def support_acting_master(on: bool) -> None:
            r = httpx.patch(f"{base}/api/v1/nameserver/config", headers=admin, timeout=5, json={"supportActingMaster": on})
            assert r.status_code == 200, r.text

        def route() -> dict:
            """group-a's entry in the route of Replicated, as clients get it ({} when there is none)."""
            r = httpx.get(f"{base}/api/v1/nameserver/routes/Replicated", headers=admin, timeout=5)
            return r.json()["brokerDatas"][0] if r.status_code == 200 and r.json().get("brokerDatas") else {}

        def member_ids() -> dict[str, int]:
            """address -> nameserver id of group-a's registered members."""
            url = f"{base}/api/v1/nameserver/brokers/member-group"
            r = httpx.get(url, params={"brokerName": "group-a"}, headers=admin, timeout=5)
            return {addr: int(i) for i, addr in r.json()["brokerAddrs"].items()} if r.status_code == 200 else {}

        support_acting_master(True)
        master, slave = acting_pair(tmp_path, base, token, brokerStatusReportInterval=500)
        try:
            master.start()
            slave.start()
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 60, "the master taking writes with its slave")
            wait_for(lambda: len(route().get("brokerAddrs", {})) == 2, 30, "both brokers in the route")
            master_addr, slave_addr = route()["brokerAddrs"]["0"], route()["brokerAddrs"]["1"]
            with sync_playwright() as pw:
                browser = browsers.launch(pw)
                try:
                    context = browser.new_context()  # one session for both pages
                    overview, group = context.new_page(), context.new_page()
                    browsers.log_in(overview, base, "viewer", "a-long-viewer-password")
                    row = overview.locator('tr[data-broker-name="group-a"] [data-field="master"]')
                    badge, group_badge = row.locator(".acting"), group.locator("#acting-master")

                    def shown(agreement: str | None) -> bool:
                        """Both pages, loaded afresh, show this acting-master agreement (None: no badge)."""
                        overview.goto(f"{base}/")
                        group.goto(f"{base}/groups/group-a/")
                        if agreement is None:
                            return badge.count() == 0 and group_badge.is_hidden()
                        return (
                            badge.count() == 1
                            and badge.get_attribute("data-agreement") == agreement
                            and group_badge.get_attribute("data-agreement") == agreement
                        )

                    wait_for(lambda: shown(None), 20, "no acting master while the master serves")
                    expect(row.locator("b")).to_have_text("0")

                    # kill -9: the socket closes, the nameserver unregisters the master at once, the topic
                    # loses write; the route shows the slave as id 0, and the slave's poll makes it act.
                    master.stop(signal.SIGKILL)
                    wait_for(lambda: route().get("actingMaster") is True, 30, "the route showing an acting master")
                    served = route()
                    assert served["brokerAddrs"]["0"] == slave_addr and "1" not in served["brokerAddrs"]
                    acting_id = member_ids()[served["brokerAddrs"]["0"]]
                    wait_for(lambda: shown("agreed"), 30, "both pages showing the slave acting, as routed and reported")
                    for badge_el in (badge, group_badge):
                        assert badge_el.get_attribute("data-broker-id") == str(acting_id)
                        expect(badge_el).to_have_text(f"acting master {acting_id} (read-only)")
                    expect(row.locator(".bad")).to_have_count(0)  # not "no master": the routes have a stand-in
                    expect(group.locator("#master-id")).to_have_text("none")
                    state = json.loads(group.locator("#page-data").text_content())["state"]
                    assert state["actingMaster"]["brokerAddr"] == route()["brokerAddrs"]["0"] == slave_addr
                    assert state["actingMaster"]["reportedMode"] == "ACTING"
                    overview.screenshot(path=str(shots / "overview-acting.png"), full_page=True)
                    group.screenshot(path=str(shots / "group-acting.png"), full_page=True)

                    # The routes stop showing a stand-in (supportActingMaster off); the slave still acts:
                    # the pages say both, not one of them as if it were both.
                    support_acting_master(False)
                    wait_for(lambda: route().get("actingMaster") is False, 10, "the route without an acting master")
                    assert route()["brokerAddrs"] == {"1": slave_addr}
                    wait_for(lambda: shown("routes_not_acting"), 10, "both pages showing the disagreement")
                    text = f"acting master: none in the routes — broker {acting_id} reports acting"
                    expect(badge).to_have_text(text)
                    expect(group_badge).to_have_text(text)
                    expect(row.locator(".bad")).to_have_text("no master")
                    expect(group.locator("#health-reasons")).to_contain_text("no master")
                    group.screenshot(path=str(shots / "group-routes-not-acting.png"), full_page=True)
                    support_acting_master(True)
                    wait_for(lambda: shown("agreed"), 10, "the stand-in routed again")

                    # The master returns: pre-online takes the slave's state back (the slave stops acting),
                    # then it registers; the route and the pages are back to normal.
                    master.start()
                    wait_for(lambda: route().get("brokerAddrs", {}).get("0") == master_addr, 90, "the master back online")
                    assert route()["actingMaster"] is False
                    wait_for(lambda: shown(None), 20, "no acting master once the master serves again")
                    expect(row.locator("b")).to_have_text("0")
                    expect(row.locator(".addr")).to_have_text(master_addr)
                    expect(group.locator("#master-id")).to_have_text("0")
                    assert json.loads(group.locator("#page-data").text_content())["state"]["actingMaster"] is None
                    overview.screenshot(path=str(shots / "overview-back.png"), full_page=True)
                finally:
                    browser.close()
        finally:
            stop_all(master, slave)
