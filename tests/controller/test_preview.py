"""The preview of an election (the dashboard's elect dialog): the same pure rule as the election, plus
data at risk and uncleanliness. One row per case; no database, no Redis."""

from __future__ import annotations

import pytest

from controlplane.controller.core.preview import ElectionPreview, isolated_as_dead, preview_election
from controlplane.controller.core.state import LiveInfo, Replica, SyncState

pytestmark = pytest.mark.unit


def state(master: int | None = 1, in_set: tuple[int, ...] = (1, 2), replicas: int = 3) -> SyncState:
    reps = tuple(Replica(i, f"10.0.0.{i}:10911", f"10.0.0.{i}:10911;{i}") for i in range(1, replicas + 1))
    return SyncState("c1", "b1", master, 1, 1, frozenset(in_set), reps)


def live(*rows: tuple[int, bool, int]) -> dict[int, LiveInfo]:
    """(brokerId, alive, maxOffset) each, all at epoch 1."""
    return {i: LiveInfo(i, alive, epoch=1, max_offset=offset) for i, alive, offset in rows}


ALL_UP = live((1, True, 1000), (2, True, 900), (3, True, 700))
MASTER_DOWN = live((1, False, 1000), (2, True, 900), (3, True, 700))

CASES = [
    # id, state, live view, designated id, enable unclean, expected (winner, at risk, unclean, refusal's detail)
    ("designate-in-sync-replica: its gap to the best replica is at risk", state(), ALL_UP, 2, False, (2, 100, False, None)),
    (
        "designate-the-live-master-itself: refused, nothing at risk",
        state(),
        ALL_UP,
        1,
        False,
        (None, 0, False, "the master is still alive"),
    ),
    (
        "designate-outside-the-set: refused without unclean elections, and it would be unclean",
        state(),
        ALL_UP,
        3,
        False,
        (None, 0, True, "no eligible replica"),
    ),
    ("designate-outside-the-set: unclean winner loses its gap", state(), ALL_UP, 3, True, (3, 300, True, None)),
    (
        "controller-choice-master-dead: the in-sync replica wins; the dead master's bytes are at risk",
        state(),
        MASTER_DOWN,
        None,
        False,
        (2, 100, False, None),
    ),
    (
        "controller-choice-no-master-alive-in-set: no winner, no bytes counted",
        state(in_set=(1,)),
        MASTER_DOWN,
        None,
        False,
        (None, 0, False, "no replica could be elected"),
    ),
    (
        "controller-choice-unclean: the best outside replica wins",
        state(in_set=(1,)),
        MASTER_DOWN,
        None,
        True,
        (2, 100, True, None),
    ),
    (
        "designate-dead-replica: refused",
        state(),
        live((1, True, 1000), (2, False, 900), (3, True, 700)),
        2,
        False,
        (None, 0, False, "no eligible replica"),
    ),
    ("no-heartbeats-at-all: nothing to elect", state(), {}, None, False, (None, 0, False, "no replica could be elected")),
]


@pytest.mark.parametrize(
    ("sync_state", "live_view", "broker_id", "unclean", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_preview_of_an_election(sync_state, live_view, broker_id, unclean, expected):
    preview = preview_election(sync_state, live_view, broker_id, enable_unclean=unclean)
    winner, at_risk, is_unclean, refusal = expected
    assert (preview.winner, preview.data_at_risk_bytes, preview.unclean) == (winner, at_risk, is_unclean)
    if refusal is None:
        assert preview.detail == ""
    else:
        assert refusal in preview.detail  # a refusal says why


def test_an_isolated_replica_is_seen_dead_and_never_wins():
    view = isolated_as_dead(ALL_UP, frozenset({2}))
    assert [i.alive for i in view.values()] == [True, False, True] and view[2].max_offset == 900
    assert isolated_as_dead(ALL_UP, frozenset()) == ALL_UP
    assert preview_election(state(), view, 2, enable_unclean=False).winner is None
    assert preview_election(state(master=None), view, None, enable_unclean=False).winner == 1


def test_as_dict_uses_the_page_field_names():
    assert ElectionPreview(2, 100, False, "").as_dict() == {"winner": 2, "dataAtRiskBytes": 100, "unclean": False, "detail": ""}
