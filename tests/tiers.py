"""The test tiers (markers in pyproject.toml): every test chooses exactly one.

``unit``: no PostgreSQL, no Redis (``make test-unit`` runs them with both out of reach); ``integration``:
real PostgreSQL, Redis or Spark in this process; ``e2e``: real processes over real sockets. A plugin of
its own (loaded by tests/conftest.py) so that tests/test_tiers.py can run it on a throw-away suite.
"""

from __future__ import annotations

import pytest

TIERS = ("unit", "integration", "e2e")


def tier_problems(items: list[pytest.Item]) -> list[str]:
    wrong = []
    for item in items:
        tiers = [t for t in TIERS if item.get_closest_marker(t) is not None]
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: " + ("no tier" if not tiers else "two tiers: " + ", ".join(tiers)))
        elif tiers == ["unit"] and (item.get_closest_marker("django_db") or "django_db_setup" in item.fixturenames):
            wrong.append(f"{item.nodeid}: a unit test uses the database; mark its module integration")
    return wrong


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Runs before ``-m`` deselects anything, so a test without a tier fails every run, not only the full one."""
    wrong = tier_problems(items)
    if wrong:
        raise pytest.UsageError(
            "each test module sets `pytestmark` to exactly one of pytest.mark.unit, pytest.mark.integration, "
            "pytest.mark.e2e (tests/tiers.py):\n  " + "\n  ".join(wrong)
        )
