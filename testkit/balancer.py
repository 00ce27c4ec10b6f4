"""A TCP load balancer in front of several web processes, as a production control plane has one.

Brokers know a single control-plane address (``controlPlaneUrl`` in broker.conf), so N web processes
need one address in front of them. Each new connection goes to the next target in turn (round
robin); a target that refuses the connection (its process is dead) or does not accept within
``connect_timeout`` is skipped for the next one, so the clients of a killed web process reconnect to
a live one. Only when every target refuses is the client's connection aborted. Bytes are forwarded
as they come, so websockets pass through as plain TCP.

It is a :class:`~testkit.faultproxy.FaultProxy` whose target is chosen per connection: its faults
(``cut``, ``drop``, ``refuse``, ``delay``) and counters apply to the balancer as a whole. There are no
health checks: a web process that accepts but never answers (SIGSTOP) keeps getting its share, as
behind a plain TCP balancer without them.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from .faultproxy import FaultProxy


class Balancer(FaultProxy):
    """``127.0.0.1:<port>`` -> each of ``targets`` in turn, skipping those that refuse."""

    def __init__(self, targets: list[tuple[str, int]], **options):
        if not targets:
            raise ValueError("a balancer needs at least one target")
        super().__init__(targets[0], **options)
        self.targets = [(host, int(port)) for host, port in targets]
        self.connections_to: Counter[tuple[str, int]] = Counter()  # links made, per target
        self.skipped: Counter[tuple[str, int]] = Counter()  # connects refused or timed out, per target
        self._next = 0

    def routes(self) -> dict[int, tuple[str, int]]:
        """Which target carries each open link: the client's port -> the target."""
        return self._call(self._routes())

    async def _routes(self) -> dict[int, tuple[str, int]]:
        return {
            link.client.get_extra_info("peername")[1]: link.upstream.get_extra_info("peername")[:2]
            for link in self._links
            if link.upstream is not None
        }

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        first, self._next = self._next, (self._next + 1) % len(self.targets)
        failure: BaseException | None = None
        for k in range(len(self.targets)):
            target = self.targets[(first + k) % len(self.targets)]
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(*target, limit=self.chunk_size), self.connect_timeout
                )
            except (OSError, TimeoutError) as exc:
                self.skipped[target] += 1
                failure = exc
                continue
            self.connections_to[target] += 1
            return reader, writer
        assert failure is not None
        raise failure
