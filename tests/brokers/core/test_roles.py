"""The role a controller-mode broker takes (brokers/core/roles.py), table-tested: from an answer naming
a master (a push, an election's reply) and from its replica-info poll. Broker 2 holds epoch 5."""

from __future__ import annotations

import pytest

from brokers.core.roles import RoleAction, RoleDecision, after_poll, role_to_take

pytestmark = pytest.mark.unit

ME, EPOCH = 2, 5
NEW_MASTER_IS_ME = {"masterBrokerId": 2, "masterEpoch": 6, "syncStateSet": [1, 2], "syncStateSetEpoch": 3}
NEW_MASTER_IS_1 = {"masterBrokerId": 1, "masterEpoch": 6, "masterAddress": "127.0.0.1:10911"}


@pytest.mark.parametrize(
    "answer, want",
    [
        pytest.param(NEW_MASTER_IS_ME, RoleDecision(RoleAction.MASTER, 6, 2, None, frozenset({1, 2}), 3), id="me-newer-epoch"),
        pytest.param(NEW_MASTER_IS_1, RoleDecision(RoleAction.SLAVE, 6, 1, "127.0.0.1:10911"), id="another-newer-epoch"),
        pytest.param(
            {**NEW_MASTER_IS_ME, "syncStateSet": None},
            RoleDecision(RoleAction.MASTER, 6, 2, None, frozenset(), 3),
            id="me-no-sync-state-set",
        ),
        pytest.param({**NEW_MASTER_IS_1, "masterEpoch": 5}, RoleDecision(RoleAction.NONE), id="same-epoch-moves-nothing"),
        pytest.param({**NEW_MASTER_IS_1, "masterEpoch": 4}, RoleDecision(RoleAction.NONE), id="older-epoch-moves-nothing"),
        pytest.param({"masterEpoch": 7}, RoleDecision(RoleAction.NONE), id="no-master-named"),
        pytest.param({"masterBrokerId": 1}, RoleDecision(RoleAction.NONE), id="no-epoch-is-epoch-0"),
    ],
)
def test_an_answer_naming_a_master_moves_the_role_only_for_a_newer_epoch(answer, want):
    assert role_to_take(answer, ME, EPOCH) == want


@pytest.mark.parametrize(
    "info, following, want",
    [
        pytest.param(NEW_MASTER_IS_1, 2, RoleAction.SLAVE, id="newer-master-elsewhere"),
        pytest.param(NEW_MASTER_IS_ME, 1, RoleAction.MASTER, id="newer-master-is-me"),
        pytest.param({"masterEpoch": 6}, 1, RoleAction.ELECT, id="newer-epoch-without-a-master-elects"),
        pytest.param({"masterBrokerId": 2, "masterEpoch": 5}, 2, RoleAction.SYNC_STATE_SET, id="my-own-epoch-as-master"),
        pytest.param({"masterBrokerId": 1, "masterEpoch": 5}, 1, RoleAction.NONE, id="my-own-epoch-as-slave"),
        pytest.param({"masterBrokerId": 1, "masterEpoch": 4}, 2, RoleAction.NONE, id="an-older-epoch"),
        pytest.param({}, None, RoleAction.NONE, id="an-empty-answer"),
    ],
)
def test_a_replica_info_poll_says_what_to_do(info, following, want):
    assert after_poll(info, ME, EPOCH, following).action is want
