"""The controller on RocketMQ's remoting protocol (issue 36 item 5): the two reads mqadmin sends a
controller (``getControllerMetaData``, ``getSyncStateSet``), and its writes refused with the REST
endpoint to use. RocketMQ's namesrv embeds its controller with ``enableControllerInNamesrv``, and ours
is embedded in the control plane the same way, so these are served on the nameserver's remoting
endpoint. The nameserver never imports this module: the endpoint takes the table ``handlers`` builds
from its caller, ``manage.py serve_remoting`` (controlplane/operations, the floor above both).

Handlers are synchronous (the ORM and Redis): the endpoint runs them on its worker threads, inside the
database-connection handling and the catch-all it gives every request.

- 1005 ``CONTROLLER_GET_METADATA_INFO``: no header, no body asked; answers ``GetMetaDataResponseHeader``
  in extFields (``group``, ``controllerLeaderId``, ``controllerLeaderAddress``, ``isLeader``, ``peers``).
  Postgres is the consensus point, so every control-plane process is a leader, and the leader address
  is this endpoint's own: mqadmin sends the 1006 that follows to that address
  (``MQClientAPIImpl.getInSyncStateData``).
- 1006 ``CONTROLLER_GET_SYNC_STATE_DATA``: the body is a JSON list of broker names
  (``RemotingSerializable.encode(List<String>)``); answers ``BrokerReplicasInfo``
  ``{"replicasInfoTable": {brokerName: ReplicasInfo}}``, unknown names absent, nulls left out as
  fastjson leaves them out.

Sources: apache/rocketmq controller/.../processor/ControllerRequestProcessor.java,
impl/manager/ReplicasInfoManager.java (getSyncStateData), impl/DLedgerController.java
(getControllerMetadata), client/.../impl/MQClientAPIImpl.java (getControllerMetaData,
getInSyncStateData), remoting/.../protocol/body/BrokerReplicasInfo.java,
header/controller/GetMetaDataResponseHeader.java, RequestCode.java.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand
from mqrules.remoting.headers import GET_METADATA_RESPONSE, encode_header

from . import selectors
from .serializers import SYNC_STATE_DATA_MAX_NAMES

Handler = Callable[[RemotingCommand], RemotingCommand]

REST_PREFIX = "/api/v1/controller"

# The controller's writes, by RequestCode number: where to make the change instead, and the rmqha verb
# (mqadmin's name) that makes it, if an operator has one.
WRITES: dict[int, tuple[str, str, str | None]] = {
    1001: ("CONTROLLER_ALTER_SYNC_STATE_SET", f"POST {REST_PREFIX}/alter-sync-state-set", None),
    1002: ("CONTROLLER_ELECT_MASTER", f"POST {REST_PREFIX}/elect-master", "rmqha electMaster"),
    1003: ("CONTROLLER_REGISTER_BROKER", f"POST {REST_PREFIX}/brokers/register", None),
    1009: ("UPDATE_CONTROLLER_CONFIG", f"PATCH {REST_PREFIX}/config", None),
    1011: ("CLEAN_BROKER_DATA", f"POST {REST_PREFIX}/clean-broker-data", "rmqha cleanBrokerMetadata"),
    1013: ("CONTROLLER_APPLY_BROKER_ID", f"POST {REST_PREFIX}/brokers/apply-broker-id", None),
}


def handlers(address: str) -> dict[int, Handler]:
    """The controller's remoting handlers for an endpoint reachable at ``address`` (host:port)."""
    table: dict[int, Handler] = {
        RequestCode.CONTROLLER_GET_METADATA_INFO: partial(get_metadata, address=address),
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: get_sync_state_data,
    }
    for code in WRITES:
        table[code] = refuse_write
    return table


def get_metadata(request: RemotingCommand, *, address: str) -> RemotingCommand:
    header = encode_header(selectors.metadata(address), GET_METADATA_RESPONSE)
    return request.response(ResponseCode.SUCCESS, ext_fields=header)


def get_sync_state_data(request: RemotingCommand) -> RemotingCommand:
    names = broker_names(request.body)
    if names is None:
        return request.response(
            ResponseCode.SYSTEM_ERROR, "CONTROLLER_GET_SYNC_STATE_DATA wants a body: a JSON list of broker names"
        )
    if len(names) > SYNC_STATE_DATA_MAX_NAMES:
        return request.response(ResponseCode.INVALID_PARAMETER, f"at most {SYNC_STATE_DATA_MAX_NAMES} broker names at once")
    table = {name: _without_nulls(info) for name, info in selectors.sync_state_data(names).items()}
    body = json.dumps({"replicasInfoTable": table}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return request.response(ResponseCode.SUCCESS, body=body)


def broker_names(body: bytes) -> list[str] | None:
    """The broker names a 1006 body lists; None when it is not a non-empty JSON list of strings (Java
    answers an empty one with no response code set, SYSTEM_ERROR)."""
    try:
        names = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return None
    return names


def refuse_write(request: RemotingCommand) -> RemotingCommand:
    name, rest, verb = WRITES[request.code]
    return request.response(
        ResponseCode.NO_PERMISSION,
        f"{name} ({request.code}) is refused: this remoting endpoint is read-only (it takes no API token); "
        f"use the REST API, {rest}, with an API token" + (f" ({verb})" if verb else ""),
    )


def _without_nulls(info: dict) -> dict:
    return {key: value for key, value in info.items() if value is not None}
