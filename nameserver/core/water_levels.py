"""A broker's replication water levels, an optional part of its nameserver heartbeat
(docs/websocket.md): the checks, shared by REST and the websocket. Pure.

Checked by hand rather than by DRF serializers: every broker sends one per second."""

from __future__ import annotations

from enum import StrEnum

from mqrules import validation as v

MAX_SLAVES = 64


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    MASTER = "MASTER"
    SLAVE = "SLAVE"


role_check = v.one_of(BrokerRole)

REPORT_FIELDS: dict[str, v.Check] = {
    "brokerName": v.name,
    "brokerId": v.integer(),
    "role": role_check,
    "masterEpoch": v.integer(-1),  # -1: no epoch yet
    "maxOffset": v.integer(),
    "confirmOffset": v.integer(),
    "minOffset": v.integer(),
}
# Sent by brokers that judge their slaves themselves (brokers/ha/quorum.py): the threshold they use.
OPTIONAL_REPORT_FIELDS: dict[str, v.Check] = {"haMaxGapNotInSync": v.integer()}
SLAVE_FIELDS: dict[str, v.Check] = {
    "brokerId": v.integer(),
    "addr": v.addr,
    "ackOffset": v.integer(),
    "lagBytes": v.integer(),
    "lastCaughtUpMs": v.integer(),  # epoch ms; 0 = never caught up
    "transferBytesPerS": v.rate,
    "inSyncStateSet": v.boolean,
}
# The master's verdict: the slave's gap is under haMaxGapNotInSync (reference §2.7).
OPTIONAL_SLAVE_FIELDS: dict[str, v.Check] = {"inSync": v.boolean}


def _slaves(value: object, role: object) -> tuple[list[dict], object]:
    if not isinstance(value, list):
        return [], ["must be a list"]
    if len(value) > MAX_SLAVES:
        return [], [f"at most {MAX_SLAVES} slaves"]
    if value and role == BrokerRole.SLAVE:
        return [], ["only a master reports slaves"]
    slaves: list[dict] = []
    errors: dict[str, object] = {}
    for i, raw in enumerate(value):
        if not isinstance(raw, dict):
            errors[str(i)] = ["must be a JSON object"]
            continue
        slave, slave_errors = v.json_object(raw, SLAVE_FIELDS, OPTIONAL_SLAVE_FIELDS)
        if slave_errors:
            errors[str(i)] = slave_errors
        slaves.append(slave)
    if errors:
        return [], errors
    ids = [s["brokerId"] for s in slaves]
    if len(set(ids)) != len(ids):
        return [], ["a slave brokerId appears more than once"]
    return slaves, None


def parse_water_levels(value: object, *, broker_name: object = None) -> dict:
    """A heartbeat's ``waterLevels`` checked and reduced to the known fields (``slaves`` defaults to
    []); raises ``validation.Invalid``. ``broker_name``: the heartbeat's own, if it gave one."""
    if not isinstance(value, dict):
        raise v.Invalid(["must be a JSON object"])
    report, errors = v.json_object(value, REPORT_FIELDS, OPTIONAL_REPORT_FIELDS)
    if broker_name is not None and "brokerName" in report and report["brokerName"] != broker_name:
        errors["brokerName"] = ["differs from the heartbeat's brokerName"]
    slaves, slave_errors = _slaves(value.get("slaves", []), value.get("role"))
    if slave_errors:
        errors["slaves"] = slave_errors
    if errors:
        raise v.Invalid(errors)
    return {**report, "slaves": slaves}
