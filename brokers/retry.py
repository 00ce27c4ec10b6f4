"""Waiting between attempts: one exponential backoff for every link that reconnects or call that is
retried (the control-plane link, the controller calls of the replicas manager, the HA link of a
slave). Below store/, ha/ and control/: imports nothing of the broker."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class Backoff:
    """Waits of ``start`` seconds doubling up to ``cap``; ``reset`` after a success. With ``jitter``
    each wait is drawn from the upper half of the current one, so that a fleet does not retry in step."""

    def __init__(self, start: float, cap: float, *, jitter: bool = False):
        self.start, self.cap, self.jitter = start, cap, jitter
        self.current = start  # the next wait (its upper bound with jitter)

    def reset(self) -> None:
        self.current = self.start

    def next_wait(self) -> float:
        """The wait to take now; the one after it doubles (up to the cap)."""
        wait = random.uniform(self.current / 2, self.current) if self.jitter else self.current
        self.current = min(self.cap, self.current * 2)
        return wait

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_wait())


async def retry(
    what: str,
    call: Callable[[], Awaitable[T]],
    *,
    errors: tuple[type[BaseException], ...],
    backoff: Backoff,
    log: logging.Logger,
    attempts: int = 0,
) -> T:
    """``await call()`` until it returns, waiting ``backoff`` after each failure of the ``errors``
    kinds (logged at info as ``what``); the last failure is raised after ``attempts`` (0: never)."""
    failed = 0
    while True:
        try:
            return await call()
        except errors as exc:
            failed += 1
            if attempts and failed >= attempts:
                raise
            log.info("%s failed (%s); retrying in %.1f s", what, exc, backoff.current)
            await backoff.sleep()
