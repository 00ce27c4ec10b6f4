"""A token bucket (pure: the caller passes the clock): ``burst`` at once, then ``rate_per_s``.

The broker websocket budgets each socket's request frames with it (``controlplane/ws.py``), and the
dashboard paces its hand-overs of changed groups to Redis (``dashboards/live.py``)."""

from __future__ import annotations


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: int, now: float) -> None:
        self.rate_per_s, self.burst = rate_per_s, burst
        self.tokens, self.at = float(burst), now

    def _refill(self, now: float) -> None:
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.at) * self.rate_per_s)
        self.at = max(self.at, now)

    def take(self, now: float) -> bool:
        """One token, if there is one now."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def refill_s(self) -> float:
        """Seconds until the next token."""
        return max(0.0, (1.0 - self.tokens) / self.rate_per_s)

    def take_waiting(self, now: float) -> float:
        """One token, waiting for it if need be: the seconds to wait (0 when there is one now)."""
        if self.take(now):
            return 0.0
        wait = self.refill_s()
        self.tokens, self.at = 0.0, now + wait
        return wait
