"""The results page in a real browser (Debian's Chromium through Playwright) against a real server:
the three plotly charts draw from our own static plotly.js, the findings table links to the replica
group, and an operator's "Run audit now" shows the queued run's progress."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import sync_playwright

from audits.models import AuditRun
from testkit import browser as browsers
from tests.procs import ARTIFACTS, uvicorn_server

from .test_runs import finished_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_the_results_page_draws_its_charts_and_starts_a_run_in_a_browser():
    finished_run()
    user = User.objects.create_user("opal", password="opal-password-1")
    user.groups.add(Group.objects.get_or_create(name="operators")[0])
    ARTIFACTS.mkdir(exist_ok=True)
    with uvicorn_server() as base, sync_playwright() as pw:
        browser = browsers.launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            external = []
            page.on("request", lambda r: external.append(r.url) if not r.url.startswith(base) else None)
            page.goto(f"{base}/audits/")
            page.fill("input[name=username]", "opal")
            page.fill("input[name=password]", "opal-password-1")
            page.click("button[type=submit], input[type=submit]")
            page.wait_for_url(f"{base}/audits/")
            for chart in ("chart-rollbacks", "chart-top-groups", "chart-messages-again"):
                page.wait_for_selector(f"#{chart} .main-svg", timeout=15_000)
            assert page.locator("#chart-top-groups .ytick text").all_text_contents() == ["billing", "orders"]
            assert page.locator("#findings tbody tr").count() == 3
            assert page.locator("#findings tbody tr").first.locator("a").first.get_attribute("href") == "/groups/rg-a/"
            page.screenshot(path=str(ARTIFACTS / "audits-results.png"), full_page=True)

            page.click("#run-now")
            page.wait_for_selector("#run-progress")
            assert "queued" in page.locator("#active-run").inner_text()
            assert page.locator("#run-now").is_disabled()
            assert external == [], external  # no CDN, nothing from outside
        finally:
            browser.close()
    run = AuditRun.objects.get(trigger="operator")
    assert run.requested_by == "user:opal"
