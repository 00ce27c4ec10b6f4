"""The smallest broker id of this broker's replica group (reference §5.1, RIP-32): the broker that
runs the group's special services (delay levels, transaction checks, POP revive) and the master a
slave follows once it is back.

Two sources, as RocketMQ's ``updateMinBroker``: a poll of the member group every
``syncBrokerMemberGroupPeriod`` (the ``get_broker_member_group`` frame, GET_BROKER_MEMBER_GROUP 901;
skipped while ``paused()``), and the nameserver's ``notify_min_broker_id_change`` pushes (905), which
only shorten the wait: a lost push is found by the next poll. The decisions are pure functions below;
``MemberGroupTracker`` does the I/O and calls ``on_change`` when the minimum's id or address changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from mqrules import validation

from ..config import BrokerConfig
from ..tasks import cancel_and_wait
from .nameserver import ControlPlane

log = logging.getLogger("brokers.members")

FRAME = "get_broker_member_group"
PUSH = "notify_min_broker_id_change"
POLL_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class MinBroker:
    """What this broker knows of its group: the smallest id and its address (None: nobody, not even
    this broker), the members by id, the address that went offline with this change (the old minimum,
    if it left) and the new minimum's HA address when a push named it (905's ``haBrokerAddr``)."""

    min_broker_id: int | None
    min_broker_addr: str | None
    members: Mapping[int, str] = field(default_factory=dict)
    offline_addr: str | None = None
    ha_addr: str | None = None


@dataclass(frozen=True)
class MinBrokerIdChange:
    """A pushed ``NOTIFY_MIN_BROKER_ID_CHANGE`` header (nameserver/core/values.py ``header()``)."""

    min_broker_id: int
    min_broker_addr: str
    broker_name: str | None = None
    offline_addr: str | None = None
    ha_addr: str | None = None


# --- decisions (pure) ---------------------------------------------------------------------------------


def min_broker(
    members: Mapping[int, str], self_id: int, self_addr: str, include_self: bool = True
) -> tuple[int | None, str | None]:
    """The smallest id of the group and its address. With ``include_self`` a group that does not list
    this broker counts it anyway (it is alive: it is asking), so an empty group makes it the minimum,
    as pre-online's "empty group → startService(self)" (reference §5.3 step 2)."""
    group = dict(members)
    if include_self and self_id not in group:
        group[self_id] = self_addr
    if not group:
        return None, None
    smallest = min(group)
    return smallest, group[smallest]


def alive_replica_num(members: Mapping[int, str], self_id: int) -> int:
    """``aliveReplicaNumInGroup``: the member count, +1 if this broker is not listed (reference §5.1)."""
    return len(members) + (0 if self_id in members else 1)


def observe(
    current: MinBroker | None,
    members: Mapping[int, str],
    self_id: int,
    self_addr: str,
    *,
    offline_addr: str | None = None,
    ha_addr: str | None = None,
) -> MinBroker:
    """The group as now seen. When no offline address is given, a minimum that moved to a larger id
    (or, same id, to another address) leaves the old minimum's address offline, as RocketMQ's poll
    does (``updateMinBroker``: ``minBrokerId > minBrokerIdInGroup``)."""
    new_id, new_addr = min_broker(members, self_id, self_addr)
    if offline_addr is None and current is not None and current.min_broker_id is not None and new_id is not None:
        moved_up = new_id > current.min_broker_id
        readdressed = new_id == current.min_broker_id and new_addr != current.min_broker_addr
        if moved_up or readdressed:
            offline_addr = current.min_broker_addr
    return MinBroker(new_id, new_addr, dict(members), offline_addr, ha_addr)


def apply_push(current: MinBroker | None, change: MinBrokerIdChange, self_id: int, self_addr: str) -> MinBroker:
    """A push applied to the last known group: the offline address leaves, the named minimum joins;
    then the minimum by the poll's rule (the next poll replaces the guess with the nameserver's)."""
    members = {i: a for i, a in (current.members if current is not None else {}).items() if a != change.offline_addr}
    members = {i: a for i, a in members.items() if a != change.min_broker_addr}
    members[change.min_broker_id] = change.min_broker_addr
    return observe(current, members, self_id, self_addr, offline_addr=change.offline_addr, ha_addr=change.ha_addr)


def min_changed(old: MinBroker | None, new: MinBroker) -> bool:
    if old is None:
        return True
    return (old.min_broker_id, old.min_broker_addr) != (new.min_broker_id, new.min_broker_addr)


def parse_member_group(reply: Mapping) -> dict[int, str]:
    """``{"brokerAddrs": {"<id>": addr}}`` (BrokerMemberGroup) as ids to addresses; ValueError naming
    what is wrong."""
    addrs = reply.get("brokerAddrs") if isinstance(reply, Mapping) else None
    if not isinstance(addrs, Mapping):
        raise ValueError("brokerAddrs: must be a JSON object")
    members, problems = {}, []
    for key, addr in addrs.items():
        if not (isinstance(key, str) and key.isascii() and key.isdecimal() and int(key) <= validation.MAX_ID):
            problems.append(f"brokerAddrs: {key!r} is not a broker id")
        elif (message := validation.addr(addr)) is not None:
            problems.append(f"brokerAddrs.{key}: {message}")
        else:
            members[int(key)] = addr
    if problems:
        raise ValueError("; ".join(problems))
    return members


_OPTIONAL_ADDR = ("offlineBrokerAddr", "haBrokerAddr")


def parse_min_broker_id_change(payload: Mapping) -> MinBrokerIdChange:
    """A pushed 905 header; ValueError naming each bad field."""
    problems = []
    if (message := validation.integer(0, validation.MAX_ID)(payload.get("minBrokerId"))) is not None:
        problems.append(f"minBrokerId: {message}")
    if (message := validation.addr(payload.get("minBrokerAddr"))) is not None:
        problems.append(f"minBrokerAddr: {message}")
    for key in _OPTIONAL_ADDR:
        value = payload.get(key)
        if value is not None and (message := validation.addr(value)) is not None:
            problems.append(f"{key}: {message}")
    name = payload.get("brokerName")
    if name is not None and not isinstance(name, str):
        problems.append("brokerName: must be a string")
    if problems:
        raise ValueError("; ".join(problems))
    return MinBrokerIdChange(
        payload["minBrokerId"], payload["minBrokerAddr"], name, payload.get("offlineBrokerAddr"), payload.get("haBrokerAddr")
    )


# --- the tracker (I/O) --------------------------------------------------------------------------------


class MemberGroupTracker:
    """Follows the minimum of this broker's group; ``on_change(MinBroker)`` runs when its id or address
    changed, one call at a time. A change is recorded once ``on_change`` returned: if it raises, the
    next poll offers the same change again (RocketMQ's reactions are idempotent toggles)."""

    def __init__(
        self,
        config: BrokerConfig,
        link: ControlPlane,
        on_change: Callable[[MinBroker], Awaitable[None]],
        *,
        paused: Callable[[], bool] | None = None,
    ):
        """``link``: where the member group is asked. The nameserver's pushes reach ``on_pushed``
        through the link's push handlers (brokers/broker.py hands it over)."""
        self.config = config
        self.link = link
        self.on_change = on_change
        self.paused = paused or (lambda: False)
        self._current: MinBroker | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._poll_failing = False

    @property
    def current(self) -> MinBroker | None:
        return self._current

    @property
    def alive_replicas(self) -> int:
        """``aliveReplicaNumInGroup``; 1 (this broker) before the group was first seen."""
        if self._current is None:
            return 1
        return alive_replica_num(self._current.members, self._self_id)

    @property
    def _self_id(self) -> int:
        return self.link.broker_id  # controller mode: the id the controller gave this broker

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="member-group-poll")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        period_s = self.config.syncBrokerMemberGroupPeriod / 1000
        while True:
            await asyncio.sleep(period_s)
            if self.paused():
                continue
            try:
                await self.poll_once()
            except Exception as exc:  # the control plane unreachable, a garbled answer: the next poll
                if not self._poll_failing:
                    log.warning("member group poll failed (%s); retrying every %.1f s", exc, period_s)
                self._poll_failing = True
            else:
                if self._poll_failing:
                    log.info("member group poll works again")
                self._poll_failing = False

    async def poll_once(self) -> MinBroker | None:
        """Ask the nameserver for the group once and act on it; the state afterwards."""
        c = self.config
        reply = await self.link.call(FRAME, {"clusterName": c.brokerClusterName, "brokerName": c.brokerName}, POLL_TIMEOUT_S)
        members = parse_member_group(reply)
        async with self._lock:
            await self._settle(observe(self._current, members, self._self_id, c.broker_addr))
        return self._current

    async def on_pushed(self, payload: dict) -> None:
        """A ``notify_min_broker_id_change`` push (one of the link's push handlers)."""
        try:
            change = parse_min_broker_id_change(payload)
        except ValueError as exc:
            log.warning("ignoring a malformed %s push (%s)", PUSH, exc)
            return
        if change.broker_name is not None and change.broker_name != self.config.brokerName:
            log.warning("ignoring a %s push for broker set %s", PUSH, change.broker_name)
            return
        async with self._lock:
            await self._settle(apply_push(self._current, change, self._self_id, self.config.broker_addr))

    async def _settle(self, new: MinBroker) -> None:
        if not min_changed(self._current, new):
            self._current = new  # the same minimum; the members (and the replica count) may differ
            return
        old = self._current
        log.info(
            "min broker of %s: %s -> %s (%s)%s",
            self.config.brokerName,
            None if old is None else old.min_broker_id,
            new.min_broker_id,
            new.min_broker_addr,
            f", offline {new.offline_addr}" if new.offline_addr else "",
        )
        try:
            await self.on_change(new)
        except Exception:
            log.exception("acting on the min broker change failed; the next poll retries it")
            return
        self._current = new
