"""Pop consumption rules: receipt handles, acks, invisible time, committed offsets, revive targets."""

import time

import pytest

from brokers.pop import PopState, ReceiptHandle, dlq_topic, retry_topic

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


def test_retry_and_dlq_topic_names_follow_rocketmq():
    assert retry_topic("billing", "Orders") == "%RETRY%billing_Orders" and dlq_topic("billing") == "%DLQ%billing"
