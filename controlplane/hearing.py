"""What the control plane could hear, kept in Redis for the blindness guard (``controlplane.blindness``).

Each liveness table (the nameserver's ``ns``, the controller's ``ctl``) keeps, beside its own keys:

- ``<app>:last``: a sorted set, member -> its last heartbeat (Redis's clock, ms), and ``<app>:expect``,
  member -> when its next heartbeat is due (``blindness.expectation``), both stamped by the table's
  heartbeat script (``LUA_HEARD``) and removed when the table forgets the member;
- ``<app>:hearing``: a hash, ``since`` (when this record began: a Redis restart starts a new one),
  ``look`` (the last scan's look) and ``spans`` (the blind spans, JSON).

and both read ``web:stamp``, the last instant a web process was serving (``stamp_web``).

Every scan ``look``s before it judges: the blind spans pending since the last look are recorded then,
before later heartbeats overwrite the evidence. A judgement (``view``) adds the spans pending now to
the recorded ones without storing them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

import redis
from django.conf import settings

from . import blindness
from .blindness import Span
from .redis import LUA_NOW_MS_OR_ARGV1, Script, async_client, clock_arg, key, sync_client


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def web_key() -> str:
    return key("web", "stamp")


log = logging.getLogger(__name__)

# A Lua function for the tables' heartbeat scripts (after LUA_NOW_MS_OR_ARGV1): stamps member m's
# heartbeat in the last zset and its next expected one in the expect zset, as blindness.expectation
# computes it (the time since its previous beat, or a third of the timeout for a first beat; at least
# the minimum interval, at most the timeout).
LUA_HEARD = f"""
local function heard(last_key, expect_key, m, timeout)
  local previous = redis.call('ZSCORE', last_key, m)
  local interval = math.floor(timeout / {blindness.FIRST_BEAT_SHARE})
  if previous then interval = now - tonumber(previous) end
  redis.call('ZADD', expect_key, now + math.min(timeout, math.max(interval, {blindness.MIN_INTERVAL_MILLIS})), m)
  redis.call('ZADD', last_key, now, m)
end
"""

# A Lua fragment (after LUA_NOW_MS_OR_ARGV1, with a table ``out``): appends one read of a record.
# KEYS[1..3]: expect zset, record hash, web stamp. ARGV[2]: stale ms. Appends {since, look, spans,
# brokers due recently, the horizon's expectation, web stamp}; with ``now`` before them, the
# READ_FIELDS values Record.reading takes.
# The horizon (blindness.horizon: the ceil(k/2)-th latest of the k recent expectations) is read by its
# rank, one element: an election reads the hearing, and reading every broker's stamp made the
# election path linear in the brokers known (bench/elections.py, 1,000 sets: 4x slower, issue 34).
# The k recent ones are the k highest scores, so the rank is taken over the whole set.
LUA_READ_HEARING = """
local r = redis.call('HMGET', KEYS[2], 'since', 'look', 'spans')
out[#out + 1] = r[1] or ''
out[#out + 1] = r[2] or ''
out[#out + 1] = r[3] or ''
local known = redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[2]), '+inf')
out[#out + 1] = known
local at = ''
if known > 0 then
  local rank = math.floor((known + 1) / 2) - 1
  at = redis.call('ZREVRANGE', KEYS[1], rank, rank, 'WITHSCORES')[2]
end
out[#out + 1] = at
out[#out + 1] = redis.call('GET', KEYS[3]) or ''
"""
READ_FIELDS = 7  # what LUA_READ_HEARING leaves in ``out``, now included

_READ = Script(LUA_NOW_MS_OR_ARGV1 + "local out = {now}" + LUA_READ_HEARING + "return out")

# KEYS: web stamp. ARGV: clock.
_STAMP_WEB = LUA_NOW_MS_OR_ARGV1 + "redis.call('SET', KEYS[1], now) return now"


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

    @property
    def blind_for_millis(self) -> int:
        return blindness.blind_for(self.blind, self.now)


@dataclass(frozen=True)
class _Reading:
    """One read of a record: the clock, the record's fields and what its spans pending now follow from."""

    now: int
    since: int | None
    look: int | None
    recorded: list[Span]
    known: int  # brokers due recently (blindness rule 2)
    at_horizon: int | None
    web: int | None

    def judged(self) -> tuple[Span, ...]:
        """The recorded spans with those pending now."""
        pending = blindness.pending(
            self.at_horizon,
            self.look,
            self.now,
            web=self.web,
            grace=_setting("HEARING_GRACE_MILLIS", blindness.DEFAULT_GRACE_MILLIS),
            max_gap=_setting("HEARING_MAX_GAP_MILLIS", blindness.DEFAULT_MAX_GAP_MILLIS),
            web_grace=_setting("HEARING_WEB_GRACE_MILLIS", blindness.DEFAULT_WEB_GRACE_MILLIS),
        )
        return blindness.merged([*self.recorded, *pending], self.now)

    def view(self, blind: tuple[Span, ...] | None = None) -> View:
        return View(self.now, self.judged() if blind is None else blind, self.since, self.known)


def _int(value) -> int | None:
    return int(float(value)) if value not in (None, b"", "") else None


@dataclass(frozen=True)
class Record:
    """One liveness table's record (``app``: its key prefix, "ns" or "ctl")."""

    app: str

    @property
    def last_key(self) -> str:
        return key(self.app, "last")

    @property
    def expect_key(self) -> str:
        return key(self.app, "expect")

    @property
    def record_key(self) -> str:
        return key(self.app, "hearing")

    def keys_and_args(self, now_ms: int | None) -> list:
        """The KEYS and first ARGVs of a script that runs LUA_READ_HEARING (3 keys, then the clock and
        the stale bound): a table's own read appends its arguments and gets the hearing in the same
        round trip."""
        stale = _setting("HEARING_STALE_MILLIS", blindness.DEFAULT_STALE_MILLIS)
        return [self.expect_key, self.record_key, web_key(), clock_arg(now_ms), stale]

    def _read(self, client, now_ms: int | None) -> _Reading:
        return self.reading(_READ(client, 3, *self.keys_and_args(now_ms)))

    @staticmethod
    def reading(reply) -> _Reading:
        """``now`` and the values LUA_READ_HEARING appended after it (READ_FIELDS in all)."""
        spans = reply[3]
        return _Reading(
            now=int(reply[0]),
            since=_int(reply[1]),
            look=_int(reply[2]),
            recorded=[Span(int(a), int(b)) for a, b in json.loads(spans)] if spans else [],
            known=int(reply[4]),
            at_horizon=_int(reply[5]),
            web=_int(reply[6]),
        )

    def view(self, now_ms: int | None = None) -> View:
        """The hearing now (or at ``now_ms``), with the pending spans; nothing is stored."""
        return self._read(sync_client(), now_ms).view()

    def view_of(self, reply) -> View:
        """The hearing a script's reply carries: ``now``, then what LUA_READ_HEARING appended."""
        return self.reading(reply).view()

    def look(self, now_ms: int | None = None) -> View:
        """A scan's look: record the pending blind spans and this look (an optimistic transaction:
        of several scans looking at once, each records what it saw, none overwrites another)."""
        client = sync_client()
        for _ in range(10):
            with client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.record_key)
                    r = self._read(pipe, now_ms)
                    now, look, recorded = r.now, r.look, r.recorded
                    if look is not None and now < look:  # another scan looked later: judge with its record
                        return r.view()
                    blind = r.judged()
                    since = now if r.since is None else r.since
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
            return View(now, blind, since, r.known)
        raise RuntimeError(f"{self.app}: could not record the hearing (too many concurrent scans)")


def stamp_web(now_ms: int | None = None) -> int:
    """The web tier is serving now (rule 3); returns the clock reading it used, in ms."""
    return int(sync_client().eval(_STAMP_WEB, 1, web_key(), clock_arg(now_ms)))


async def stamp_web_forever() -> None:
    """Each web process, while its event loop serves: stamp every ``WEB_STAMP_MILLIS``. A stamp that
    fails (Redis away) is retried at the next tick: rule 4 covers the time Redis cannot be read."""
    failing = False
    while True:
        try:
            await async_client().eval(_STAMP_WEB, 1, web_key(), clock_arg(None))
            failing = False
        except (redis.RedisError, OSError) as exc:
            if not failing:
                log.warning("web stamp failed (%s); retrying every %s ms", exc, blindness.WEB_STAMP_MILLIS)
            failing = True
        await asyncio.sleep(blindness.WEB_STAMP_MILLIS / 1000)
