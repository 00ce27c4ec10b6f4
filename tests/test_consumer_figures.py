"""The figures bench/consumer_failover.py prints (chaos/consumers.py): a redelivery after an ack is
a delivery that began after the group's OK ack, a producer's second stored copy is not one; a pause
with nothing to consume is not a stall."""

from __future__ import annotations

import math

import pytest

from chaos.consumers import Delivery, longest_pause, longest_stall, missing, redeliveries_after_ack

pytestmark = pytest.mark.unit


def d(started: float, message_id: str, offset: int, attempt: int = 1, queue: int = 0) -> Delivery:
    return Delivery(started, started + 0.01, message_id, queue, offset, attempt, "127.0.0.1:1")


@pytest.mark.parametrize(
    "deliveries, acks, want",
    [
        ([d(1, "a", 0)], {"a": 1.5}, (0, 0)),
        ([d(1, "a", 0), d(2, "a", 0)], {"a": 1.5}, (1, 0)),  # a stale offset hands it out again
        ([d(1, "a", 0), d(1.2, "a", 0)], {"a": 1.5}, (0, 0)),  # again before the ack was answered: allowed
        ([d(1, "a", 0), d(2, "a", 0, attempt=2)], {"a": 1.5}, (1, 0)),  # revived although acked
        ([d(1, "a", 0), d(2, "a", 7)], {"a": 1.5}, (0, 1)),  # a second stored copy (producer retry)
        ([d(1, "a", 0), d(2, "a", 0)], {}, (0, 0)),  # never acked: redelivery is the contract
    ],
)
def test_redeliveries_after_ack(deliveries, acks, want):
    assert redeliveries_after_ack(deliveries, acks) == want


def test_longest_pause_and_stall():
    delivered = [1.0, 2.0, 9.0]
    assert longest_pause(delivered, 0.0, 10.0) == 7.0
    # A message acknowledged to its producer at 8 and delivered at 9: the group waited 1 s only.
    assert longest_stall(delivered, [(8.0, 9.0)], 0.0, 10.0) == pytest.approx(1.0)
    # One acknowledged at 2.5 but delivered at 9: a 6.5 s stall.
    assert longest_stall(delivered, [(2.5, 9.0)], 0.0, 10.0) == pytest.approx(6.5)
    # Never delivered: waiting from 3 on; the delivery of another message at 9 ends that stall.
    assert longest_stall(delivered, [(3.0, math.inf)], 0.0, 10.0) == pytest.approx(6.0)
    assert longest_stall(delivered, [], 0.0, 10.0) == 0.0
    assert missing(["a", "b", "c"], {"b"}) == ["a", "c"]
