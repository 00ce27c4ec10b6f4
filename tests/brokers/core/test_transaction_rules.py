"""EndTransaction's early answers and a check run's actions as values (brokers/core/transaction.py;
which EndTransaction is carried out, when a check is due and who relays it: tests/brokers/test_transaction.py
and test_transaction_check.py)."""

from __future__ import annotations

import pytest

from brokers.core.codes import Code
from brokers.core.transaction import CheckAction, Half, Resolution, check_action, end_answer

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "transaction_id, resolution, want",
    [
        ("", Resolution.COMMIT, (Code.INVALID_TRANSACTION_ID, "transaction_id is blank")),
        ("  ", None, (Code.INVALID_TRANSACTION_ID, "transaction_id is blank")),
        ("t1", None, (Code.OK, "unresolved: checked again later")),
        ("t1", Resolution.COMMIT, None),
        ("t1", Resolution.ROLLBACK, None),
    ],
    ids=["blank", "blank-unresolved", "unresolved", "commit", "rollback"],
)
def test_an_end_transaction_answered_without_being_carried_out(transaction_id, resolution, want):
    got = end_answer(transaction_id, resolution)
    assert (None if got is None else (got.code, got.message)) == want


@pytest.mark.parametrize(
    "checks, acting, want",
    [(0, False, CheckAction.CHECK), (15, False, CheckAction.DISCARD), (15, True, None)],
    ids=["check", "discard", "acting-leaves-the-discard"],
)
def test_a_check_runs_action_is_an_enum(checks, acting, want):
    got = check_action(Half(3, "Pay", 1_000, checks), 10_000, timeout_ms=6_000, check_max=15, acting=acting)
    assert got is want
