"""The static topics page in headless Chromium (Playwright, Debian's /usr/bin/chromium) against a live
control plane: an operator previews a move (nothing changes), applies it (the epoch moves on, the old
segment is shown sealing, the audit log has it), sees a refused drain with its code; a viewer sees the
mapping but no buttons, and the action endpoint refuses it. Screenshots go to test-artifacts/."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from controlplane.models import ApiToken, OperatorAction
from testkit import browser as browsers
from testkit.static_topics import create, mapping
from tests.dashboards.admin_helpers import OPERATOR_LOGIN, VIEWER_LOGIN, browser_users
from tests.nameserver.helpers import register_over_rest
from tests.procs import ARTIFACTS, create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

SETS = {"page-a": "127.0.0.1:10911", "page-b": "127.0.0.1:10921", "page-c": "127.0.0.1:10931"}


def test_an_operator_previews_and_applies_a_move_and_a_viewer_cannot(tmp_path):
    broker = ApiToken.issue("page-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('page-admin', 'admin')[1]}"}
    browser_users()
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    with uvicorn_server() as base:
        register_over_rest(base, broker, SETS, "page")
        create(base, admin, "Orders", 4, ["page-a", "page-b"])

        def epoch() -> int:
            return mapping(base, admin, "Orders")["epoch"]

        with sync_playwright() as pw:
            browser = browsers.launch(pw)
            try:
                page = browser.new_page()
                browsers.log_in(page, base, *OPERATOR_LOGIN)
                page.goto(f"{base}/static-topics/")
                section = page.locator("section.static-topic[data-topic=Orders]")
                expect(section.locator(".epoch")).to_have_text("1")
                expect(section.locator("tr[data-queue='0']")).to_contain_text("page-a/q0 from 0 · writable")

                section.locator("select[name=kind]").select_option("move")
                section.locator("select[name=queue]").select_option("0")
                section.locator("select[name=broker]").select_option("page-c")
                section.locator("form.remap .preview-button").click()
                result = section.locator(".remap-result")
                expect(result).to_contain_text("preview at epoch 1: nothing changed yet")
                expect(result).to_contain_text("page-a/q0")
                expect(result).to_contain_text("page-c/q0")
                expect(result).to_contain_text("72 h")
                assert epoch() == 1
                page.screenshot(path=str(shots / "static-topics-preview.png"), full_page=True)

                section.locator("form.remap .apply-button").click()
                expect(result).to_contain_text("done: epoch 1 → 2")
                expect(section.locator("tr[data-queue='0']")).to_contain_text("page-a/q0 from 0 · sealing", timeout=10_000)
                expect(section.locator("tr[data-queue='0']")).to_contain_text("page-c/q0 from ? · writable")
                assert epoch() == 2
                page.screenshot(path=str(shots / "static-topics-applied.png"), full_page=True)

                # A drain preview of page-b (its queues go to the other writers); then a second move of
                # queue 0, not decided yet (no broker is there to seal it), is refused with its code.
                section.locator("select[name=kind]").select_option("drain")
                section.locator("select[name=broker]").select_option("page-b")
                section.locator("form.remap .preview-button").click()
                expect(result).to_contain_text("preview at epoch 2")
                expect(result).to_contain_text("page-b/q0")
                section.locator("select[name=kind]").select_option("move")
                section.locator("select[name=queue]").select_option("0")
                section.locator("select[name=broker]").select_option("page-b")
                section.locator("form.remap .preview-button").click()
                expect(result).to_contain_text("refused: 2101 LOGIC_QUEUE_MIGRATING")
                expect(section.locator("form.remap .apply-button")).to_be_disabled()
                assert epoch() == 2

                viewer = browser.new_page()
                browsers.log_in(viewer, base, *VIEWER_LOGIN)
                viewer.goto(f"{base}/static-topics/")
                expect(viewer.locator("section.static-topic[data-topic=Orders]")).to_contain_text("page-c/q0")
                expect(viewer.locator("form.remap")).to_have_count(0)
                status = viewer.evaluate(
                    """async () => {
                        const csrf = document.cookie.split("; ").find((c) => c.startsWith("csrftoken=")).split("=")[1];
                        const r = await fetch("/static-topics/Orders/migrate", {method: "POST", credentials: "same-origin",
                            headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
                            body: JSON.stringify({moves: [{queueId: 1, brokerName: "page-c"}]})});
                        return [r.status, (await r.json()).detail];
                    }"""
                )
                assert status == [403, "operators only"]
                assert epoch() == 2
                viewer.screenshot(path=str(shots / "static-topics-viewer.png"), full_page=True)
            finally:
                browser.close()
    # (Django's ORM only outside Playwright's event loop)
    assert OperatorAction.objects.filter(action="remap_static_topic", actor="ops").count() == 1


def test_an_operator_adds_queues_makes_a_topic_static_and_deletes_one_each_previewed(tmp_path):
    broker = ApiToken.issue("page2-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('page2-admin', 'admin')[1]}"}
    browser_users()
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    with uvicorn_server() as base:
        register_over_rest(base, broker, SETS, "page")
        create(base, admin, "Orders", 2, ["page-a", "page-b"])
        create_topic(base, admin, "Plain", 2, brokerNames=["page-c"])

        def static_names() -> set[str]:
            r = httpx.get(f"{base}/api/v1/nameserver/static-topics", headers=admin, timeout=5)
            return {m["topic"] for m in r.json()["staticTopics"]}

        with sync_playwright() as pw:
            browser = browsers.launch(pw)
            try:
                page = browser.new_page()
                browsers.log_in(page, base, *OPERATOR_LOGIN)
                page.goto(f"{base}/static-topics/")
                section = page.locator("section.static-topic[data-topic=Orders]")
                change = section.locator("form.static-change")
                result = section.locator(".change-result")
                change.locator("input[name=queueNums]").fill("5")
                change.locator(".preview-button").click()
                expect(result).to_contain_text("preview: Orders would be at epoch 2 with 5 logical queues; nothing changed yet")
                assert mapping(base, admin, "Orders")["epoch"] == 1
                change.locator(".apply-button").click()
                expect(result).to_contain_text("done: Orders is at epoch 2 with 5 logical queues")
                expect(section.locator("tr[data-queue='4']")).to_be_visible(timeout=10_000)
                page.screenshot(path=str(shots / "static-topics-more-queues.png"), full_page=True)

                make = page.locator("#make-static")
                make.locator("input[name=topic]").fill("Plain")
                make.locator(".preview-button").click()
                expect(page.locator("#make-static-result")).to_contain_text("Plain would be at epoch 1 with 2 logical queues")
                assert static_names() == {"Orders"}
                make.locator(".apply-button").click()
                expect(page.locator("#make-static-result")).to_contain_text("done: Plain is at epoch 1")
                expect(page.locator("section.static-topic[data-topic=Plain]")).to_contain_text("page-c/q1", timeout=10_000)

                section = page.locator("section.static-topic[data-topic=Orders]")
                change = section.locator("form.static-change")
                change.locator("select[name=change]").select_option("delete")
                change.locator(".preview-button").click()
                expect(section.locator(".change-result")).to_contain_text("Orders would be deleted")
                assert static_names() == {"Orders", "Plain"}
                change.locator(".apply-button").click()
                expect(section.locator(".change-result")).to_contain_text("Orders is deleted")
                expect(page.locator("section.static-topic[data-topic=Orders]")).to_have_count(0, timeout=10_000)
                assert static_names() == {"Plain"}
            finally:
                browser.close()
    actions = set(OperatorAction.objects.filter(actor="ops").values_list("action", flat=True))
    assert {"resize_static_topic", "make_static_topic", "delete_static_topic"} <= actions
