"""Pop consumption rules: receipt handles, acks, invisible time, committed offsets, revive targets."""

import time

import pytest

from brokers.core.pop import ReceiptHandle, dlq_topic, retry_topic
from brokers.pop import PopState

pytestmark = pytest.mark.unit


def test_receipt_handles_round_trip_and_reject_garbage():
    h = ReceiptHandle("g", "T", 3, 42, "abc123")
    assert ReceiptHandle.decode(h.encode()) == h
    assert ReceiptHandle.decode("zz-not-hex") is None and ReceiptHandle.decode("abcd") is None


def test_acks_advance_the_committed_offset_only_over_contiguous_offsets():
    state = PopState({("g", "T", 0): 10})
    handles = state.pop("g", "T", 0, [10, 11, 12], [1, 1, 1], 30_000)
    assert state.queue("g", "T", 0).pop_offset == 13
    assert state.ack(handles[1]) and state.committed() == {("g", "T", 0): 10}
    assert state.ack(handles[0]) and state.committed() == {("g", "T", 0): 12}
    assert not state.ack(handles[0])  # twice: the delivery is gone
    state.finish("g", "T", 0, [13])  # filtered out: consumed without delivery
    assert state.ack(handles[2]) and state.committed() == {("g", "T", 0): 14}


def test_changing_the_invisible_time_issues_a_new_handle_and_retires_the_old():
    state = PopState()
    (old,) = state.pop("g", "T", 0, [0], [1], 30_000)
    new = state.change_invisible(old, 60_000)
    assert new is not None and new.nonce != old.nonce
    assert not state.ack(old) and state.ack(new)
    assert state.change_invisible(new, 1000) is None


def test_expired_deliveries_are_reported_with_their_attempt():
    state = PopState()
    state.pop("g", "T", 1, [5], [3], 1)
    state.pop("g", "T", 1, [6], [1], 60_000)
    time.sleep(0.01)
    assert state.expired() == [("g", "T", 1, 5, 3)]


def test_a_takeover_brings_every_later_deadline_forward_and_keeps_the_handles():
    state = PopState()
    soon, late = state.pop("g", "T", 0, [1], [1], 2_000)[0], state.pop("g", "T", 0, [2], [2], 60_000)[0]
    other = state.pop("g2", "T", 3, [7], [1], 90_000)[0]
    cap = int(time.time() * 1000) + 5_000
    assert state.cap_deadlines(cap) == 2  # the 2 s delivery is due before the cap: left alone
    flights = state.queue("g", "T", 0).in_flight
    assert flights[1].deadline_ms < cap and flights[2].deadline_ms == cap
    assert state.queue("g2", "T", 3).in_flight[7].deadline_ms == cap and flights[2].attempt == 2
    assert state.ack(late) and state.ack(other) and state.ack(soon)  # the old receipt handles still ack


def test_retry_and_dlq_topic_names_follow_rocketmq():
    assert retry_topic("billing", "Orders") == "%RETRY%billing_Orders" and dlq_topic("billing") == "%DLQ%billing"
