"""Run the invariant checker over the stored history."""

from __future__ import annotations

from .core.invariants import Row, Violation, check
from .models import Transition

FIELDS = (
    "id",
    "broker_name",
    "kind",
    "old_master_broker_id",
    "new_master_broker_id",
    "old_master_epoch",
    "new_master_epoch",
    "old_sync_state_set_epoch",
    "new_sync_state_set_epoch",
    "new_sync_state_set",
    "detail",
)


def check_history(broker_names: list[str] | None = None) -> list[Violation]:
    qs = Transition.objects.order_by("id").values_list(*FIELDS)
    if broker_names:
        qs = qs.filter(broker_name__in=broker_names)
    rows = (Row(*values[:9], tuple(values[9]), values[10]) for values in qs.iterator(chunk_size=5000))
    return check(rows)
