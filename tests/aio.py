"""Running an async test scenario (Channels communicators, the channel layer) from a sync test.

``asyncio.run`` (and ``async_to_sync``) cancel the tasks left when the scenario ends and then wait
for them without a limit. A consumer's channel-layer receive may still be blocked in a Redis
BZPOPMIN then; under load redis-py's clean-up of the cancelled read waits on the connection (up to
its 30 s socket timeout, then retries), and the test hangs until pytest-timeout ends the run.
``run_scenario`` first closes the loop's channel-layer connections, which ends such reads at once
with a ConnectionError, then cancels what is left with a bounded wait.

A channel layer outlives the loop that used it: channels-redis keeps per-channel ``asyncio.Lock``s
in it, and one still held by a task of a finished loop fails the next loop's receive with "is bound
to a different event loop". ``forget_channel_layer`` drops the process's layer, so the next loop
builds its own; ``run_scenario`` and every integration test's clean-up (tests/conftest.py) call it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers, get_channel_layer

T = TypeVar("T")
log = logging.getLogger(__name__)

CLEANUP_S = 10.0


def run_scenario(scenario: Callable[[], Awaitable[T]], *, cleanup_s: float = CLEANUP_S) -> T:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(scenario())
    finally:
        try:
            loop.run_until_complete(_close_layer(cleanup_s))
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                _, stuck = loop.run_until_complete(asyncio.wait(leftovers, timeout=cleanup_s))
                for task in stuck:
                    log.warning("task still running %.0f s after its cancellation, abandoned: %r", cleanup_s, task)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
            forget_channel_layer()


def forget_channel_layer() -> None:
    """Drop this process's channel layer: the next use builds a new one, with no lock or buffer of a
    loop that has ended."""
    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)


async def _close_layer(timeout: float) -> None:
    close = getattr(get_channel_layer(), "close_pools", None)
    if close is None:
        return
    try:
        await asyncio.wait_for(close(), timeout)
    except Exception:  # best effort: the bounded cancellation below still runs
        log.warning("closing the channel layer's connections failed", exc_info=True)
