"""The figures bench/special_messages.py prints. Timers: lateness counts from each message's first
receipt; a message received twice from one place of its topic is a pop redelivery, from two places
the wheel wrote it twice. Transactions: a commit answered OK whose message does not come within the
grace is lost, a rolled-back one must never come, a commit received from two places was written
twice; a share is rolled back, the same for a seed. FIFO: a delivery breaks its group's order when a
later message of the group (greater sequence number and greater queue offset) had been acked before
its receive began; a redelivery in place of an unacked message, or a copy the producer stored again
later, does not. A phase not run has no goal."""

from __future__ import annotations

from collections import Counter

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from bench.special.fifo import (
    FifoReceipt,
    acked_copies,
    fifo_figures,
    fifo_key,
    fifo_message_id,
    fifo_order_violations,
    fifo_request,
)
from bench.special.figures import Receipt, goals, rate, stage_figures, timer_figures, txn_figures
from bench.special.sending import accepted_entries, send_requests, spread_due
from bench.special.transactions import end_request, pick_share, resolution_of

pytestmark = pytest.mark.unit

DUE = {"a": 1_000, "b": 2_000, "c": 3_000}
GRACE_MS = 30_000


def r(message_id: str, at_ms: float, offset: int = 0, attempt: int = 1, queue: int = 0) -> Receipt:
    return Receipt(message_id, at_ms, (queue, offset), attempt)


def figures(*receipts: Receipt, stamps=None) -> dict:
    return timer_figures(DUE, receipts, stamps or {}, GRACE_MS)


@pytest.mark.parametrize(
    "receipts, want",
    [
        pytest.param([r("a", 1_050, 0), r("b", 2_100, 1), r("c", 3_010, 2)], {"lost": 0, "early": 0}, id="all on time"),
        pytest.param([r("a", 1_050, 0), r("b", 2_100, 1)], {"lost": 1, "never_received": 1}, id="one never came"),
        pytest.param(
            [r("a", 1_050, 0), r("b", 2_100, 1), r("c", 3_000 + GRACE_MS + 1, 2)],
            {"lost": 1, "never_received": 0},
            id="one came after the grace: lost",
        ),
        pytest.param([r("a", 999, 0), r("b", 2_100, 1), r("c", 3_010, 2)], {"early": 1}, id="one before its time"),
        pytest.param(
            [r("a", 1_050, 0), r("a", 9_000, 0), r("b", 2_100, 1), r("c", 3_010, 2)],
            {"delivered_twice": 1, "stored_twice": 0},
            id="again from the same place: a pop redelivery",
        ),
        pytest.param(
            [r("a", 1_050, 0), r("a", 1_060, 5), r("b", 2_100, 1), r("c", 3_010, 2)],
            {"delivered_twice": 1, "stored_twice": 1},
            id="from two places: stored twice",
        ),
        pytest.param(
            [r("a", 6_000, 40, attempt=2), r("b", 2_100, 1), r("c", 3_010, 2)],
            {"first_on_retry": 1, "delivered_twice": 0, "late_ms_max": 5_000.0},
            id="first seen on a retry (its first answer lost with a master)",
        ),
        pytest.param([r("x", 5, 0)], {"received": 0, "lost": 3}, id="a message not sent here does not count"),
    ],
)
def test_timer_figures(receipts, want):
    got = figures(*receipts)
    assert {k: got[k] for k in want} == want


def test_lateness_is_from_the_first_receipt():
    got = figures(r("a", 1_200, 0), r("a", 1_100, 0), r("b", 2_100, 1), r("c", 3_100, 2))
    assert got["late_ms_max"] == 100.0 and got["late_ms_p50"] == 100.0


def test_a_delivery_timestamp_other_than_the_one_sent_is_counted():
    got = figures(r("a", 1_050), stamps={"a": {1_000}, "b": {2_001}, "c": {3_000, None}, "x": {7}})
    assert got["stamp_mismatch"] == 2


def test_stage_figures_split_the_lateness():
    stored = {"a": (1_000, 1_020, 1_030), "b": (2_000, 2_040, 2_045), "never": (3_000, 3_010, 3_011)}
    got = stage_figures(stored, {"a": r("a", 1_080), "b": r("b", 2_100)})
    assert (got["wheel_lag_ms_max"], got["write_ms_max"], got["consume_ms_max"]) == (40, 10, 55)


def test_due_times_stay_in_their_window():
    due = spread_due([f"m{i}" for i in range(1000)], 5_000, 60_000, seed=1)
    assert min(due.values()) >= 5_000 and max(due.values()) < 65_000
    assert max(due.values()) - min(due.values()) > 50_000  # spread, not bunched


def test_timer_requests_carry_their_delivery_time_and_normal_ones_none():
    ids = [f"{i:032X}" for i in range(5)]
    timers = send_requests("T", ids, b"x", 2, {m: 1_700_000_000_123 + i for i, m in enumerate(ids)})
    assert [len(q.messages) for q in timers] == [2, 2, 1]
    first = timers[0].messages[0].system_properties
    assert first.message_type == pb.MessageType.DELAY and first.delivery_timestamp.ToMilliseconds() == 1_700_000_000_123
    normal = send_requests("N", ids, b"x", 32)[0].messages[0].system_properties
    assert normal.message_type == pb.MessageType.NORMAL and not normal.HasField("delivery_timestamp")


def test_goals_only_for_what_ran():
    assert goals({"timer_failover_lost": 0}) == {"timer_failover_lost_zero": True}
    got = goals({"timer_p99_late_ms": 250.0, "timer_per_s": 12_000.0, "timer_lost": 0, "timer_early": 0})
    assert got == {"timer_p99_late_ok": False, "timer_per_s_ok": True, "timer_lost_zero": True, "timer_early_zero": True}


# --- transactions ---------------------------------------------------------------------------------

COMMITTED = {"a": 10.0, "b": 20.0, "c": 30.0}  # message id -> its COMMIT answered OK (time.time(), s)
GRACE_S = 30.0


def txn(*receipts: Receipt, rolled_back=(), consuming_from: float = 0.0) -> dict:
    return txn_figures(COMMITTED, rolled_back, receipts, GRACE_S, consuming_from)


@pytest.mark.parametrize(
    "receipts, rolled_back, want",
    [
        pytest.param(
            [r("a", 10_100, 0), r("b", 20_100, 1), r("c", 30_100, 2)],
            (),
            {"received": 3, "lost_commits": 0, "delivered_twice": 0, "rolled_back_delivered": 0},
            id="every commit came",
        ),
        pytest.param([r("a", 10_100, 0), r("b", 20_100, 1)], (), {"lost_commits": 1, "never_received": 1}, id="one never came"),
        pytest.param(
            [r("a", 10_100, 0), r("b", 20_100, 1), r("c", 30_000 + GRACE_S * 1000 + 1, 2)],
            (),
            {"lost_commits": 1, "never_received": 0},
            id="one came after the grace: lost",
        ),
        pytest.param(
            [r("a", 10_100, 0), r("b", 20_100, 1), r("c", 30_100, 2), r("r", 31_000, 3)],
            {"r", "q"},
            {"rolled_back_delivered": 1, "received": 3},
            id="a rolled-back transaction's message came",
        ),
        pytest.param(
            [r("a", 10_100, 0), r("a", 25_000, 0), r("b", 20_100, 1), r("c", 30_100, 2)],
            (),
            {"delivered_twice": 1, "stored_twice": 0},
            id="again from the same place: a pop redelivery",
        ),
        pytest.param(
            [r("a", 10_100, 0), r("a", 10_200, 7), r("b", 20_100, 1), r("c", 30_100, 2)],
            (),
            {"delivered_twice": 1, "stored_twice": 1},
            id="from two places: the commit was written twice",
        ),
        pytest.param(
            [r("x", 10_100, 0)], (), {"received": 0, "lost_commits": 3}, id="a message not committed here does not count"
        ),
    ],
)
def test_txn_figures(receipts, rolled_back, want):
    got = txn(*receipts, rolled_back=rolled_back)
    assert {k: got[k] for k in want} == want


def test_consumers_started_after_the_commits_get_the_grace_from_their_start():
    receipts = [r("a", 100_000, 0), r("b", 100_500, 1), r("c", 101_000, 2)]
    assert txn(*receipts)["lost_commits"] == 3  # each came more than 30 s after its commit
    got = txn(*receipts, consuming_from=90.0)
    assert got["lost_commits"] == 0 and got["receipt_ms_max"] == 11_000.0


def test_rates_count_from_the_first_send_to_the_last_answer():
    assert rate([11.0, 12.0, 14.0], since=10.0) == 0.75
    assert rate([], since=10.0) == 0.0 and rate([1.0], since=None) == 0.0


def test_a_share_is_rolled_back_and_the_same_for_a_seed():
    ids = [f"m{i}" for i in range(1000)]
    picked = pick_share(ids, 0.1, seed=3)
    assert len(picked) == 100 and picked <= set(ids) and picked == pick_share(ids, 0.1, seed=3)
    assert resolution_of("m0", {"m0"}) == pb.TransactionResolution.ROLLBACK
    assert resolution_of("m1", {"m0"}) == pb.TransactionResolution.COMMIT


def test_half_message_requests_are_transactional_without_a_delivery_time():
    ids = [f"{i:032X}" for i in range(3)]
    halves = send_requests("T", ids, b"x", 2, transaction=True)
    assert [len(q.messages) for q in halves] == [2, 1]
    sp = halves[0].messages[0].system_properties
    assert sp.message_type == pb.MessageType.TRANSACTION and not sp.HasField("delivery_timestamp")
    with pytest.raises(ValueError):
        send_requests("T", ids, b"x", 2, {m: 1 for m in ids}, transaction=True)


def test_end_requests_name_the_transaction_and_its_source():
    got = end_request("T", "m1", "t1", pb.TransactionResolution.COMMIT, pb.TransactionSource.SOURCE_SERVER_CHECK)
    assert (got.topic.name, got.message_id, got.transaction_id) == ("T", "m1", "t1")
    assert got.resolution == pb.TransactionResolution.COMMIT and got.source == pb.TransactionSource.SOURCE_SERVER_CHECK
    assert end_request("T", "m1", "t1", pb.TransactionResolution.ROLLBACK).source == pb.TransactionSource.SOURCE_CLIENT


def test_txn_goals_only_for_what_ran():
    assert goals({"txn_failover_lost_commits": 0}) == {"txn_failover_lost_commits_zero": True}
    got = goals({"txn_commits_per_s": 4_000.0, "txn_lost_commits": 0, "txn_rolled_back_delivered": 1})
    assert got == {"txn_commits_per_s_ok": False, "txn_lost_commits_zero": True, "txn_rolled_back_delivered_zero": False}
    assert goals({"txn_check_lost": 0}) == {"txn_check_lost_zero": True}


def test_a_send_answer_counts_its_refusals_by_code_and_a_whole_refusal_for_every_message():
    answer = spb.SendMessageResponse()
    answer.entries.add(status=pb.Status(code=pb.Code.OK), message_id="a", transaction_id="a")
    answer.entries.add(status=pb.Status(code=pb.Code.FORBIDDEN), message_id="b")
    failures: Counter = Counter()
    assert [e.transaction_id for e in accepted_entries(answer, 2, failures)] == ["a"]
    assert failures == {"FORBIDDEN": 1}
    refused = spb.SendMessageResponse(status=pb.Status(code=pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE))
    assert accepted_entries(refused, 32, failures) == [] and failures["MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"] == 32


# --- FIFO ------------------------------------------------------------------------------------------


def fr(seq: int, started: float, offset: int | None = None, attempt: int = 1, group: int = 7) -> FifoReceipt:
    """A delivery of ``group``'s message ``seq`` (at queue offset ``seq`` unless told), its receive
    begun at ``started`` and answered 0.01 later."""
    return FifoReceipt(
        fifo_message_id(group, seq), group, seq, seq if offset is None else offset, started, started + 0.01, attempt
    )


def violations(receipts: list[FifoReceipt], acks: dict[str, float]) -> list[tuple[int, int]]:
    """(seq, attempt) of every delivery that broke its group's order."""
    return [(r.seq, r.attempt) for r in fifo_order_violations(receipts, acked_copies(receipts, acks))]


def acked(group: int = 7, **seq_at: float) -> dict[str, float]:
    return {fifo_message_id(group, int(k[1:])): at for k, at in seq_at.items()}


@pytest.mark.parametrize(
    "receipts, acks, want",
    [
        pytest.param([fr(0, 1.0), fr(1, 2.0), fr(2, 3.0)], acked(s0=1.5, s1=2.5, s2=3.5), [], id="in order, each acked"),
        pytest.param(
            [fr(0, 1.0), fr(1, 1.0), fr(0, 12.0, attempt=2), fr(1, 12.0, attempt=2)],
            acked(s0=12.5, s1=12.5),
            [],
            id="an unacked batch handed out again in place: a redelivery, not a violation",
        ),
        pytest.param(
            [fr(0, 1.0), fr(1, 2.0), fr(0, 3.0, attempt=2)],
            acked(s1=2.5),
            [(0, 2)],
            id="the earlier message again after the later one was acked",
        ),
        pytest.param(
            [fr(0, 1.0), fr(1, 2.0), fr(0, 3.0, attempt=2)],
            acked(s0=1.5, s1=2.5),
            [(0, 2)],
            id="acked messages handed out again from a stale place (a new master without the acks)",
        ),
        pytest.param([fr(1, 1.0), fr(0, 2.0)], acked(s1=1.5, s0=2.5), [(0, 1)], id="stored out of order and received so"),
        pytest.param(
            [fr(0, 1.0), fr(1, 2.0), fr(0, 3.0, offset=2)],
            acked(s0=1.5, s1=2.5),
            [],
            id="a copy the producer stored again after the later message: not a violation",
        ),
        pytest.param(
            [fr(0, 1.0), fr(1, 2.0), fr(0, 2.4, attempt=2)],
            acked(s1=2.5),
            [],
            id="received before the later message's ack was answered: not proven",
        ),
        pytest.param(
            [fr(0, 1.0), fr(1, 2.0), fr(0, 3.0, group=8)],
            acked(s1=2.5),
            [],
            id="another group's message is not held back by this group's acks",
        ),
        pytest.param([fr(0, 1.0), fr(1, 2.0), fr(0, 3.0, attempt=2)], {}, [], id="nothing acked: nothing proven"),
    ],
)
def test_fifo_order_violations(receipts, acks, want):
    assert violations(receipts, acks) == want


def test_the_acked_copy_is_the_delivery_that_came_last_before_the_ack():
    first, again = fr(0, 1.0), fr(0, 5.0, offset=9)
    got = acked_copies([first, again, fr(0, 20.0, offset=9)], acked(s0=6.0))
    assert got == [(again, 6.0)]


def test_fifo_figures_count_lost_redelivered_and_violations():
    receipts = [fr(0, 1.0), fr(1, 2.0), fr(0, 3.0, attempt=2), fr(1, 4.0, attempt=2)]
    acks = acked(s1=2.5)
    accepted = [fifo_message_id(7, s) for s in range(3)]
    copies = acked_copies(receipts, acks)
    got = fifo_figures(accepted, receipts, fifo_order_violations(receipts, copies), copies)
    want = {"received": 2, "lost": 1, "redelivered": 2, "redelivered_after_ack": 1, "stored_twice": 0, "order_violations": 1}
    assert got == want


def test_a_copy_stored_again_is_not_a_redelivery_after_its_ack():
    receipts = [fr(0, 1.0), fr(0, 3.0, offset=5)]
    copies = acked_copies(receipts, acked(s0=1.5))
    got = fifo_figures([fifo_message_id(7, 0)], receipts, [], copies)
    assert (got["redelivered"], got["redelivered_after_ack"], got["stored_twice"]) == (1, 0, 1)


def test_a_fifo_id_names_its_group_and_sequence_number():
    assert len(fifo_message_id(99, 123_456)) == 32 and fifo_key(fifo_message_id(99, 123_456)) == (99, 123_456)


def test_fifo_requests_carry_their_group_in_order():
    request = fifo_request("F", 3, [4, 5], b"x")
    sps = [m.system_properties for m in request.messages]
    assert [sp.message_type for sp in sps] == [pb.MessageType.FIFO] * 2
    assert {sp.message_group for sp in sps} == {"fifo-003"}
    assert [m.user_properties["seq"] for m in request.messages] == ["4", "5"]


def test_fifo_goals():
    assert goals({"fifo_order_violations": 0, "fifo_lost": 2}) == {"fifo_order_violations_zero": True, "fifo_lost_zero": False}
