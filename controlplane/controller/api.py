"""The controller's operations as the outside sees them, shared by REST (views.py) and the broker
websocket (frames.py): validate, check the caller's cluster binding (``Caller.check``: the cluster
and broker set a request names, the set's stored cluster included), call one service, shape the
answer or raise ``ApiError``."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from rest_framework import status

from controlplane.auth import Caller
from controlplane.errors import ApiError
from mqrules.codes import ResponseCode as C

from . import liveness, metrics, selectors, services
from .core.state import SyncState, Trigger
from .serializers import (
    AlterSerializer,
    ApplyBrokerIdSerializer,
    CleanSerializer,
    ElectSerializer,
    HeartbeatSerializer,
    RegisterSerializer,
)

HTTP_STATUS = {
    C.CONTROLLER_BROKER_METADATA_NOT_EXIST: status.HTTP_404_NOT_FOUND,
    C.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: status.HTTP_404_NOT_FOUND,
}


def state_body(state: SyncState | None) -> dict:
    if state is None:
        return {}
    return {
        "clusterName": state.cluster_name,
        "brokerName": state.broker_name,
        "masterBrokerId": state.master_broker_id,
        "masterAddress": state.master_address,
        "masterEpoch": state.master_epoch,
        "syncStateSetEpoch": state.sync_state_set_epoch,
        "syncStateSet": sorted(state.sync_state_set),
        "brokerMemberGroup": {str(r.broker_id): r.broker_address for r in state.replicas},
    }


def _answer(outcome: services.Outcome, *, ok_codes=(C.SUCCESS,)) -> dict:
    code = C(outcome.code)
    if code in ok_codes:
        return {
            "code": int(code),
            "name": code.name,
            **state_body(outcome.state),
            **({"detail": outcome.detail} if outcome.detail else {}),
        }
    raise ApiError(
        code, outcome.detail or code.name, HTTP_STATUS.get(code, status.HTTP_409_CONFLICT), **state_body(outcome.state)
    )


def _valid(serializer_class, data):
    s = serializer_class(data=data)
    s.is_valid(raise_exception=True)
    return s


def next_broker_id(data: dict, caller: Caller) -> dict:
    name = data.get("brokerName")
    _valid(ElectSerializer, {"brokerName": name})  # same name rules
    caller.check(clusters=[data.get("clusterName")], broker_sets=[name])
    return {
        "code": 0,
        "name": "SUCCESS",
        "clusterName": data.get("clusterName"),
        "brokerName": name,
        "nextBrokerId": services.get_next_broker_id(name),
    }


def apply_broker_id(data: dict, caller: Caller) -> dict:
    d = _valid(ApplyBrokerIdSerializer, data).validated_data
    caller.check(clusters=[d["clusterName"]], broker_sets=[d["brokerName"]])
    outcome = services.apply_broker_id(
        d["clusterName"], d["brokerName"], d["appliedBrokerId"], d["registerCheckCode"], requested_by=caller.name
    )
    return _answer(outcome)


def register(data: dict, caller: Caller) -> dict:
    d = _valid(RegisterSerializer, data).validated_data
    caller.check(clusters=[d["clusterName"]], broker_sets=[d["brokerName"]])
    outcome = services.register_broker(d["brokerName"], d["brokerId"], d["brokerAddress"], requested_by=caller.name)
    body = _answer(outcome)
    if not (outcome.extra or {}).get("master_alive"):
        # registerBroker names the master only when it is alive (reference §1.8).
        body.update(masterBrokerId=None, masterAddress=None)
    return body


def heartbeat_beat(data: dict) -> liveness.Beat:
    d = _valid(HeartbeatSerializer, data).validated_data
    return liveness.Beat(
        d["clusterName"],
        d["brokerName"],
        d["brokerId"],
        d["brokerAddr"],
        d["epoch"],
        d["maxOffset"],
        d["confirmOffset"],
        d["electionPriority"],
        d["heartbeatTimeoutMillis"],
    )


def heartbeat(data: dict, caller: Caller) -> dict:
    beat = heartbeat_beat(data)
    caller.check(clusters=[beat.cluster_name], broker_sets=[beat.broker_name])
    metrics.HEARTBEATS.inc()
    services.heartbeat(beat)
    return {"code": 0, "name": "SUCCESS"}


def elect(data: dict, caller: Caller, *, operator: bool) -> dict:
    """Broker tokens elect as a broker (brokerId = themselves); operators either designate a replica
    or ask for an automatic (controller-style) election."""
    d = _valid(ElectSerializer, data).validated_data
    caller.check(clusters=[d.get("clusterName")], broker_sets=[d["brokerName"]])
    if operator:
        trigger = Trigger.OPERATOR
    else:
        if d.get("brokerId") is None:
            raise ApiError(
                C.CONTROLLER_INVALID_REQUEST, "a broker-triggered election carries the broker's id", status.HTTP_400_BAD_REQUEST
            )
        if d["designateElect"]:
            raise ApiError(C.NO_PERMISSION, "only operators designate a master", status.HTTP_403_FORBIDDEN)
        trigger = Trigger.BROKER
    outcome = services.elect_master(
        d["brokerName"], broker_id=d.get("brokerId"), designate=d["designateElect"], trigger=trigger, requested_by=caller.name
    )
    # MASTER_STILL_EXIST is treated as success by brokers (reference §1.5 step 5).
    return _answer(outcome, ok_codes=(C.SUCCESS, C.CONTROLLER_MASTER_STILL_EXIST))


def elect_recorded(data: dict, caller: Caller, record: Callable[[dict | None, Exception | None], object]) -> dict:
    """An operator's ``elect`` and the audit record of it in one transaction: ``record(answer, refusal)``
    writes the record once the election has decided (under the group's row lock, which the election
    holds until the commit), and the record commits with whatever the election wrote. A refusal
    (invalid input, a code other than success) is recorded too, then raised. The operator's REST call
    gets the same from ``AuditMiddleware``; the websocket's and the dashboard's call this."""
    refusal: Exception | None = None
    with transaction.atomic():
        try:
            answer = elect(data, caller, operator=True)
        except Exception as exc:  # recorded, then raised once the record committed
            refusal = exc
            record(None, refusal)
        else:
            record(answer, None)
    if refusal is not None:
        raise refusal
    return answer


def alter(data: dict, caller: Caller) -> dict:
    d = _valid(AlterSerializer, data).validated_data
    caller.check(clusters=[data.get("clusterName")], broker_sets=[d["brokerName"]])  # a clusterName sent along counts too
    outcome = services.alter_sync_state_set(
        d["brokerName"],
        master_broker_id=d["masterBrokerId"],
        master_epoch=d["masterEpoch"],
        new_sync_state_set=set(d["syncStateSet"]),
        sync_state_set_epoch=d["syncStateSetEpoch"],
        requested_by=caller.name,
    )
    return _answer(outcome)


def replica_info(data: dict, caller: Caller) -> dict:
    name = data.get("brokerName")
    _valid(ElectSerializer, {"brokerName": name})
    caller.check(clusters=[data.get("clusterName")], broker_sets=[name])
    state = selectors.replica_info(name)
    if state is None:
        raise ApiError(C.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker set {name} is unknown", status.HTTP_404_NOT_FOUND)
    return {"code": 0, "name": "SUCCESS", **state_body(state)}


def clean(data: dict, caller: Caller) -> dict:
    s = _valid(CleanSerializer, data)
    d = s.validated_data
    caller.check(clusters=[d.get("clusterName")], broker_sets=[d["brokerName"]])
    outcome = services.clean_broker_data(
        d["brokerName"], s.ids(), clean_living=d["isCleanLivingBroker"], requested_by=caller.name
    )
    return _answer(outcome)
