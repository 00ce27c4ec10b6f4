"""The token bucket (controlplane/budget.py) the broker websocket and the dashboard's hand-overs share."""

from __future__ import annotations

import pytest

from controlplane.budget import TokenBucket

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "rate, burst, takes, want",
    [
        pytest.param(10.0, 3, [0, 0, 0, 0], [True, True, True, False], id="a-burst-then-nothing"),
        pytest.param(10.0, 1, [0, 0.05, 0.1], [True, False, True], id="one-token-each-tenth-of-a-second"),
        pytest.param(10.0, 2, [0, 0, 5, 5, 5], [True, True, True, True, False], id="refills-no-further-than-the-burst"),
        pytest.param(1.0, 1, [0, 0.5, 0.99, 1.0], [True, False, False, True], id="slow-rate"),
    ],
)
def test_a_bucket_gives_a_burst_then_its_rate(rate, burst, takes, want):
    bucket = TokenBucket(rate, burst, 0.0)
    assert [bucket.take(t) for t in takes] == want


@pytest.mark.parametrize(
    "takes, waits",
    [
        pytest.param([0, 0, 0], [0.0, 0.0, 0.5], id="waits-for-the-next-token-once-empty"),
        pytest.param([0, 0, 0, 0.5], [0.0, 0.0, 0.5, 0.5], id="the-waited-token-is-spent"),
        pytest.param([0, 0, 2], [0.0, 0.0, 0.0], id="no-wait-after-a-refill"),
    ],
)
def test_taking_a_token_waiting_says_how_long_to_wait(takes, waits):
    bucket = TokenBucket(2.0, 2, 0.0)
    assert [pytest.approx(bucket.take_waiting(t)) for t in takes] == waits
