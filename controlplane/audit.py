"""Writing the operator audit log (controlplane.models.OperatorAction). One way in: every operator
action (dashboard, admin REST, Celery on an operator's behalf) calls ``record``."""

from __future__ import annotations

import json

from .models import OperatorAction


def record(
    actor: str,
    action: str,
    *,
    cluster_name: str = "",
    broker_name: str = "",
    broker_id: int | None = None,
    params: dict | None = None,
    before: dict | None = None,
    after: dict | None = None,
    result: str = "ok",
    detail: str = "",
) -> OperatorAction:
    return OperatorAction.objects.create(
        actor=actor[:150],
        action=action,
        cluster_name=cluster_name,
        broker_name=broker_name,
        broker_id=broker_id,
        params=params or {},
        before=before or {},
        after=after or {},
        result=result,
        detail=detail,
    )


# The broker protocol (brokers' own calls, also allowed to admin tokens) is not an operator action.
BROKER_PROTOCOL_SUFFIXES = (
    "/register",
    "/unregister",
    "/heartbeat",
    "/apply-broker-id",
    "/alter-sync-state-set",
    "/offset-events",
)
MAX_PARAMS_CHARS = 4000


class AuditMiddleware:
    """Writes every state-changing REST call made with an admin token (an operator's tool) to the
    audit log: who (the token's name), what (method and path), the request body, the HTTP status.
    Dashboard actions record themselves with the state before and after (dashboards/actions.py)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        body = request.body if request.method in ("POST", "PATCH", "PUT", "DELETE") else b""
        response = self.get_response(request)
        principal = getattr(request, "user", None)
        if (
            body is not None
            and request.method in ("POST", "PATCH", "PUT", "DELETE")
            and request.path.startswith("/api/")
            and getattr(principal, "is_admin", False)
            and not request.path.rstrip("/").endswith(BROKER_PROTOCOL_SUFFIXES)
        ):
            try:
                params = json.loads(body or b"{}")
            except ValueError:
                params = {"raw": body[:MAX_PARAMS_CHARS].decode(errors="replace")}
            if not isinstance(params, dict):
                params = {"body": params}
            text = json.dumps(params)
            if len(text) > MAX_PARAMS_CHARS:
                params = {"truncated": text[:MAX_PARAMS_CHARS]}
            record(
                f"token:{principal.name}",
                f"{request.method} {request.path}",
                params=params,
                broker_name=str(params.get("brokerName", ""))[:255],
                cluster_name=str(params.get("clusterName", ""))[:255],
                result="ok" if response.status_code < 400 else f"http {response.status_code}",
                detail=response.content[:500].decode(errors="replace") if response.status_code >= 400 else "",
            )
        return response
