"""The history checker (``core.invariants.check``, reference §9): it catches each kind of violation in a
hand-built history and accepts a valid one, including a dropped and re-created broker set."""

from __future__ import annotations

import pytest

from controlplane.controller.core.invariants import Row, check
from controlplane.controller.core.rules import DROPPED_SET

pytestmark = pytest.mark.unit


def row(id_, kind, old_master, new_master, old_me, new_me, old_sse, new_sse, new_set=(), detail="", name="b1") -> Row:
    return Row(id_, name, kind, old_master, new_master, old_me, new_me, old_sse, new_sse, tuple(sorted(new_set)), detail)


# A valid start: replica 1 and 2 registered, 1 elected (epoch 1/1), set expanded to {1, 2} (ssEpoch 2).
START = [
    row(1, "apply_broker_id", None, None, 0, 0, 0, 0),
    row(2, "apply_broker_id", None, None, 0, 0, 0, 0),
    row(3, "elect", None, 1, 0, 1, 0, 1, (1,)),
    row(4, "alter", 1, 1, 1, 1, 1, 2, (1, 2)),
]

VALID_HISTORY = [
    *START,
    row(5, "update_address", 1, 1, 1, 1, 2, 2, (1, 2)),
    # master 1 dies: 2 is elected (controller-triggered)
    row(6, "elect", 1, 2, 1, 2, 2, 3, (2,)),
    # 2 dies too, nobody electable: master null, masterEpoch moves, set and its epoch kept
    row(7, "elect", 2, None, 2, 3, 3, 3, (2,)),
    # 2 comes back and asks
    row(8, "elect", None, 2, 3, 4, 3, 4, (2,)),
    row(9, "alter", 2, 2, 4, 4, 4, 5, (1, 2)),
    row(10, "alter", 2, 2, 4, 4, 5, 6, (2,)),
    # the operator removes dead replica 1: no epoch moves
    row(11, "clean", 2, 2, 4, 4, 6, 6, (2,)),
    # later everything is wiped: the whole set is dropped ...
    row(12, "elect", 2, None, 4, 5, 6, 6, (2,)),
    row(13, "clean", None, None, 5, 5, 6, 6, (), DROPPED_SET),
    # ... and re-created: its epochs start again, and epoch 1 may have another master than before
    row(14, "apply_broker_id", None, None, 0, 0, 0, 0),
    row(15, "apply_broker_id", None, None, 0, 0, 0, 0),
    row(16, "elect", None, 2, 0, 1, 0, 1, (2,)),
    row(17, "alter", 2, 2, 1, 1, 1, 2, (1, 2)),
    row(18, "elect", 2, 1, 1, 2, 2, 3, (1,)),
]


def rules_of(rows) -> list[tuple[int, str]]:
    return [(v.transition_id, v.rule) for v in check(rows)]


# --- accepted -------------------------------------------------------------------------------------


def test_accepts_a_valid_history_with_a_dropped_and_recreated_set():
    assert check(VALID_HISTORY) == []


def test_accepts_an_empty_history():
    assert check([]) == []


def test_accepts_rows_out_of_id_order_and_interleaved_sets():
    other = [
        row(
            100 + r.id,
            r.kind,
            r.old_master_broker_id,
            r.new_master_broker_id,
            r.old_master_epoch,
            r.new_master_epoch,
            r.old_sync_state_set_epoch,
            r.new_sync_state_set_epoch,
            r.new_sync_state_set,
            r.detail,
            name="b2",
        )
        for r in START
    ]
    mixed = [*reversed(VALID_HISTORY), *other]
    assert check(mixed) == []


def test_accepts_two_sets_with_the_same_epochs_and_different_masters():
    b2 = [row(10, "apply_broker_id", None, None, 0, 0, 0, 0, name="b2"), row(11, "elect", None, 2, 0, 1, 0, 1, (2,), name="b2")]
    assert check([*START, *b2]) == []


def test_accepts_a_first_election_with_no_master_then_a_master():
    rows = [
        row(1, "apply_broker_id", None, None, 0, 0, 0, 0),
        row(2, "elect", None, None, 0, 1, 0, 0, ()),
        row(3, "elect", None, 1, 1, 2, 0, 1, (1,)),
    ]
    assert check(rows) == []


# --- caught ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows, bad_id, rule",
    [
        pytest.param(
            [*START, row(5, "elect", 1, 2, 1, 1, 2, 3, (2,))],
            5,
            "two masters in one epoch",
            id="two-masters-in-one-epoch-second-elect-lands-on-same-epoch",
        ),
        pytest.param(
            [*START, row(5, "elect", 1, 2, 2, 3, 2, 3, (2,)), row(6, "elect", 2, 1, 2, 3, 3, 4, (1,))],
            6,
            "two masters in one epoch",
            id="two-masters-in-one-epoch-after-a-stale-elect",
        ),
        pytest.param(
            [*START, row(5, "alter", 1, 2, 1, 1, 2, 3, (1, 2))], 5, None, id="two-masters-in-one-epoch-master-changed-by-an-alter"
        ),
        pytest.param(
            [*START, row(5, "elect", 1, 2, 1, 0, 2, 3, (2,))],
            5,
            "masterEpoch decreased",
            id="decreasing-master-epoch-within-a-row",
        ),
        pytest.param(
            [*START, row(5, "update_address", 1, 1, 0, 0, 2, 2, (1, 2))],
            5,
            "stale transition",
            id="decreasing-master-epoch-between-rows",
        ),
        pytest.param(
            [*START, row(5, "alter", 1, 1, 1, 1, 1, 2, (1,))], 5, "stale transition", id="stale-alter-old-sync-state-set-epoch"
        ),
        pytest.param([*START, row(5, "alter", 1, 1, 0, 0, 2, 3, (1,))], 5, "stale transition", id="stale-alter-old-master-epoch"),
        pytest.param(
            [*START, row(5, "elect", 1, 2, 1, 3, 2, 3, (2,))],
            5,
            "elect must move masterEpoch by one",
            id="elect-moves-master-epoch-by-two",
        ),
        pytest.param(
            [*START, row(5, "elect", 1, 2, 1, 1, 2, 3, (2,))],
            5,
            "elect must move masterEpoch by one",
            id="elect-leaves-master-epoch",
        ),
        pytest.param(
            [*START, row(5, "elect", 1, 2, 1, 2, 2, 4, (2,))],
            5,
            "elect must move syncStateSetEpoch by one",
            id="elect-moves-sync-state-set-epoch-by-two",
        ),
        pytest.param(
            [*START, row(5, "elect", 1, 2, 1, 2, 2, 3, (1,))],
            5,
            "SyncStateSet lacks the master",
            id="set-lacks-the-master-after-elect",
        ),
        pytest.param(
            [*START, row(5, "alter", 1, 1, 1, 1, 2, 3, (2,))],
            5,
            "SyncStateSet lacks the master",
            id="set-lacks-the-master-after-alter",
        ),
        pytest.param(
            [*START, row(5, "alter", 1, 1, 1, 2, 2, 3, (1,))], 5, "alter moved masterEpoch", id="alter-moves-master-epoch"
        ),
        pytest.param(
            [*START, row(5, "alter", 1, 1, 1, 1, 2, 4, (1,))],
            5,
            "alter must move syncStateSetEpoch by one",
            id="alter-moves-sync-state-set-epoch-by-two",
        ),
        pytest.param([*START, row(5, "clean", 1, 1, 1, 1, 2, 3, (1,))], 5, "clean moved an epoch", id="clean-moves-an-epoch"),
        pytest.param(
            [*START, row(5, "update_address", 1, 1, 1, 2, 2, 2, (1, 2))],
            5,
            "update_address moved an epoch",
            id="update-address-moves-an-epoch",
        ),
        pytest.param(
            [*START, row(5, "clean", 1, 1, 1, 1, 2, 2, (1,)), row(6, "apply_broker_id", None, None, 0, 0, 0, 0)],
            6,
            "stale transition",
            id="epochs-restart-without-a-dropped-set",
        ),
        # §9: "elect success: set = {new}"
        pytest.param(
            [*START, row(5, "elect", 1, 2, 1, 2, 2, 3, (1, 2))], 5, None, id="elect-success-set-is-not-just-the-new-master"
        ),
        # §9: "elect with nobody electable: master=null, masterEpoch+1, set unchanged"
        pytest.param(
            [*START, row(5, "elect", 1, None, 1, 2, 2, 3, (1, 2))], 5, None, id="elect-without-master-moves-sync-state-set-epoch"
        ),
    ],
)
def test_catches(rows, bad_id, rule):
    found = rules_of(rows)
    assert any(t == bad_id for t, _ in found), f"nothing reported for #{bad_id}: {found}"
    if rule is not None:
        assert (bad_id, rule) in found, found


def test_violation_names_the_set_and_the_transition():
    v = check([*START, row(5, "elect", 1, 2, 1, 3, 2, 3, (2,))])
    assert len(v) == 1
    assert (v[0].broker_name, v[0].transition_id) == ("b1", 5)
    assert str(v[0]).startswith("b1 #5: elect must move masterEpoch by one")


def test_a_dropped_set_resets_the_masters_by_epoch():
    """After a drop, epoch 1 may have another master; without the drop it may not."""
    with_drop = [
        *START,
        row(5, "elect", 1, None, 1, 2, 2, 2, (1, 2)),
        row(6, "clean", None, None, 2, 2, 2, 2, (), DROPPED_SET),
        row(7, "apply_broker_id", None, None, 0, 0, 0, 0),
        row(8, "elect", None, 2, 0, 1, 0, 1, (2,)),
    ]
    assert check(with_drop) == []
    without_drop = [*with_drop[:5], row(6, "clean", None, None, 2, 2, 2, 2, (1, 2)), *with_drop[6:]]
    found = rules_of(without_drop)
    assert (8, "two masters in one epoch") in found and (7, "stale transition") in found
