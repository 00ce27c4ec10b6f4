"""Which one broker of a set relays a transaction check (brokers/core/transaction.py, carried out by
brokers/transaction_check.py): the rule as a
table whose rows are the cases of issue 34 (the serving broker first, else the live replica with the
smallest id that holds a stream of the producer group), a run's checks assigned to their relays, and
the peer bodies that carry them."""

from __future__ import annotations

import pytest

from brokers import transaction_check
from brokers.core.transaction import PGROUP, TRANSACTION_ID, assign, relay_for
from brokers.store.message import Message
from brokers.transaction import into_half
from brokers.transaction_check import (
    checks_bodies,
    group_of,
    held_groups,
    parse_checks,
    parse_groups,
)

pytestmark = pytest.mark.unit

M, S1, S2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
CONTROLLER_SET = {0: M, 1: S1, 2: S2}
ACTING_SET = {1: S1, 2: S2}  # the master (id 0) is dead: slave 1 acts for it


@pytest.mark.parametrize(
    "serving, members, holders, want",
    [
        pytest.param(M, CONTROLLER_SET, {M, S1, S2}, M, id="the serving master holds a stream: it relays, no one else"),
        pytest.param(M, CONTROLLER_SET, {M}, M, id="only the master holds one (the Node.js client)"),
        pytest.param(M, CONTROLLER_SET, {S1, S2}, S1, id="python client's routes name the slaves: the smallest id relays"),
        pytest.param(M, CONTROLLER_SET, {S2}, S2, id="only slave 2 holds one: it relays"),
        pytest.param(M, CONTROLLER_SET, set(), None, id="no producer of the group connected: nobody"),
        pytest.param(S1, ACTING_SET, {S1, S2}, S1, id="the acting master holds one: it relays"),
        pytest.param(S1, ACTING_SET, {S2}, S2, id="the acting master holds none: the other slave relays"),
        pytest.param(S2, {0: S2, 1: S1}, {S1, S2}, S2, id="a new master with a higher old id: still itself first"),
        pytest.param(M, {0: M, 2: S2}, {S1}, None, id="a holder that is no live replica of the set is not asked"),
    ],
)
def test_one_broker_relays_each_check(serving, members, holders, want):
    assert relay_for(serving, members, holders) == want


def check(txn: str, group: str = "Pay") -> Message:
    half = into_half(Message(group, 0, f"body-{txn}".encode(), {"UNIQ_KEY": txn}), txn)
    half.queue_offset, half.store_timestamp = 7, 1_700_000_000_000
    return half


def test_a_runs_checks_go_each_to_the_one_relay_of_its_group():
    checks = [check("t1", "Pay"), check("t2", "Ship"), check("t3", "Pay"), check("t4", "Nobody")]
    plan = assign(checks, group_of, M, CONTROLLER_SET, {"Pay": {M, S1}, "Ship": {S2, S1}})
    assert {relay: [c.properties[TRANSACTION_ID] for c in mine] for relay, mine in plan.items()} == {
        M: ["t1", "t3"],
        S1: ["t2"],
    }


def test_checks_cross_the_peer_channel_as_their_stored_records(monkeypatch):
    monkeypatch.setattr(transaction_check, "MAX_CHECKS", 2)
    checks = [check(f"t{i}") for i in range(5)]
    bodies = checks_bodies(checks)
    assert [count for count, _ in bodies] == [2, 2, 1]
    back = [m for _, body in bodies for m in parse_checks(body)]
    assert [(m.topic, m.body, dict(m.properties), m.queue_offset, m.store_timestamp) for m in back] == [
        (m.topic, m.body, dict(m.properties), m.queue_offset, m.store_timestamp) for m in checks
    ]


@pytest.mark.parametrize(
    "body, problem",
    [
        ({}, "checks: must be a list"),
        ({"checks": "abc"}, "checks: must be a list"),
        ({"checks": [1]}, "checks: must be a list"),
        ({"checks": ["not base64!"]}, r"checks\[0\]: not a record"),
        ({"checks": ["AAAA"]}, r"checks\[0\]: not a record"),
    ],
)
def test_a_relay_request_that_is_no_list_of_records_is_refused(body, problem):
    with pytest.raises(ValueError, match=problem):
        parse_checks(body)


def test_a_record_of_no_producer_group_is_refused():
    (_, body), *_ = checks_bodies([Message("Pay", 0, b"x", {"UNIQ_KEY": "m"})])
    with pytest.raises(ValueError, match="not a half message of a producer group"):
        parse_checks(body)
    assert PGROUP not in Message("Pay", 0, b"x").properties


def test_the_holders_question_and_answer():
    assert parse_groups({"producerGroups": ["Pay", "Ship"]}) == ["Pay", "Ship"]
    with pytest.raises(ValueError, match="producerGroups"):
        parse_groups({"producerGroups": [1]})
    assert held_groups({"producerGroups": {"Pay": 2, "Ship": 0, "Bad": "1"}}) == {"Pay"}
    with pytest.raises(ValueError, match="producerGroups"):
        held_groups({"producerGroups": ["Pay"]})
