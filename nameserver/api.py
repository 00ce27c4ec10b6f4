"""The nameserver's broker-facing operations as the outside sees them, shared by REST (views.py) and
the broker websocket (frames.py): validate, check the caller's cluster binding (``Caller.check``), call
one service, shape the answer or raise ``ApiError``; as the controller's ``api.py`` does.

The socket's heartbeat and member-group frames come every second from every broker: the socket checks
their binding with its memory (``check_binding(remember=True)``) and batches the heartbeats of many
sockets into one Redis round trip, so it calls the parts (``heartbeat_of``, ``member_group_query``,
``store_water_levels_async``, ``member_group_answer``) rather than the whole operation; REST calls the
whole (``heartbeat``, ``member_group``). Either way a heartbeat's water levels are stored and announced
(``water_levels_reported``) the same way."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.auth import Caller
from controlplane.errors import ApiError, ResponseCode
from mqrules import validation as v

from . import liveness, metrics, route_cache, selectors, services, water_levels, wire
from .core.registry import RegisterOutcome
from .core.water_levels import parse_water_levels
from .serializers import HeartbeatSerializer, MemberGroupQuerySerializer, RegisterBrokerSerializer, UnregisterSerializer
from .signals import water_levels_reported

log = logging.getLogger(__name__)

SENDER = "nameserver"  # the sender of this app's announcements


def ok(**extra) -> dict:
    return {"code": 0, "name": "SUCCESS", **extra}


def _valid(serializer_class, data):
    s = serializer_class(data=data)
    s.is_valid(raise_exception=True)
    return s


# --- register, unregister ------------------------------------------------------------------------


def register(data: dict, caller: Caller) -> dict:
    """``REGISTER_BROKER`` (103)."""
    s = _valid(RegisterBrokerSerializer, data)
    caller.check(clusters=[s.validated_data["clusterName"]], broker_sets=[s.validated_data["brokerName"]])
    return register_response(services.register_broker(s.to_request()))


def register_response(result: services.RegisterResult) -> dict:
    """The answer to a registration; raises ApiError on refusal."""
    if result.outcome is RegisterOutcome.REFUSED_STALE_STATE_VERSION:
        raise ApiError(
            ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
            "another address holds this broker id with a higher stateVersion "
            f"({result.conflicting_state_version}); this registration is stale",
            conflictingStateVersion=result.conflicting_state_version,
        )
    if result.outcome is RegisterOutcome.REFUSED_SINGLE_TOPIC:
        raise ApiError(
            ResponseCode.SYSTEM_ERROR,
            "register broker failed: a single-topic registration needs a prior full registration",
        )
    return ok(masterAddr=result.master_addr, haServerAddr=result.master_ha_addr, isolated=result.isolated)


def unregister(data: dict, caller: Caller) -> dict:
    """``UNREGISTER_BROKER`` (104); ``unregistered``: whether the broker was registered."""
    d = _valid(UnregisterSerializer, data).validated_data
    caller.check(clusters=[d["clusterName"]], broker_sets=[d.get("brokerName")])
    result = services.unregister_broker(d["clusterName"], d["brokerAddr"], broker_name=d.get("brokerName"))
    return ok(unregistered=result is not None)


# --- heartbeat -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    cluster_name: str
    broker_addr: str
    broker_names: tuple[str, ...]  # the broker sets it names (its own, its water levels'): the binding check's
    water_levels: dict | None  # as parse_water_levels returns it; None: not reported

    @property
    def member(self) -> str:
        return liveness.member(self.cluster_name, self.broker_addr)

    @property
    def report(self) -> water_levels.WaterLevelReport | None:
        if self.water_levels is None:
            return None
        return water_levels.WaterLevelReport(self.cluster_name, self.broker_addr, self.water_levels)


_IDENTITY = {"clusterName": v.name, "brokerAddr": v.addr}


def _beat(cluster_name: str, broker_addr: str, broker_name: object, levels: dict | None) -> Heartbeat:
    named = (broker_name, (levels or {}).get("brokerName"))
    return Heartbeat(cluster_name, broker_addr, tuple(n for n in named if isinstance(n, str) and n), levels)


def heartbeat_of(payload: dict) -> Heartbeat:
    """A heartbeat frame checked with the pure rules (no serializer on the socket's hot path); every
    error at once."""
    identity, errors = v.json_object(payload, _IDENTITY)
    levels = payload.get("waterLevels")
    if levels is not None:
        try:
            levels = parse_water_levels(levels, broker_name=payload.get("brokerName"))
        except v.Invalid as exc:
            errors["waterLevels"] = exc.fields
    if errors:
        raise v.Invalid(errors)
    return _beat(identity["clusterName"], identity["brokerAddr"], payload.get("brokerName"), levels)


def heartbeat(data: dict, caller: Caller) -> dict:
    """``BROKER_HEARTBEAT`` (904): liveness in Redis only (``registered`` false: register again); the
    water levels it carries are stored and announced."""
    d = _valid(HeartbeatSerializer, data).validated_data
    beat = _beat(d["clusterName"], d["brokerAddr"], d.get("brokerName"), d.get("waterLevels"))
    caller.check(clusters=[beat.cluster_name], broker_sets=beat.broker_names)
    metrics.HEARTBEATS.inc()
    registered = services.record_heartbeat(beat.cluster_name, beat.broker_addr)
    if beat.report is not None:
        store_water_levels([beat.report])
    return ok(registered=registered)


def _announced(reports: Sequence[water_levels.WaterLevelReport]) -> list[dict]:
    """The reports as ``water_levels_reported`` carries them (the wire form of GET /water-levels)."""
    now = int(time.time() * 1000)
    return [{**r.water_levels, "clusterName": r.cluster_name, "brokerAddr": r.broker_addr, "reportedAtMs": now} for r in reports]


def store_water_levels(reports: Sequence[water_levels.WaterLevelReport]) -> None:
    """Store reports as their brokers' latest, then announce them (the dashboard listens and throttles
    on its side)."""
    water_levels.store(reports)
    try:
        water_levels_reported.send(sender=SENDER, reports=_announced(reports))
    except Exception:  # a listener's failure is not the broker's: its heartbeat was stored
        log.exception("a water_levels_reported receiver failed")


async def store_water_levels_async(reports: Sequence[water_levels.WaterLevelReport]) -> None:
    """``store_water_levels`` from an event loop (the socket's batch of reports)."""
    await water_levels.store_async(reports)
    try:
        await water_levels_reported.asend(sender=SENDER, reports=_announced(reports))
    except Exception:  # a listener's failure is not the broker's: its heartbeat was stored
        log.exception("a water_levels_reported receiver failed")


# --- member group --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberGroupQuery:
    cluster_name: str | None
    broker_name: str


def member_group_query(data: dict) -> MemberGroupQuery:
    d = _valid(MemberGroupQuerySerializer, data).validated_data
    return MemberGroupQuery(d.get("clusterName"), d["brokerName"])


def member_group_answer(query: MemberGroupQuery) -> dict:
    """``BrokerMemberGroup``, looked up by brokerName only as RocketMQ does (an unknown set has no
    members), cached per registry version: slave-acting-master brokers ask every second (reference §3.7)."""
    cluster_name = query.cluster_name or ""

    def compute() -> dict:
        group = selectors.member_group(query.broker_name)
        if group is None:
            return {"cluster": cluster_name, "brokerName": query.broker_name, "brokerAddrs": {}}
        return wire.member_group(group)

    return route_cache.cached(("member-group", query.broker_name, cluster_name), compute)


def member_group(data: dict, caller: Caller) -> dict:
    """``GET_BROKER_MEMBER_GROUP`` (901)."""
    query = member_group_query(data)
    caller.check(clusters=[query.cluster_name], broker_sets=[query.broker_name])
    return member_group_answer(query)
