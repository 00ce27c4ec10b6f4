"""What the control plane could hear, kept in Redis for the blindness guard (``controlplane.blindness``).

Each liveness table (the nameserver's ``ns``, the controller's ``ctl``) keeps, beside its own keys:

- ``<app>:last``: a sorted set, member -> its last heartbeat (Redis's clock, ms), stamped by the
  table's heartbeat script and removed when the table forgets the member;
- ``<app>:hearing``: a hash, ``since`` (when this record began: a Redis restart starts a new one),
  ``look`` (the last scan's look) and ``spans`` (the blind spans, JSON).

Every scan ``look``s before it judges: the blind spans pending since the last look are recorded then,
before later heartbeats overwrite the evidence. A judgement (``view``) adds the spans pending now to
the recorded ones without storing them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis
from django.conf import settings

from . import blindness
from .blindness import Span
from .redis import LUA_NOW_MS_OR_ARGV1, clock_arg, key, sync_client


def _grace() -> int:
    return int(getattr(settings, "HEARING_GRACE_MILLIS", blindness.DEFAULT_GRACE_MILLIS))


def _max_gap() -> int:
    return int(getattr(settings, "HEARING_MAX_GAP_MILLIS", blindness.DEFAULT_MAX_GAP_MILLIS))


log = logging.getLogger(__name__)

# KEYS: last zset, record hash. ARGV: clock. Returns {now, since, look, spans, known, horizon stamp}.
# The horizon (blindness.horizon: the ceil(k/2)-th most recent of k last heartbeats) is read by its
# rank, one element: an election reads the hearing, and reading every broker's stamp made the
# election path linear in the brokers known (bench/elections.py, 1,000 sets: 4x slower, issue 34).
_READ = (
    LUA_NOW_MS_OR_ARGV1
    + """
local out = {now}
local r = redis.call('HMGET', KEYS[2], 'since', 'look', 'spans')
out[2], out[3], out[4] = r[1] or '', r[2] or '', r[3] or ''
local known = redis.call('ZCARD', KEYS[1])
out[5] = known
out[6] = ''
if known > 0 then
  local at = redis.call('ZREVRANGE', KEYS[1], math.floor((known + 1) / 2) - 1, math.floor((known + 1) / 2) - 1, 'WITHSCORES')
  out[6] = at[2]
end
return out
"""
)


@dataclass(frozen=True)
class View:
    """The control plane's hearing at one instant: what the guard judges with."""

    now: int
    blind: tuple[Span, ...]
    since: int | None  # when the record began (None: never looked)
    known: int  # brokers in the table

    def silent_past(self, last_beat: int, timeout: int) -> bool:
        return blindness.silent_past(last_beat, timeout, self.now, self.blind)

    def warm(self, timeout: int) -> bool:
        return blindness.warm(self.since, self.now, self.blind, timeout)

    @property
    def blind_now(self) -> bool:
        return blindness.blind_now(self.blind, self.now)


@dataclass(frozen=True)
class Record:
    """One liveness table's record (``app``: its key prefix, "ns" or "ctl")."""

    app: str

    @property
    def last_key(self) -> str:
        return key(self.app, "last")

    @property
    def record_key(self) -> str:
        return key(self.app, "hearing")

    def _read(self, client, now_ms: int | None) -> tuple[int, int | None, int | None, list[Span], int, int | None]:
        """(now, since, look, recorded spans, brokers known, the horizon's heartbeat)."""
        reply = client.eval(_READ, 2, self.last_key, self.record_key, clock_arg(now_ms))
        now, since, look, spans = int(reply[0]), reply[1], reply[2], reply[3]
        recorded = [Span(int(a), int(b)) for a, b in json.loads(spans)] if spans else []
        at_horizon = int(float(reply[5])) if reply[5] else None
        return now, int(since) if since else None, int(look) if look else None, recorded, int(reply[4]), at_horizon

    @staticmethod
    def _judge(now: int, look: int | None, recorded: list[Span], at_horizon: int | None) -> tuple[Span, ...]:
        pending = blindness.pending(at_horizon, look, now, grace=_grace(), max_gap=_max_gap())
        return blindness.merged([*recorded, *pending], now)

    def view(self, now_ms: int | None = None) -> View:
        """The hearing now (or at ``now_ms``), with the pending spans; nothing is stored."""
        now, since, look, recorded, known, at_horizon = self._read(sync_client(), now_ms)
        return View(now, self._judge(now, look, recorded, at_horizon), since, known)

    def look(self, now_ms: int | None = None) -> View:
        """A scan's look: record the pending blind spans and this look (an optimistic transaction:
        of several scans looking at once, each records what it saw, none overwrites another)."""
        client = sync_client()
        for _ in range(10):
            with client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.record_key)
                    now, since, look, recorded, known, at_horizon = self._read(pipe, now_ms)
                    if look is not None and now < look:  # another scan looked later: judge with its record
                        return View(now, self._judge(now, look, recorded, at_horizon), since, known)
                    blind = self._judge(now, look, recorded, at_horizon)
                    since = now if since is None else since
                    pipe.multi()
                    pipe.hset(
                        self.record_key,
                        mapping={"since": since, "look": now, "spans": json.dumps([[s.start, s.end] for s in blind])},
                    )
                    pipe.execute()
                except redis.WatchError:
                    continue
            if blindness.blind_now(blind, now) and not (look is not None and blindness.blind_now(recorded, look)):
                log.warning(
                    "%s: the control plane cannot hear most brokers (since %s ms, Redis clock); "
                    "nobody is declared dead for this time",
                    self.app,
                    blind[-1].start,
                )
            return View(now, blind, since, known)
        raise RuntimeError(f"{self.app}: could not record the hearing (too many concurrent scans)")
