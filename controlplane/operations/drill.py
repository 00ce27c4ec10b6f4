"""The failover drill (docs/failover.md, "Failover drill and headroom"): an operator switches one
controller-mode broker set over to a replica of its SyncStateSet, on purpose, and sees what a
failover costs: the RTO, and the data at risk before the switch and lost at it.

``preview`` says which replica would take over (the one named, or the best alive SyncStateSet slave
by the controller's own election order) and how far it lags; it refuses a target the controller
would not elect cleanly (outside the SyncStateSet, not alive, isolated) and a set whose master is not
serving (that is an election, not a drill: electMaster). ``run`` writes the drill row and the operator
audit record and commits both, then switches through the controller's election with a designated
broker (``services.elect_master``, as electMaster does), then waits for the new master to serve and
completes the row and the record with what it measured.

"Serving" is the new master's registration with the nameserver as id 0 at its address with the new
epoch as its state version: a broker registers that way only once it is master and its write gate is
open (brokers/control/replicas.py ``_change_to_master``), and it is what moves the topic routes to it,
so from that instant a client can write again. The RTO is the time from the election's commit to
that registration, measured here by polling every ``POLL_S``.

Data at risk (before) is the old master's log end minus what the target had acknowledged, from the
water levels the brokers report with their nameserver heartbeats (the controller's heartbeat table
when there are none). Data lost (at the switch) is what the old master had acknowledged (its
confirmOffset while still master) beyond what the new master was seen to hold when it took over;
each side as last reported: exact when nothing is sent during the drill, an estimate at heartbeat
resolution under steady sends.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane import audit
from controlplane.controller import selectors as ctl_selectors
from controlplane.controller import services as ctl_services
from controlplane.controller.core.rules import rank_key
from controlplane.controller.core.state import LiveInfo, SyncState, Trigger
from controlplane.models import Drill, DrillOutcome
from mqrules.codes import ResponseCode as C
from nameserver import liveness as ns_liveness
from nameserver import selectors as ns_selectors
from nameserver import water_levels

from .refused import Refused

log = logging.getLogger(__name__)

WAIT_S = 15.0  # how long the new master has to serve before the drill is called failed
POLL_S = 0.02
ABANDONED_AFTER = timedelta(seconds=120)  # a row still running this long after its start lost its process
ACTION = "failover_drill"


class DrillError(Refused):
    """Refused before anything changed."""

    def __init__(self, status: int, code: C, detail: str, fields: dict | None = None):
        super().__init__(status, code, detail, fields)


# --- the plan -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Offsets:
    """The figures of one moment: the master's log end and acknowledged offset, what each slave acked."""

    master_max: int | None = None
    master_acked: int | None = None
    acked: dict[int, int] = field(default_factory=dict)  # slave controller id -> offset it holds
    source: str = "none"  # waterLevels | heartbeats | none

    def at_risk(self, target: int) -> int | None:
        if self.master_max is None or target not in self.acked:
            return None
        return max(0, self.master_max - self.acked[target])


def _figures(state: SyncState, live: dict[int, LiveInfo]) -> Offsets:
    """The master's and slaves' offsets now: the old master's latest water levels (its slaves' ack
    offsets, and each slave's own report), else the controller's heartbeat table."""
    master_addr = state.master_address
    reports = water_levels.latest_reports(state.cluster_name, state.broker_name)
    by_addr = {r["brokerAddr"]: r for r in reports}
    master = by_addr.get(master_addr)
    if master is not None and master["role"] != "SLAVE":
        acked = {s["brokerId"]: s["ackOffset"] for s in master["slaves"]}
        for r in state.replicas:  # a slave's own report, where its master's lacks it
            own = by_addr.get(r.broker_address)
            if own is not None and own["role"] == "SLAVE":
                acked[r.broker_id] = max(acked.get(r.broker_id, -1), own["maxOffset"])
        return Offsets(master["maxOffset"], master["confirmOffset"], acked, "waterLevels")
    m = live.get(state.master_broker_id) if state.master_broker_id is not None else None
    if m is None or m.max_offset < 0:
        return Offsets()
    acked = {i: info.max_offset for i, info in live.items() if i != state.master_broker_id and info.max_offset >= 0}
    return Offsets(m.max_offset, m.confirm_offset if m.confirm_offset >= 0 else m.max_offset, acked, "heartbeats")


def _refuse(status: int, code: C, detail: str, field_name: str | None = None) -> DrillError:
    return DrillError(status, code, detail, {field_name: [detail]} if field_name else None)


def choose_target(state: SyncState, live: dict[int, LiveInfo], isolated: frozenset[int], broker_id: int | None) -> int:
    """The replica a drill switches to: ``broker_id`` if the controller would elect it cleanly, else
    the best alive SyncStateSet slave in the controller's election order (``rules.rank_key``)."""
    name, master = state.broker_name, state.master_broker_id
    alive = {i for i, info in live.items() if info.alive}
    if master is None or master not in alive:
        why = "has no master" if master is None else f"master {master} is not alive"
        detail = f"{name} {why}: a drill starts from a serving master; use electMaster"
        raise _refuse(409, C.CONTROLLER_MASTER_NOT_AVAILABLE, detail)
    if broker_id is not None:
        if state.replica(broker_id) is None:
            raise _refuse(400, C.INVALID_PARAMETER, f"no replica {broker_id} in {name}", "brokerId")
        if broker_id == master:
            raise _refuse(400, C.INVALID_PARAMETER, f"replica {broker_id} is already the master of {name}", "brokerId")
        if broker_id not in state.sync_state_set:
            raise _refuse(
                409,
                C.CONTROLLER_ELECT_MASTER_FAILED,
                f"replica {broker_id} is not in the SyncStateSet {sorted(state.sync_state_set)} of {name}: it may lack "
                "acknowledged messages, and a drill only switches to an in-sync replica",
            )
        if broker_id in isolated:
            raise _refuse(409, C.CONTROLLER_ELECT_MASTER_FAILED, f"replica {broker_id} of {name} is isolated: never elected")
        if broker_id not in alive:
            raise _refuse(409, C.CONTROLLER_BROKER_NOT_ALIVE, f"replica {broker_id} of {name} is not alive (no heartbeat)")
        return broker_id
    candidates = [live[i] for i in sorted(state.sync_state_set - {master}) if i in alive]
    if not candidates:
        raise _refuse(
            409,
            C.CONTROLLER_ELECT_MASTER_FAILED,
            f"no alive replica besides the master in the SyncStateSet {sorted(state.sync_state_set)} of {name}: "
            "nothing to switch over to",
        )
    return min(candidates, key=rank_key).broker_id


def _check_registered(state: SyncState, target: int) -> None:
    """Both ends of the switch serve through the nameserver now: the master as id 0, the target as a
    slave under its controller id (what a running controller-mode broker registers as). Otherwise
    there is no serving state to start from, or no broker behind the target to take over."""
    group = ns_selectors.member_group(state.broker_name)
    for broker_id, ns_id, what in ((state.master_broker_id, 0, "the master"), (target, target, f"replica {target}")):
        addr = state.replica(broker_id).broker_address
        m = group.member_with_id(ns_id) if group is not None else None
        if m is None or m.broker_addr != addr or ns_liveness.is_expired(ns_liveness.member(state.cluster_name, addr)):
            raise _refuse(
                409,
                C.SERVICE_NOT_AVAILABLE,
                f"{what} of {state.broker_name} ({addr}) is not registered with the nameserver as broker {ns_id}: "
                "is its broker running in controller mode?",
            )


@dataclass(frozen=True)
class Plan:
    state: SyncState
    target: int
    offsets: Offsets
    live: dict[int, LiveInfo]
    alive: frozenset[int]

    def as_dict(self) -> dict:
        s, o = self.state, self.offsets
        candidates = sorted((self.live[i] for i in s.sync_state_set - {s.master_broker_id} if i in self.alive), key=rank_key)
        at_risk = o.at_risk(self.target)
        return {
            "clusterName": s.cluster_name,
            "brokerName": s.broker_name,
            "fromBrokerId": s.master_broker_id,
            "fromBrokerAddr": s.master_address,
            "toBrokerId": self.target,
            "toBrokerAddr": s.replica(self.target).broker_address,
            "masterEpoch": s.master_epoch,
            "syncStateSet": sorted(s.sync_state_set),
            "candidates": [
                {
                    "brokerId": c.broker_id,
                    "brokerAddr": s.replica(c.broker_id).broker_address,
                    "ackOffset": o.acked.get(c.broker_id),
                    "lagBytes": o.at_risk(c.broker_id),
                }
                for c in candidates
            ],
            "masterMaxOffset": o.master_max,
            "targetAckOffset": o.acked.get(self.target),
            "lagBytes": at_risk,
            "dataAtRiskBytes": at_risk,
            "figuresFrom": o.source,
            "detail": (
                f"replica {self.target} takes over {s.broker_name} from {s.master_broker_id}; "
                + (f"{at_risk} bytes at risk (its lag behind the master)" if at_risk is not None else "its lag is unknown")
            ),
        }


def plan(broker_name: str, broker_id: int | None = None) -> Plan:
    state = ctl_selectors.replica_info(broker_name)
    if state is None:
        raise DrillError(404, C.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"{broker_name} is not managed by the controller")
    isolated = ctl_selectors.isolated_ids(state)
    live = ctl_selectors.live_view(state, isolated)
    target = choose_target(state, live, isolated, broker_id)
    _check_registered(state, target)
    alive = frozenset(i for i, info in live.items() if info.alive)
    return Plan(state, target, _figures(state, live), live, alive)


def preview(broker_name: str, broker_id: int | None = None) -> dict:
    """What a drill would do now, changing nothing; ``DrillError`` when it would be refused."""
    return plan(broker_name, broker_id).as_dict()


# --- the run --------------------------------------------------------------------------------------------


class _Watch:
    """What the water levels say while the switch happens: the most the old master acknowledged while
    it was still master, the most the target was seen holding before it took over."""

    def __init__(self, state: SyncState, target: int, before: Offsets):
        self.state, self.target = state, target
        self.old_addr = state.master_address
        self.target_addr = state.replica(target).broker_address
        self.old_acked = before.master_acked
        self.new_held = before.acked.get(target)
        self.source = before.source

    def look(self) -> None:
        for r in water_levels.latest_reports(self.state.cluster_name, self.state.broker_name):
            if r["brokerAddr"] == self.old_addr and r["role"] != "SLAVE" and r["masterEpoch"] <= self.state.master_epoch:
                self.old_acked = max(self.old_acked or 0, r["confirmOffset"])
                for s in r["slaves"]:
                    if s["brokerId"] == self.target:
                        self.new_held = max(self.new_held or 0, s["ackOffset"])
                self.source = "waterLevels"
            elif r["brokerAddr"] == self.target_addr and r["role"] == "SLAVE":
                self.new_held = max(self.new_held or 0, r["maxOffset"])

    @property
    def lost(self) -> int | None:
        if self.old_acked is None or self.new_held is None:
            return None
        return max(0, self.old_acked - self.new_held)

    def figures(self) -> dict:
        return {"oldMasterAckedOffset": self.old_acked, "newMasterHeldOffset": self.new_held, "from": self.source}


def serving(broker_name: str, broker_addr: str, epoch: int) -> bool:
    """The new master registered with the nameserver as id 0 at its address with the new epoch."""
    group = ns_selectors.member_group(broker_name)
    m = group.member_with_id(0) if group is not None else None
    return m is not None and m.broker_addr == broker_addr and m.data_version.state_version >= epoch


def _start(actor: str, p: Plan) -> tuple[Drill, int]:
    """The drill row and its audit record, committed together before the switch."""
    s, before = p.state, p.as_dict()
    with transaction.atomic():
        Drill.objects.filter(
            broker_name=s.broker_name, outcome=DrillOutcome.RUNNING, started_at__lt=timezone.now() - ABANDONED_AFTER
        ).update(outcome=DrillOutcome.FAILED, detail="abandoned: the process running it stopped before it ended")
        try:
            with transaction.atomic():
                drill = Drill.objects.create(
                    cluster_name=s.cluster_name,
                    broker_name=s.broker_name,
                    actor=actor,
                    from_broker_id=s.master_broker_id,
                    to_broker_id=p.target,
                    old_epoch=s.master_epoch,
                    data_at_risk_bytes=before["dataAtRiskBytes"],
                    figures={"before": {k: before[k] for k in ("masterMaxOffset", "targetAckOffset", "figuresFrom")}},
                )
        except IntegrityError as exc:
            raise DrillError(409, C.SYSTEM_BUSY, f"a drill of {s.broker_name} is running") from exc
        record = audit.record(
            actor,
            ACTION,
            cluster_name=s.cluster_name,
            broker_name=s.broker_name,
            broker_id=p.target,
            params={"drillId": drill.pk, "toBrokerId": p.target},
            before={k: before[k] for k in ("fromBrokerId", "toBrokerId", "masterEpoch", "syncStateSet", "dataAtRiskBytes")},
            result="sent",
        )
    return drill, record.pk


def _finish(drill: Drill, record_id: int, outcome: str, detail: str, **values) -> None:
    Drill.objects.filter(pk=drill.pk).update(outcome=outcome, detail=detail, **values)
    for k, v in values.items():
        setattr(drill, k, v)
    drill.outcome, drill.detail = outcome, detail
    after = {"newEpoch": values.get("new_epoch"), "rtoMs": values.get("rto_ms"), "dataLostBytes": values.get("data_lost_bytes")}
    audit.complete(record_id, result="ok" if outcome == DrillOutcome.OK else "failed", after=after, detail=detail)


def run(actor: str, broker_name: str, broker_id: int | None = None) -> dict:
    """Switch ``broker_name`` over to ``broker_id`` (or the best in-sync slave) and measure it; the
    drill as ``recent`` shows it. ``DrillError`` when refused (nothing changed); a switch that the
    controller refuses, or whose new master does not serve within ``WAIT_S``, is a failed drill."""
    audit.outside_transactions("a failover drill")
    p = plan(broker_name, broker_id)
    drill, record_id = _start(actor, p)
    try:
        return as_dict(_switch(drill, record_id, p, actor))
    except Exception as exc:  # after the start something may have changed: the answer says so, not "nothing changed"
        log.exception("failover drill %s of %s broke off", drill.pk, broker_name)
        drill.refresh_from_db(fields=["outcome"])
        if drill.outcome == DrillOutcome.RUNNING:
            detail = f"the drill broke off ({exc!r}); the switch may have happened: see the group's election history"
            _finish(drill, record_id, DrillOutcome.FAILED, detail)
        drill.refresh_from_db()
        return as_dict(drill)
    except BaseException:
        drill.refresh_from_db(fields=["outcome"])
        if drill.outcome == DrillOutcome.RUNNING:
            _finish(drill, record_id, DrillOutcome.FAILED, "the drill was interrupted")
        raise


def _switch(drill: Drill, record_id: int, p: Plan, actor: str) -> Drill:
    watch = _Watch(p.state, p.target, p.offsets)
    outcome = ctl_services.elect_master(
        p.state.broker_name, broker_id=p.target, designate=True, trigger=Trigger.OPERATOR, requested_by=actor
    )
    decided = time.monotonic()
    decided_at = timezone.now()
    if outcome.code != C.SUCCESS:
        detail = f"the controller did not switch: {C(outcome.code).name} {outcome.detail}".strip()
        _finish(drill, record_id, DrillOutcome.FAILED, detail, decided_at=decided_at)
        return drill
    new = outcome.state
    Drill.objects.filter(pk=drill.pk).update(decided_at=decided_at, new_epoch=new.master_epoch)
    deadline = decided + WAIT_S
    served = None
    while True:
        watch.look()
        if serving(new.broker_name, new.master_address, new.master_epoch):
            served = time.monotonic()
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    figures = {**drill.figures, "atSwitch": watch.figures()}
    if served is None:
        detail = (
            f"replica {p.target} was elected (epoch {new.master_epoch}) but did not register with the nameserver as "
            f"the master within {WAIT_S:g} s"
        )
        _finish(drill, record_id, DrillOutcome.FAILED, detail, decided_at=decided_at, new_epoch=new.master_epoch, figures=figures)
        return drill
    rto_ms = round((served - decided) * 1000)
    lost = watch.lost
    detail = f"replica {p.target} serves {new.broker_name} at epoch {new.master_epoch} after {rto_ms} ms" + (
        f"; {lost} acknowledged bytes were not on it" if lost else ""
    )
    log.info("failover drill of %s: %s", new.broker_name, detail)
    _finish(
        drill,
        record_id,
        DrillOutcome.OK,
        detail,
        decided_at=decided_at,
        serving_at=decided_at + timedelta(milliseconds=rto_ms),
        new_epoch=new.master_epoch,
        rto_ms=rto_ms,
        data_lost_bytes=lost,
        figures=figures,
    )
    return drill


# --- reads ----------------------------------------------------------------------------------------------


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def as_dict(d: Drill) -> dict:
    return {
        "id": d.pk,
        "clusterName": d.cluster_name,
        "brokerName": d.broker_name,
        "actor": d.actor,
        "fromBrokerId": d.from_broker_id,
        "toBrokerId": d.to_broker_id,
        "oldEpoch": d.old_epoch,
        "newEpoch": d.new_epoch,
        "startedAt": _iso(d.started_at),
        "decidedAt": _iso(d.decided_at),
        "servingAt": _iso(d.serving_at),
        "rtoMs": d.rto_ms,
        "dataAtRiskBytes": d.data_at_risk_bytes,
        "dataLostBytes": d.data_lost_bytes,
        "outcome": d.outcome,
        "detail": d.detail,
        "figures": d.figures,
    }


def latest_rtos() -> list[tuple[str, str, int]]:
    """(clusterName, brokerName, RTO ms) of each set's latest drill that measured one (a drill that
    failed measured none): one query, whatever the number of sets."""
    rows = (
        Drill.objects.filter(rto_ms__isnull=False)
        .order_by("cluster_name", "broker_name", "-started_at", "-id")
        .distinct("cluster_name", "broker_name")
        .values_list("cluster_name", "broker_name", "rto_ms")
    )
    return list(rows)


def recent(broker_name: str | None = None, limit: int = 20, *, cluster_name: str | None = None) -> list[dict]:
    """The latest drills, newest first (of one broker set; of one cluster)."""
    qs = Drill.objects.all()
    if broker_name:
        qs = qs.filter(broker_name=broker_name)
    if cluster_name:
        qs = qs.filter(cluster_name=cluster_name)
    return [as_dict(d) for d in qs[: max(0, limit)]]
