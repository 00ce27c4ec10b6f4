"""Reference §3.5: acting-master substitution in ``pickupTopicRouteData``, one row per condition."""

from __future__ import annotations

import pytest

from nameserver.core.routes import (
    RoutedActingMaster,
    acting_master_id,
    pickup_route,
    route_acting_master_id,
    routed_acting_master,
)
from nameserver.core.values import Group, Member, QueueData

pytestmark = pytest.mark.unit

A, B, C = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"


def g(name: str, ids: dict[int, str], acting: bool | None = True) -> Group:
    return Group("c1", name, "z1", acting, tuple(Member(i, a) for i, a in sorted(ids.items())))


@pytest.mark.parametrize(
    "topic, support, ids, acting, perm, expected_addrs, acting_flag",
    [
        pytest.param("T", True, {1: B, 2: C}, True, 4, {0: B, 2: C}, True, id="masterless-read-only-min-slave-becomes-0"),
        pytest.param("T", True, {2: B, 3: C}, True, 4, {0: B, 3: C}, True, id="minimum-id-not-id-1"),
        pytest.param("T", False, {1: B, 2: C}, True, 4, {1: B, 2: C}, False, id="support-acting-master-off"),
        pytest.param("T", True, {1: B, 2: C}, True, 6, {1: B, 2: C}, False, id="writeable-queue-no-substitution"),
        pytest.param("T", True, {1: B, 2: C}, False, 4, {1: B, 2: C}, False, id="set-without-acting-master"),
        pytest.param("T", True, {1: B, 2: C}, None, 4, {1: B, 2: C}, False, id="old-version-set"),
        pytest.param("T", True, {0: A, 1: B}, True, 4, {0: A, 1: B}, False, id="master-present"),
        pytest.param("rmq_sys_SYNC_BROKER_MEMBER_b1", True, {1: B}, True, 4, {1: B}, False, id="member-group-topic"),
    ],
)
def test_acting_master_substitution(topic, support, ids, acting, perm, expected_addrs, acting_flag):
    route = pickup_route(topic, [QueueData("b1", 4, 4, perm)], {"b1": g("b1", ids, acting)}, support_acting_master=support)
    (bd,) = route.broker_datas
    assert dict(bd.broker_addrs) == expected_addrs
    assert bd.acting_master is acting_flag
    assert route.queue_datas[0].perm == perm  # the route never changes perms; registration did


def test_substitution_is_per_broker_set():
    groups = {"b1": g("b1", {1: B, 2: C}), "b2": g("b2", {0: A})}
    route = pickup_route("T", [QueueData("b1", 1, 1, 4), QueueData("b2", 1, 1, 6)], groups, support_acting_master=True)
    assert {bd.broker_name: dict(bd.broker_addrs) for bd in route.broker_datas} == {"b1": {0: B, 2: C}, "b2": {0: A}}


def test_no_queue_data_means_no_route():
    assert pickup_route("T", [], {"b1": g("b1", {0: A})}, support_acting_master=True) is None


def test_queue_data_of_a_vanished_set_means_no_route():
    assert pickup_route("T", [QueueData("gone", 1, 1, 6)], {}, support_acting_master=True) is None


def test_route_does_not_mutate_the_registry_view():
    groups = {"b1": g("b1", {1: B, 2: C})}
    pickup_route("T", [QueueData("b1", 1, 1, 4)], groups, support_acting_master=True)
    assert groups["b1"].broker_addrs == {1: B, 2: C}


def test_grpc_endpoints_follow_the_acting_master_substitution():
    group = Group("c1", "b1", "", True, (Member(1, B, grpc_addr="10.0.0.2:8081"), Member(2, C, grpc_addr="10.0.0.3:8081")))
    route = pickup_route("T", [QueueData("b1", 1, 1, 4)], {"b1": group}, support_acting_master=True)
    assert dict(route.broker_datas[0].grpc_addrs) == {0: "10.0.0.2:8081", 2: "10.0.0.3:8081"}


@pytest.mark.parametrize(
    "ids, enabled, expected",
    [
        pytest.param({1, 2}, True, 1, id="masterless-smallest-live-slave"),
        pytest.param({3, 2}, True, 2, id="minimum-id-not-id-1"),
        pytest.param({0, 1}, True, None, id="master-present"),
        pytest.param({1, 2}, False, None, id="acting-master-disabled"),
        pytest.param(set(), True, None, id="no-live-replica"),
    ],
)
def test_acting_master_id(ids, enabled, expected):
    assert acting_master_id(ids, enable_acting_master=enabled) == expected


SUBSTITUTION_ROWS = [
    pytest.param("T", True, {1: B, 2: C}, True, 4, 1, id="masterless-read-only-min-slave"),
    pytest.param("T", True, {2: B, 3: C}, True, 4, 2, id="minimum-id-not-id-1"),
    pytest.param("T", False, {1: B, 2: C}, True, 4, None, id="support-acting-master-off"),
    pytest.param("T", True, {1: B, 2: C}, True, 6, None, id="writeable-queue"),
    pytest.param("T", True, {1: B, 2: C}, True, None, None, id="set-without-the-topic"),
    pytest.param("T", True, {1: B, 2: C}, False, 4, None, id="set-without-acting-master"),
    pytest.param("T", True, {0: A, 1: B}, True, 4, None, id="master-present"),
    pytest.param("rmq_sys_SYNC_BROKER_MEMBER_b1", True, {1: B}, True, 4, None, id="member-group-topic"),
]


@pytest.mark.parametrize("topic, support, ids, acting, perm, expected", SUBSTITUTION_ROWS)
def test_route_acting_master_id_is_what_the_route_shows_as_id_0(topic, support, ids, acting, perm, expected):
    kwargs = dict(enable_acting_master=acting, support_acting_master=support)
    assert route_acting_master_id(topic, ids, perm, **kwargs) == expected
    # ... the very id pickup_route puts under 0 (one rule: the route and the dashboard read it)
    queues = [QueueData("b1", 4, 4, perm if perm is not None else 6), QueueData("other", 1, 1, 6)]
    groups = {"b1": g("b1", ids, acting), "other": g("other", {0: "10.9.9.9:1"})}
    route = pickup_route(topic, queues if perm is not None else queues[1:], groups, support_acting_master=support)
    shown = {bd.broker_name: bd for bd in route.broker_datas}
    if expected is None:
        assert "b1" not in shown or not shown["b1"].acting_master
    else:
        assert shown["b1"].acting_master and shown["b1"].broker_addrs[0] == ids[expected]


@pytest.mark.parametrize(
    "ids, perms, support, expected",
    [
        pytest.param({1: B, 2: C}, {"T": 4, "U": 4}, True, RoutedActingMaster(1, B, ("T", "U"), 0), id="every-route"),
        pytest.param(
            {1: B, 2: C}, {"T": 4, "U": 6}, True, RoutedActingMaster(1, B, ("T",), 1), id="a-writeable-topic-is-not-substituted"
        ),
        pytest.param(
            {1: B},
            {"T": 4, "rmq_sys_SYNC_BROKER_MEMBER_b1": 4},
            True,
            RoutedActingMaster(1, B, ("T",), 1),
            id="member-group-topic-left-out",
        ),
        pytest.param({1: B, 2: C}, {"T": 6}, True, None, id="only-writeable-topics"),
        pytest.param({1: B, 2: C}, {}, True, None, id="no-topic-no-route"),
        pytest.param({1: B, 2: C}, {"T": 4}, False, None, id="support-acting-master-off"),
        pytest.param({0: A, 1: B}, {"T": 4}, True, None, id="master-present"),
    ],
)
def test_routed_acting_master_of_a_set_over_its_topics(ids, perms, support, expected):
    assert routed_acting_master(ids, perms, enable_acting_master=True, support_acting_master=support) == expected
