"""The smallest broker id of a replica group (brokers/control/members.py, reference §5.1): the pure
rules as tables, and the tracker against a scripted nameserver link (poll, pushes, pauses, failures).
tests/e2e/test_member_group_poll.py runs the tracker against a real control plane and real brokers."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from brokers.broker import Broker
from brokers.config import BrokerConfig
from brokers.control.members import (
    PUSH,
    MemberGroupTracker,
    MinBroker,
    MinBrokerIdChange,
    alive_replica_num,
    apply_push,
    min_broker,
    min_changed,
    observe,
    parse_member_group,
    parse_min_broker_id_change,
)
from brokers.control.nameserver import ControlPlaneError

pytestmark = pytest.mark.unit

A, B, C = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


# --- the rules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "members, self_id, self_addr, include_self, expected",
    [
        pytest.param({0: A, 1: B}, 1, B, True, (0, A), id="the master is the minimum"),
        pytest.param({1: B, 2: C}, 2, C, True, (1, B), id="master gone: the smallest slave"),
        pytest.param({2: C}, 1, B, True, (1, B), id="self not listed counts itself"),
        pytest.param({2: C}, 1, B, False, (2, C), id="self not listed, not counted"),
        pytest.param({}, 1, B, True, (1, B), id="empty group: self (pre-online's startService(self))"),
        pytest.param({}, 1, B, False, (None, None), id="empty group, self not counted: nobody"),
        pytest.param({0: A}, 1, B, True, (0, A), id="self not listed, the master smaller"),
    ],
)
def test_min_broker(members, self_id, self_addr, include_self, expected):
    assert min_broker(members, self_id, self_addr, include_self) == expected


@pytest.mark.parametrize(
    "members, self_id, expected",
    [
        pytest.param({0: A, 1: B, 2: C}, 1, 3, id="self listed: the member count"),
        pytest.param({0: A, 2: C}, 1, 3, id="self absent: +1"),
        pytest.param({}, 1, 1, id="nobody listed: self"),
    ],
)
def test_alive_replica_num(members, self_id, expected):
    assert alive_replica_num(members, self_id) == expected


@pytest.mark.parametrize(
    "current, members, expected",
    [
        pytest.param(None, {0: A, 1: B}, MinBroker(0, A, {0: A, 1: B}), id="first sight"),
        pytest.param(MinBroker(0, A, {0: A, 1: B}), {1: B}, MinBroker(1, B, {1: B}, offline_addr=A), id="master left: offline"),
        pytest.param(MinBroker(1, B, {1: B}), {0: A, 1: B}, MinBroker(0, A, {0: A, 1: B}), id="master back: nobody offline"),
        pytest.param(MinBroker(0, A, {0: A, 1: B}), {0: C, 1: B}, MinBroker(0, C, {0: C, 1: B}, A), id="master readdressed"),
        pytest.param(MinBroker(0, A, {0: A, 1: B, 2: C}), {0: A, 1: B}, MinBroker(0, A, {0: A, 1: B}), id="a slave left"),
    ],
)
def test_observe_a_polled_group(current, members, expected):
    seen = observe(current, members, 1, B)
    assert seen == expected


@pytest.mark.parametrize(
    "current, change, expected",
    [
        pytest.param(
            MinBroker(0, A, {0: A, 1: B, 2: C}),
            MinBrokerIdChange(1, B, "g", offline_addr=A),
            MinBroker(1, B, {1: B, 2: C}, offline_addr=A),
            id="unregistration of the minimum",
        ),
        pytest.param(
            MinBroker(1, B, {1: B, 2: C}),
            MinBrokerIdChange(0, A, "g", ha_addr="10.0.0.1:10912"),
            MinBroker(0, A, {0: A, 1: B, 2: C}, ha_addr="10.0.0.1:10912"),
            id="registration of a smaller id, with its HA address",
        ),
        pytest.param(None, MinBrokerIdChange(0, A), MinBroker(0, A, {0: A}), id="a push before any poll"),
    ],
)
def test_apply_a_pushed_change(current, change, expected):
    assert apply_push(current, change, 1, B) == expected


def test_min_changed_is_about_the_id_and_address_only():
    base = MinBroker(0, A, {0: A, 1: B})
    assert min_changed(None, base)
    assert not min_changed(base, MinBroker(0, A, {0: A}, offline_addr=C))
    assert min_changed(base, MinBroker(0, C, {0: C}))
    assert min_changed(base, MinBroker(1, B, {1: B}))


def test_parse_member_group():
    assert parse_member_group({"cluster": "c", "brokerName": "g", "brokerAddrs": {"0": A, "12": B}}) == {0: A, 12: B}
    assert parse_member_group({"brokerAddrs": {}}) == {}


@pytest.mark.parametrize(
    "reply, problem",
    [
        pytest.param({}, "brokerAddrs: must be a JSON object", id="no brokerAddrs"),
        pytest.param({"brokerAddrs": {"x": A}}, "'x' is not a broker id", id="id not decimal"),
        pytest.param({"brokerAddrs": {"-1": A}}, "'-1' is not a broker id", id="negative id"),
        pytest.param({"brokerAddrs": {"0": "nohost"}}, "brokerAddrs.0: must be host:port", id="bad address"),
    ],
)
def test_parse_member_group_refuses(reply, problem):
    with pytest.raises(ValueError, match=problem):
        parse_member_group(reply)


def test_parse_a_pushed_header():
    header = {"minBrokerId": 1, "brokerName": "g", "minBrokerAddr": B, "offlineBrokerAddr": A, "haBrokerAddr": None}
    assert parse_min_broker_id_change(header) == MinBrokerIdChange(1, B, "g", A, None)
    with pytest.raises(ValueError, match="minBrokerId: must be an integer.*minBrokerAddr: must be host:port"):
        parse_min_broker_id_change({"minBrokerId": "1", "minBrokerAddr": "x"})
    with pytest.raises(ValueError, match="offlineBrokerAddr: must be host:port"):
        parse_min_broker_id_change({**header, "offlineBrokerAddr": "x"})


# --- the tracker ---------------------------------------------------------------------------------------


class ScriptedLink:
    """NameserverLink's surface the tracker uses (``call``, ``broker_id``), and its push handlers."""

    def __init__(self, broker_id: int, groups: list):
        self.broker_id = broker_id
        self.groups = groups  # answers in order; the last repeats; an exception is raised
        self.on_push: dict = {}
        self.calls: list[tuple[str, dict]] = []

    async def call(self, kind: str, payload: dict, timeout: float = 10.0) -> dict:
        self.calls.append((kind, payload))
        answer = self.groups.pop(0) if len(self.groups) > 1 else self.groups[0]
        if isinstance(answer, Exception):
            raise answer
        return {"cluster": "c", "brokerName": "g", "brokerAddrs": {str(i): a for i, a in answer.items()}}


def config(**extra) -> BrokerConfig:
    return BrokerConfig(brokerName="g", brokerClusterName="c", brokerId=1, brokerIP1="10.0.0.2", listenPort=10911, **extra)


class Recorder:
    def __init__(self, fail_times: int = 0):
        self.seen: list[MinBroker] = []
        self.fail_times = fail_times

    async def __call__(self, change: MinBroker) -> None:
        if self.fail_times:
            self.fail_times -= 1
            raise RuntimeError("special services did not toggle")
        self.seen.append(change)


def test_on_change_runs_only_when_the_minimum_changes():
    async def scenario():
        link = ScriptedLink(1, [{0: A, 1: B}, {0: A, 1: B, 2: C}, {1: B, 2: C}, {1: B, 2: C}])
        changes = Recorder()
        tracker = MemberGroupTracker(config(), link, changes)
        assert (tracker.current, tracker.alive_replicas) == (None, 1)
        for _ in range(4):
            await tracker.poll_once()
        assert [(c.min_broker_id, c.min_broker_addr, c.offline_addr) for c in changes.seen] == [(0, A, None), (1, B, A)]
        assert tracker.current == MinBroker(1, B, {1: B, 2: C}) and tracker.alive_replicas == 2
        assert link.calls[0] == ("get_broker_member_group", {"clusterName": "c", "brokerName": "g"})

    asyncio.run(scenario())


def test_a_failed_on_change_is_offered_again_by_the_next_poll():
    async def scenario():
        changes = Recorder(fail_times=1)
        tracker = MemberGroupTracker(config(), ScriptedLink(1, [{0: A, 1: B}]), changes)
        await tracker.poll_once()
        assert tracker.current is None and changes.seen == []
        await tracker.poll_once()
        assert [c.min_broker_id for c in changes.seen] == [0] and tracker.current.min_broker_id == 0

    asyncio.run(scenario())


def test_pushes_reach_the_tracker_and_the_poll_agrees():
    """(The broker hands ``on_pushed`` to its link: test_a_classic_acting_brokers_link_pushes_to_its_tracker.)"""

    async def scenario():
        link = ScriptedLink(1, [{0: A, 1: B}, {1: B}])
        changes = Recorder()
        tracker = MemberGroupTracker(config(), link, changes)
        await tracker.poll_once()
        push = {"minBrokerId": 1, "brokerName": "g", "minBrokerAddr": B, "offlineBrokerAddr": A, "haBrokerAddr": None}
        await tracker.on_pushed(push)
        await tracker.on_pushed(push)  # a repeated push changes nothing
        await tracker.on_pushed({**push, "brokerName": "other"})  # another set's: ignored
        await tracker.on_pushed({"minBrokerId": "zero"})  # malformed: ignored
        await tracker.poll_once()  # the nameserver says the same: no second change
        assert [(c.min_broker_id, c.offline_addr) for c in changes.seen] == [(0, None), (1, A)]
        assert tracker.alive_replicas == 1

    asyncio.run(scenario())


def test_the_tracker_leaves_the_links_push_handlers_alone():
    link = ScriptedLink(1, [{}])
    MemberGroupTracker(config(), link, Recorder())
    assert PUSH not in link.on_push


def test_a_classic_acting_brokers_link_pushes_to_its_tracker(tmp_path):
    """The composition root hands the tracker's ``on_pushed`` to the link it builds (brokers/broker.py)."""

    async def scenario():
        broker = Broker(
            replace(config(), brokerId=0, storePathRootDir=str(tmp_path), enableSlaveActingMaster=True, controlPlaneToken="t")
        )
        assert broker.members is not None and broker.members.current is None
        push = {"minBrokerId": 0, "brokerName": "g", "minBrokerAddr": A, "offlineBrokerAddr": None, "haBrokerAddr": None}
        await broker.nameserver.on_push[PUSH](push)
        assert broker.members.current == MinBroker(0, A, {0: A})
        assert "notify_broker_role_changed" not in broker.nameserver.on_push  # (controller mode's push)
        await broker.store.shutdown()

    asyncio.run(scenario())


def test_the_poll_runs_every_period_skips_while_paused_and_survives_failures():
    async def scenario():
        link = ScriptedLink(1, [ControlPlaneError("not connected"), {0: A, 1: B}, {1: B}])
        changes = Recorder()
        paused = [False]
        tracker = MemberGroupTracker(config(syncBrokerMemberGroupPeriod=20), link, changes, paused=lambda: paused[0])
        tracker.start()
        try:
            for _ in range(200):
                if len(changes.seen) == 2:
                    break
                await asyncio.sleep(0.01)
            assert [c.min_broker_id for c in changes.seen] == [0, 1]
            paused[0] = True
            await asyncio.sleep(0.05)
            asked = len(link.calls)
            await asyncio.sleep(0.1)
            assert len(link.calls) == asked  # paused: no polls
        finally:
            await tracker.stop()
        assert tracker._task.done()

    asyncio.run(scenario())


def test_the_self_id_is_the_links_controller_given_id():
    async def scenario():
        link = ScriptedLink(0, [{2: C}])  # registered as 0 once; the controller now says 3
        link.broker_id = 3
        tracker = MemberGroupTracker(config(), link, Recorder())
        await tracker.poll_once()
        assert (tracker.current.min_broker_id, tracker.alive_replicas) == (2, 2)

    asyncio.run(scenario())
