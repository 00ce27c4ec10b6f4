"""The controller's heartbeat table in Redis (reference §1.10), never a Postgres row per beat.

Each broker ``(clusterName, brokerName, brokerId)`` has a hash ``ctl:live:<member>`` with its
address, epoch, maxOffset, confirmOffset, electionPriority, heartbeatTimeoutMillis and last beat
(Redis's clock), and a deadline in sorted set ``ctl:deadline``. ``ctl:conn`` maps a member to the
Channels name of the websocket it heartbeats on. Each function that reads the clock takes ``now_ms``:
None (the default) is Redis's clock, one for every process; a value is that instant, so tests and
replays judge liveness at a time of their choosing instead of sleeping.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controlplane.hearing import LUA_HEARD, LUA_READ_HEARING, READ_FIELDS, Record, View
from controlplane.redis import LUA_NOW_MS_OR_ARGV1, LUA_RELEASE_IF_BOUND, Script, async_client, clock_arg, key, sync_client
from controlplane.redis import acquire_slot as redis_slot

from .core.state import INT_MAX, LiveInfo

DEFAULT_TIMEOUT_MILLIS = 10_000  # DEFAULT_BROKER_CHANNEL_EXPIRED_TIME in the controller

# What the controller could hear (the blindness guard): every judgement of "alive" below discounts
# the time it could not hear (controlplane/blindness.py).
HEARING = Record("ctl")

# ARGV[1] of every script is the clock ('' for Redis's, see LUA_NOW_MS_OR_ARGV1).
# KEYS: deadline zset, conn hash, last and expect zsets (the hearing record's). ARGV[2]: hash key prefix; then per beat 8 values:
# member, addr, epoch, maxOffset, confirmOffset, priority, timeout, channel ('' = do not bind).
# (epoch, maxOffset, confirmOffset) only move forward: a larger epoch, or the same epoch with a
# larger maxOffset (a truncated replica keeps its old, higher maxOffset until its epoch grows).
_HEARTBEAT = Script(
    LUA_NOW_MS_OR_ARGV1
    + LUA_HEARD
    + """
for i = 3, #ARGV, 8 do
  local m = ARGV[i]
  local k = ARGV[2] .. m
  local epoch, maxo = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local old = redis.call('HMGET', k, 'epoch', 'maxOffset')
  local oe, om = tonumber(old[1]), tonumber(old[2])
  if (not oe) or epoch > oe or (epoch == oe and maxo > om) then
    redis.call('HSET', k, 'epoch', ARGV[i + 2], 'maxOffset', ARGV[i + 3], 'confirmOffset', ARGV[i + 4])
  end
  redis.call('HSET', k, 'addr', ARGV[i + 1], 'priority', ARGV[i + 5], 'timeout', ARGV[i + 6], 'last', now)
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[i + 6]), m)
  heard(KEYS[3], KEYS[4], m, tonumber(ARGV[i + 6]))
  if ARGV[i + 7] ~= '' then redis.call('HSET', KEYS[2], m, ARGV[i + 7]) end
end
return now
"""
)

# KEYS: the hearing record's (Record.keys_and_args). ARGV: clock, stale ms, hash key prefix, members.
# Returns {now, 1 or 0, [the hearing: READ_FIELDS - 1 values, when 1], fields of member 1, ...}, each
# member's fields as one string "addr|epoch|maxOffset|confirmOffset|priority|timeout|last" ('' for a
# member the table does not hold): a thousand sets' 3,000 replicas are 3,000 strings to parse, not 21,000.
# The hearing only ever keeps a broker alive that is past its timeout (blind time is not counted), so
# it is read only when a member is: an election among live replicas reads none of it (issue 34: the
# guard must cost the election path nothing), and one that judges a silent master reads it in the
# same round trip.
_READ = Script(
    LUA_NOW_MS_OR_ARGV1
    + """
local fields, silent = {}, false
for i = 4, #ARGV do
  local f = redis.call('HMGET', ARGV[3] .. ARGV[i], 'addr', 'epoch', 'maxOffset', 'confirmOffset',
                       'priority', 'timeout', 'last')
  if f[7] then
    for k = 1, 7 do f[k] = f[k] or '' end
    fields[#fields + 1] = table.concat(f, '|')
  else
    fields[#fields + 1] = ''
  end
  if f[7] and now - tonumber(f[7]) > tonumber(f[6]) then silent = true end
end
local out = {now, 0}
if silent then
  out[2] = 1
"""
    + LUA_READ_HEARING
    + """
end
for _, f in ipairs(fields) do out[#out + 1] = f end
return out
"""
)

# KEYS: deadline zset. ARGV: clock. Returns members whose deadline has passed.
_EXPIRED = LUA_NOW_MS_OR_ARGV1 + "return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)"


@dataclass(frozen=True)
class Beat:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = INT_MAX
    heartbeat_timeout_millis: int = DEFAULT_TIMEOUT_MILLIS

    @property
    def member(self) -> str:
        return member(self.cluster_name, self.broker_name, self.broker_id)


def member(cluster_name: str, broker_name: str, broker_id: int) -> str:
    return f"{cluster_name}/{broker_name}/{broker_id}"


def split_member(value: str) -> tuple[str, str, int]:
    cluster, name, broker_id = value.rsplit("/", 2)
    return cluster, name, int(broker_id)


def _prefix() -> str:
    return key("ctl", "live", "")


def _keys() -> tuple[str, str]:
    return key("ctl", "deadline"), key("ctl", "conn")


def _beat_keys() -> tuple[str, str, str, str]:
    return *_keys(), HEARING.last_key, HEARING.expect_key


def _args(beats: Sequence[tuple[Beat, str]], now_ms: int | None) -> list:
    args: list = [clock_arg(now_ms), _prefix()]
    for b, channel in beats:
        args += [
            b.member,
            b.broker_addr,
            b.epoch,
            b.max_offset,
            b.confirm_offset,
            b.election_priority,
            b.heartbeat_timeout_millis,
            channel,
        ]
    return args


def heartbeat(beat: Beat, now_ms: int | None = None) -> int:
    """Stamp one heartbeat; returns the clock reading it used, in ms."""
    return int(_HEARTBEAT(sync_client(), 4, *_beat_keys(), *_args([(beat, "")], now_ms)))


async def heartbeat_async(beats: Sequence[tuple[Beat, str]], now_ms: int | None = None) -> None:
    """Several heartbeats in one round trip; a non-empty channel binds the broker to that websocket."""
    if beats:
        await _HEARTBEAT.run_async(async_client(), 4, *_beat_keys(), *_args(beats, now_ms))


def _read(members: list[str], now_ms: int | None) -> tuple[tuple[int, View | None], list]:
    """((now, the hearing or None when no member is past its timeout), each member's fields)."""
    reply = _READ(sync_client(), 3, *HEARING.keys_and_args(now_ms), _prefix(), *members)
    now = int(reply[0])
    if int(reply[1]):
        return (now, HEARING.view_of([now, *reply[2 : READ_FIELDS + 1]])), reply[READ_FIELDS + 1 :]
    return (now, None), reply[2:]


def live_infos(cluster_name: str, broker_name: str, broker_ids: Iterable[int], now_ms: int | None = None) -> dict[int, LiveInfo]:
    """The heartbeat table for these replicas, judged alive against one clock reading."""
    ids = sorted(set(broker_ids))
    if not ids:
        return {}
    hearing, fields = _read([member(cluster_name, broker_name, i) for i in ids], now_ms)
    return {broker_id: _live_info(broker_id, f, *hearing) for broker_id, f in zip(ids, fields, strict=True)}


def live_infos_many(sets: Sequence[tuple[str, str, Iterable[int]]], now_ms: int | None = None) -> dict[str, dict[int, LiveInfo]]:
    """``live_infos`` for many broker sets in one round trip (the inactive-master scan)."""
    wanted = [(cluster, name, sorted(set(ids))) for cluster, name, ids in sets]
    members = [member(c, n, i) for c, n, ids in wanted for i in ids]
    out: dict[str, dict[int, LiveInfo]] = {name: {} for _, name, _ in wanted}
    if not members:
        return out
    hearing, replies = _read(members, now_ms)
    fields = iter(replies)
    for _, name, ids in wanted:
        for broker_id in ids:
            out[name][broker_id] = _live_info(broker_id, next(fields), *hearing)
    return out


def _live_info(broker_id: int, fields: str, now: int, hearing: View | None) -> LiveInfo:
    """``fields``: the member's as ``_READ`` joins them; ``hearing``: None when no member read with this
    one was past its timeout (it is not read then)."""
    if not fields:
        return LiveInfo(broker_id, alive=False)
    addr, epoch, max_offset, confirm, priority, timeout, last = fields.split("|")
    within = now - int(last) <= int(timeout)
    return LiveInfo(
        broker_id,
        alive=within or (hearing is not None and not hearing.silent_past(int(last), int(timeout))),
        within_timeout=within,
        epoch=int(epoch),
        max_offset=int(max_offset),
        confirm_offset=int(confirm),
        election_priority=int(priority),
        broker_address=addr or "",
    )


def forget(members: Iterable[str]) -> None:
    members = list(members)
    if not members:
        return
    deadline, conn = _keys()
    pipe = sync_client().pipeline(transaction=True)
    for m in members:
        pipe.delete(_prefix() + m)
    pipe.zrem(deadline, *members)
    pipe.zrem(HEARING.last_key, *members)
    pipe.zrem(HEARING.expect_key, *members)
    pipe.hdel(conn, *members)
    pipe.execute()


def expired_members(now_ms: int | None = None) -> list[str]:
    """Members silent past their timeout, blind time not counted (the scans look first, every beat
    tick). A member past its deadline by Redis's clock is only a candidate."""
    hearing = HEARING.view(now_ms)
    candidates = list(sync_client().eval(_EXPIRED, 1, _keys()[0], clock_arg(hearing.now)))
    if not candidates:
        return []
    pipe = sync_client().pipeline(transaction=False)
    for m in candidates:
        pipe.hmget(_prefix() + m, "timeout", "last")
    out = []
    for m, (timeout, last) in zip(candidates, pipe.execute(), strict=True):
        if last is None or hearing.silent_past(int(last), int(timeout)):
            out.append(m)
    return out


def hearing(now_ms: int | None = None, *, look: bool = False) -> View:
    """The controller's hearing now; ``look``: record it (a scan's look, before its judgements)."""
    return HEARING.look(now_ms) if look else HEARING.view(now_ms)


def acquire_slot(name: str, interval_millis: int) -> bool:
    """At most one run of a periodic scan per interval across every beat and worker; the instant of
    the latest is kept (``slot_stamp_key``)."""
    return redis_slot(key("ctl", "slot", name), interval_millis, stamp_key=slot_stamp_key(name))


def slot_stamp_key(name: str) -> str:
    """Where the latest run of periodic scan ``name`` started (``controlplane.redis.slot_stamps``)."""
    return key("ctl", "slot-last", name)


def connections(members: Sequence[str]) -> dict[str, str]:
    if not members:
        return {}
    channels = sync_client().hmget(_keys()[1], list(members))
    return {m: c for m, c in zip(members, channels, strict=True) if c}


async def release_connection(value: str, channel_name: str) -> bool:
    return bool(await async_client().eval(LUA_RELEASE_IF_BOUND, 1, _keys()[1], value, channel_name))
