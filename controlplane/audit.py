"""Writing the operator audit log (controlplane.models.OperatorAction). One way in: every operator
action (dashboard, admin REST, Celery on an operator's behalf) calls ``record``."""

from __future__ import annotations

from .models import OperatorAction


def record(actor: str, action: str, *, cluster_name: str = "", broker_name: str = "", broker_id: int | None = None,
           params: dict | None = None, before: dict | None = None, after: dict | None = None, result: str = "ok",
           detail: str = "") -> OperatorAction:
    return OperatorAction.objects.create(actor=actor[:150], action=action, cluster_name=cluster_name,
                                         broker_name=broker_name, broker_id=broker_id, params=params or {},
                                         before=before or {}, after=after or {}, result=result, detail=detail)
