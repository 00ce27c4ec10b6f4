"""What the nameserver's remoting endpoint (issue 36) does with each request code: answer a read, refuse
a write, or say the code is not supported. Pure (floor 0): a table and one function over it.

The endpoint serves reads only. A 4.x client sends no API token, so everything that changes the
registry stays on the REST API, where a token is checked; a write code is refused with a remark naming
the REST endpoint to use. Codes by apache/rocketmq remoting/.../protocol/RequestCode.java; what namesrv
answers them with by namesrv/.../processor/DefaultRequestProcessor.java and ClientRequestProcessor.java.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from mqrules.remoting.codes import RequestCode, ResponseCode

REST_PREFIX = "/api/v1/nameserver"

# The reads this endpoint answers.
SERVED: frozenset[int] = frozenset(
    {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_KV_CONFIG,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    }
)

# Writes RocketMQ's nameserver (or, for 17 and 513, its brokers and mqadmin) accepts, by number, with
# where to make the change instead (None: there is nothing to change here).
WRITES: dict[int, tuple[str, str | None]] = {
    17: ("UPDATE_AND_CREATE_TOPIC", f"POST {REST_PREFIX}/topics"),
    100: ("PUT_KV_CONFIG", None),
    102: ("DELETE_KV_CONFIG", None),
    103: ("REGISTER_BROKER", f"POST {REST_PREFIX}/brokers/register"),
    104: ("UNREGISTER_BROKER", f"POST {REST_PREFIX}/brokers/unregister"),
    205: ("WIPE_WRITE_PERM_OF_BROKER", f"POST {REST_PREFIX}/brokers/{{brokerName}}/wipe-write-perm"),
    216: ("DELETE_TOPIC_IN_NAMESRV", f"DELETE {REST_PREFIX}/topics/{{topic}}"),
    217: ("REGISTER_TOPIC_IN_NAMESRV", f"POST {REST_PREFIX}/topics"),
    318: ("UPDATE_NAMESRV_CONFIG", f"PATCH {REST_PREFIX}/config"),
    327: ("ADD_WRITE_PERM_OF_BROKER", f"POST {REST_PREFIX}/brokers/{{brokerName}}/add-write-perm"),
    513: ("UPDATE_AND_CREATE_STATIC_TOPIC", f"POST {REST_PREFIX}/static-topics"),
    904: ("BROKER_HEARTBEAT", f"POST {REST_PREFIX}/brokers/heartbeat"),
}


class Disposition(Enum):
    SERVE = "serve"
    REFUSE = "refuse"  # a write: NO_PERMISSION, with the REST endpoint to use
    UNSUPPORTED = "unsupported"  # REQUEST_CODE_NOT_SUPPORTED, as Java's default branch answers


@dataclass(frozen=True, slots=True)
class Verdict:
    disposition: Disposition
    code: ResponseCode | None = None  # the answer's code when not served
    remark: str | None = None


def decide(request_code: int, served_by_caller: frozenset[int] = frozenset()) -> Verdict:
    """``served_by_caller``: the codes the endpoint's caller handles (the embedded controller's,
    controlplane/controller/remoting.py); they are served, and named in the unsupported remark."""
    if request_code in SERVED or request_code in served_by_caller:
        return Verdict(Disposition.SERVE)
    if request_code in WRITES:
        name, rest = WRITES[request_code]
        why = f"{name} ({request_code}) is refused: this remoting endpoint is read-only (it takes no API token)"
        where = f"; use the REST API, {rest}, with an API token" if rest else "; no KV config is kept here"
        return Verdict(Disposition.REFUSE, ResponseCode.NO_PERMISSION, why + where)
    return Verdict(
        Disposition.UNSUPPORTED,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        f"request code {request_code} is not supported by this nameserver "
        f"(served: {', '.join(map(str, sorted(SERVED | served_by_caller)))})",
    )
