"""The Access control page in headless Chromium (Playwright, Debian's /usr/bin/chromium) against a live
control plane: an operator creates a user (previewed, then applied), sees its generated secret key once
with the note to copy it, and never again on the page; then adds a policy entry after its preview, and
the list shows it. Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect, sync_playwright

from controlplane.models import OperatorAction
from nameserver import services as nameserver
from testkit import browser as browsers
from tests.dashboards.admin_helpers import OPERATOR_LOGIN, RW, browser_users, register_set
from tests.procs import ARTIFACTS, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_an_operator_creates_a_user_sees_its_secret_once_and_grants_it_after_a_preview():
    browser_users()
    register_set("acl-c", "acl-a", 0, "127.0.0.1:10911")
    nameserver.create_or_update_topic("Orders", read_queue_nums=2, write_queue_nums=2, perm=RW, broker_names=["acl-a"])
    shots = ARTIFACTS / "dashboard"
    shots.mkdir(parents=True, exist_ok=True)
    with uvicorn_server() as base, sync_playwright() as pw:
        browser = browsers.launch(pw)
        try:
            page = browser.new_page()
            browsers.log_in(page, base, *OPERATOR_LOGIN)
            page.click("header nav >> text=Access control")
            expect(page.locator("#acl-users")).to_contain_text("No user in acl-c yet")

            create = page.locator("#acl-create-user")
            create.locator("input[name=username]").fill("carol")
            create.locator(".preview-button").click()
            result = create.locator(".admin-result")
            expect(result).to_contain_text("preview at version 0: nothing changed yet")
            create.locator(".apply-button").click()
            expect(result).to_contain_text("shown this once: copy it now")
            secret = result.locator("code.secret-key").inner_text()
            assert len(secret) >= 24
            page.screenshot(path=str(shots / "acl-secret-once.png"), full_page=True)
            result.locator("text=Done, show the list").click()
            expect(page.locator('#acl-users tr[data-username="carol"]')).to_contain_text("no policy")
            assert secret not in page.content()

            grant = page.locator("#acl-put-policy")
            grant.locator("select[name=username]").select_option("carol")
            grant.locator("input[name=resources]").fill("Topic:Orders")
            grant.locator("input[name=actions][value=Pub]").check()
            grant.locator(".preview-button").click()
            result = grant.locator(".admin-result")
            expect(result).to_contain_text("preview at version 1: nothing changed yet")
            expect(result).to_contain_text("Locks nobody out")
            page.screenshot(path=str(shots / "acl-policy-preview.png"), full_page=True)
            grant.locator(".apply-button").click()
            expect(result).to_contain_text("done: version 2")
            expect(page.locator('#acl-users tr[data-resource="Topic:Orders"]')).to_contain_text("Pub")  # after the reload
        finally:
            browser.close()
    # The previews wrote nothing: one record per applied change, none of them with the secret.
    assert list(OperatorAction.objects.filter(actor=OPERATOR_LOGIN[0]).values_list("action", flat=True).order_by("id")) == [
        "createUser",
        "createAcl",
    ]
    assert secret not in str(list(OperatorAction.objects.values("params", "before", "after", "detail")))
