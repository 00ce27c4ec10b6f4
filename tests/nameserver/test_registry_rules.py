"""Reference §3.3 (registerBroker), §3.4 (unregister), §3.6 (min-broker-id notifications): one row per rule."""

from __future__ import annotations

import pytest

from nameserver.core import perm as P
from nameserver.core.registry import (
    RegisterOutcome,
    RegisterRequest,
    decide_register,
    decide_unregister,
    min_broker_id_change,
)
from nameserver.core.values import (
    DEFAULT_HEARTBEAT_TIMEOUT_MILLIS,
    DataVersion,
    Group,
    Member,
    QueueData,
    TopicConfig,
)

pytestmark = pytest.mark.unit

A, B, C, D = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911", "10.0.0.4:10911"


def group(*members: tuple[int, str] | Member, acting: bool | None = True) -> Group:
    ms = tuple(m if isinstance(m, Member) else Member(m[0], m[1], m[1].replace("10911", "10912")) for m in members)
    return Group("c1", "b1", "", acting, ms)


def req(
    broker_id: int,
    addr: str,
    *,
    acting: bool | None = True,
    state: int = 0,
    counter: int = 0,
    topics: tuple[TopicConfig, ...] = (TopicConfig("T", 4, 4, 6), TopicConfig("U", 4, 4, 6)),
    timeout: int | None = None,
) -> RegisterRequest:
    return RegisterRequest(
        "c1", addr, "b1", broker_id, addr.replace("10911", "10912"), "", timeout, acting, DataVersion(state, counter), topics
    )


def register(g, r, queues=None, notify=True, delete_topics=False):
    return decide_register(
        g, queues or {}, r, notify_min_broker_id_changed=notify, delete_topic_with_broker_registration=delete_topics
    )


# --- §3.3 ---------------------------------------------------------------------------------------


def test_step1_first_registration_creates_the_set_and_notifies_nobody():
    d = register(None, req(1, A))
    assert d.outcome is RegisterOutcome.ACCEPTED
    assert d.group.broker_addrs == {1: A} and d.group.cluster_name == "c1"
    assert d.notification is None


@pytest.mark.parametrize("flag", [True, False, None], ids=["acting", "not-acting", "old-version-broker"])
def test_step2_broker_data_takes_the_acting_master_flag_of_the_registration(flag):
    d = register(group((0, A), acting=not flag), req(1, B, acting=flag))
    assert d.group.enable_acting_master is flag


@pytest.mark.parametrize(
    "before, new_id, new_addr, notified, recipients",
    [
        pytest.param([(1, A), (2, B)], 0, C, True, (A, B), id="smaller-id-notifies-all-but-new-min"),
        pytest.param([(1, A)], 0, A, True, (A,), id="single-member-after-promotion-notifies-itself"),
        pytest.param([(0, A), (1, B)], 2, C, False, (), id="larger-id-no-notification"),
        pytest.param([(1, A), (2, B)], 1, A, False, (), id="same-id-no-notification"),
        pytest.param([], 0, A, False, (), id="first-member-never-notifies"),
    ],
)
def test_step3_and_12_min_broker_id_change_on_registration(before, new_id, new_addr, notified, recipients):
    d = register(group(*before) if before else None, req(new_id, new_addr))
    assert (d.notification is not None) is notified
    if notified:
        assert d.notification.recipients == recipients
        assert d.notification.min_broker_id == new_id and d.notification.min_broker_addr == new_addr
        assert d.notification.offline_broker_addr is None
        assert d.notification.ha_broker_addr == new_addr.replace("10911", "10912")


def test_step12_notification_is_gated_by_notify_min_broker_id_changed():
    assert register(group((1, A), (2, B)), req(0, C), notify=False).notification is None


def test_step4_same_address_under_another_id_is_replaced():
    d = register(group((1, A), (2, B)), req(0, A))
    assert d.group.broker_addrs == {0: A, 2: B}
    assert d.removed_addrs == ()  # the address stays registered, only its id changed


@pytest.mark.parametrize(
    "holder_state, new_state, outcome",
    [
        pytest.param(5, 4, RegisterOutcome.REFUSED_STALE_STATE_VERSION, id="lower-state-version-refused"),
        pytest.param(5, 5, RegisterOutcome.ACCEPTED, id="equal-state-version-accepted"),
        pytest.param(5, 6, RegisterOutcome.ACCEPTED, id="higher-state-version-takes-over"),
    ],
)
def test_step5_double_master_guard(holder_state, new_state, outcome):
    holder = Member(0, A, "", DataVersion(holder_state))
    d = register(group(holder, (1, B)), req(0, C, state=new_state))
    assert d.outcome is outcome
    if outcome is RegisterOutcome.REFUSED_STALE_STATE_VERSION:
        assert d.group.broker_addrs == {0: A, 1: B}
        assert C in d.removed_addrs and d.conflicting_state_version == holder_state
    else:
        assert d.group.broker_addrs == {0: C, 1: B} and A in d.removed_addrs


def test_step5_refused_registration_also_loses_its_other_id():
    holder = Member(0, A, "", DataVersion(7))
    d = register(group(holder, (1, B)), req(0, B, state=3))
    assert d.outcome is RegisterOutcome.REFUSED_STALE_STATE_VERSION
    assert d.group.broker_addrs == {0: A} and d.removed_addrs == (B,)


@pytest.mark.parametrize(
    "before, outcome",
    [
        pytest.param([(0, A)], RegisterOutcome.REFUSED_SINGLE_TOPIC, id="unknown-id-refused"),
        pytest.param([(0, A), (1, B)], RegisterOutcome.ACCEPTED, id="known-id-accepted"),
    ],
)
def test_step6_single_topic_registration_needs_a_prior_full_one(before, outcome):
    assert register(group(*before), req(1, B, topics=(TopicConfig("T"),))).outcome is outcome


@pytest.mark.parametrize(
    "before, broker_id, addr, acting, expected_perm",
    [
        pytest.param([], 0, A, True, 6, id="master-writes-queue-data"),
        pytest.param([(2, B)], 1, A, True, 4, id="prime-slave-with-acting-master-loses-write"),
        pytest.param([(2, B)], 1, A, False, 6, id="prime-slave-without-acting-keeps-perm"),
        pytest.param([(0, B)], 1, A, True, None, id="slave-beside-a-master-writes-nothing"),
        pytest.param([(1, B)], 2, A, True, None, id="non-minimum-slave-writes-nothing"),
        pytest.param([(2, B)], 1, A, None, None, id="old-version-slave-is-never-prime"),
    ],
)
def test_step8_who_writes_queue_data(before, broker_id, addr, acting, expected_perm):
    d = register(group(*before) if before else None, req(broker_id, addr, acting=acting))
    if expected_perm is None:
        assert not d.queue_data
    else:
        assert {t: q.perm for t, q in d.queue_data.items()} == {"T": expected_perm, "U": expected_perm}


def test_step8_unchanged_data_version_rewrites_only_topics_missing_from_the_set():
    g = group(Member(0, A, "", DataVersion(1, 3)))
    existing = {"T": QueueData("b1", 1, 1, 6)}
    d = register(g, req(0, A, state=1, counter=3), existing)
    assert set(d.queue_data) == {"U"}  # T kept as it was, although the payload differs
    d2 = register(g, req(0, A, state=1, counter=4), existing)
    assert set(d2.queue_data) == {"T", "U"}


def test_step8_delete_topic_with_broker_registration_prunes_topics_missing_from_the_master():
    existing = {"OLD": QueueData("b1", 1, 1, 6), "T": QueueData("b1", 4, 4, 6)}
    assert register(group((0, A)), req(0, A, counter=9), existing, delete_topics=True).deleted_topics == ("OLD",)
    assert register(group((0, A)), req(0, A, counter=9), existing).deleted_topics == ()


@pytest.mark.parametrize("timeout, expected", [(None, DEFAULT_HEARTBEAT_TIMEOUT_MILLIS), (10_000, 10_000)])
def test_step10_heartbeat_timeout_defaults_to_120_s(timeout, expected):
    d = register(None, req(0, A, timeout=timeout))
    assert d.group.member_with_id(0).heartbeat_timeout_millis == expected


def test_step11_a_slave_learns_its_live_masters_address_and_ha_address():
    d = register(group((0, A)), req(1, B))
    assert (d.master_addr, d.master_ha_addr) == (A, A.replace("10911", "10912"))
    assert register(group((1, B)), req(0, A)).master_addr is None


# --- §3.4 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, leaving, acting, set_removed, wipe",
    [
        pytest.param([(0, A)], A, True, True, False, id="last-member-removes-the-set"),
        pytest.param([(0, A), (1, B)], A, True, False, True, id="master-leaves-acting-set-wipes-write"),
        pytest.param([(0, A), (1, B)], B, True, False, False, id="slave-leaves-master-remains-no-wipe"),
        pytest.param([(0, A), (1, B)], A, False, False, False, id="master-leaves-non-acting-set-no-wipe"),
        pytest.param([(1, A), (2, B)], B, True, False, True, id="masterless-acting-set-shrinks-wipes"),
    ],
)
def test_unregister_removes_sets_and_wipes_write_perm(before, leaving, acting, set_removed, wipe):
    d = decide_unregister(group(*before, acting=acting), leaving, notify_min_broker_id_changed=True)
    assert d.removed.broker_addr == leaving
    assert (d.set_removed, d.wipe_write_perm) == (set_removed, wipe)
    assert leaving not in d.group.broker_addrs.values()


@pytest.mark.parametrize(
    "leaving, acting, notify, recipients",
    [
        pytest.param(A, True, True, (B, C), id="min-leaves-all-remaining-hear"),
        pytest.param(A, False, True, None, id="min-leaves-non-acting-set-silent"),
        pytest.param(A, True, False, None, id="gated-off"),
        pytest.param(B, True, True, None, id="non-min-leaves-silent"),
    ],
)
def test_unregister_min_broker_id_notification(leaving, acting, notify, recipients):
    d = decide_unregister(group((0, A), (1, B), (2, C), acting=acting), leaving, notify_min_broker_id_changed=notify)
    if recipients is None:
        assert d.notification is None
    else:
        n = d.notification
        assert n.recipients == recipients and n.offline_broker_addr == leaving
        assert (n.min_broker_id, n.min_broker_addr, n.ha_broker_addr) == (1, B, None)


def test_unregister_of_an_unknown_address_changes_nothing():
    g = group((0, A))
    d = decide_unregister(g, D, notify_min_broker_id_changed=True)
    assert d.removed is None and d.group == g and not d.set_removed


# --- §3.6 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "members, offline, recipients",
    [
        pytest.param([(0, A), (1, B), (2, C)], None, (B, C), id="new-min-online-others-hear"),
        pytest.param([(0, A)], None, (A,), id="single-member-hears-itself"),
        pytest.param([(1, B), (2, C)], A, (B, C), id="min-offline-all-remaining-hear"),
    ],
)
def test_notification_recipients(members, offline, recipients):
    n = min_broker_id_change(group(*members), offline_broker_addr=offline, ha_broker_addr=None)
    assert n.recipients == recipients
    assert n.header() == {
        "minBrokerId": members[0][0],
        "brokerName": "b1",
        "minBrokerAddr": members[0][1],
        "offlineBrokerAddr": offline,
        "haBrokerAddr": None,
    }


def test_perm_bits():
    assert (P.PERM_RW, P.PERM_READ_ONLY) == (6, 4)
    assert P.without_write(6) == 4 and P.with_write(4) == 6 and P.without_write(7) == 5
    assert [p for p in range(10) if P.is_valid(p)] == list(range(8))
