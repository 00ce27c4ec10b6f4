"""The pace of an open-loop load generator (the benchmarks' and the chaos runs' producers, heartbeat
senders and samplers): one beat every ``period`` seconds on a fixed schedule, so that a slow answer
does not lower the offered rate. A caller that fell behind gets the beats it missed at once, up to
``catch_up_s`` worth of them: a token bucket filled at one token a period that holds ``catch_up_s``
of them (math.inf: every missed beat is made up; 0: none, the schedule starts again from now).

Pure: the caller reads its own clock (time.time(), time.monotonic() or time.perf_counter(), the
same one throughout) and sleeps its own way (time.sleep, asyncio.sleep, an Event's wait).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Pace:
    period: float  # seconds between two beats
    next_at: float  # when the next beat is due, on the caller's clock
    catch_up_s: float = math.inf  # at most this much of the schedule made up after falling behind

    def wait_s(self, now: float) -> float:
        """How long until the next beat is due (0 when it is)."""
        return max(0.0, self.next_at - now)

    def advance(self, now: float) -> None:
        """On to the beat after the next one (a beat was taken); never further back than ``catch_up_s`` before ``now``."""
        self.next_at = max(self.next_at + self.period, now - self.catch_up_s)
