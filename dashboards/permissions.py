"""Who may do what on the dashboard: every logged-in user views; operators (members of the
"operators" group, or superusers) act."""

from __future__ import annotations

OPERATORS_GROUP = "operators"


def is_operator(user) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    return user.is_superuser or user.groups.filter(name=OPERATORS_GROUP).exists()
