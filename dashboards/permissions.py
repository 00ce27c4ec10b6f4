"""Who may do what on the dashboard: every logged-in user views; operators act. "Operator" has one
definition, ``controlplane.auth.is_operator`` (the "operators" group or superusers)."""

from __future__ import annotations

from controlplane.auth import OPERATORS_GROUP, is_operator

__all__ = ["OPERATORS_GROUP", "is_operator"]
