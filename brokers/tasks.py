"""Stopping background tasks reliably."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(*tasks: asyncio.Task | None) -> None:
    """Cancel the tasks and wait until they are done. Python 3.11's ``asyncio.wait_for`` can swallow
    a cancellation that arrives just as its inner await completes (CPython gh-86296), so a single
    ``cancel()`` may be lost: cancel again until the task really ends."""
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
