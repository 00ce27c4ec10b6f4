"""Stopping background tasks reliably."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(*tasks: asyncio.Task | None) -> None:
    """Cancel the tasks and wait until they are done. Python 3.11's ``asyncio.wait_for`` can swallow
    a cancellation that arrives just as its inner await completes (CPython gh-86296), so a single
    ``cancel()`` may be lost: cancel again until the task really ends. A task that had already ended
    with an exception is the caller's to discard: its exception is read, so that asyncio does not
    log it as never retrieved (a websocket reader ending because its connection dropped)."""
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
    for t in tasks:
        if t is not None and not t.cancelled():
            t.exception()
