"""Debian's Chromium under Playwright, launched one way for every browser test.

The browser is never Playwright's own download: ``make test`` (controlplane/doctor.py) installs Debian's
``chromium`` package or stops with one line saying to. A missing browser here is a failure, not a skip.
"""

from __future__ import annotations

from typing import Any

from controlplane.doctor import CHROMIUM

# Without the background-networking flags Chromium keeps calling home, and this machine refuses that.
ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def launch(pw: Any) -> Any:
    """A headless browser from a started ``sync_playwright()``; the caller closes it."""
    if not CHROMIUM.exists():
        raise AssertionError(f"{CHROMIUM} is missing: run `make doctor` (it installs Debian's chromium package)")
    return pw.chromium.launch(executable_path=str(CHROMIUM), args=list(ARGS))


def log_in(page: Any, base: str, user: str, password: str) -> None:
    """Log ``page`` in to the dashboard at ``base`` through its login form."""
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit], input[type=submit]")
