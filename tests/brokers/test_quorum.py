"""The in-sync rule of reference §4.2 (quorum.slave_in_sync): the one definition the quorum count and
the water-level report (and through it the dashboard) use."""

from __future__ import annotations

import pytest

from brokers.ha.quorum import ha_in_sync_count, slave_in_sync

pytestmark = pytest.mark.unit

GAP = 1000


@pytest.mark.parametrize(
    ("master", "ack", "want"),
    [
        pytest.param(5000, 5000, True, id="caught-up"),
        pytest.param(5000, 4001, True, id="gap-just-under-haMaxGapNotInSync"),
        pytest.param(5000, 4000, False, id="gap-equal-to-haMaxGapNotInSync-is-out"),
        pytest.param(5000, 0, False, id="far-behind"),
        pytest.param(500, -1, False, id="never-acked-is-out-even-within-the-gap"),
        pytest.param(0, 0, True, id="empty-log-both-at-zero"),
    ],
)
def test_slave_in_sync(master, ack, want):
    assert slave_in_sync(master, ack, GAP) is want


def test_the_quorum_count_is_the_master_plus_the_slaves_in_sync():
    acks = [5000, 4500, 4000, 100]
    assert ha_in_sync_count(5000, acks, GAP) == 1 + sum(slave_in_sync(5000, a, GAP) for a in acks) == 3
