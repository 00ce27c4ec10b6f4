"""update_broker_config's rules (brokers/config.py): only the dynamic keys, each value checked as
broker.conf checks it (the same rule: the merged values go through ``from_mapping``), one problem per
key; an applied change reaches the one BrokerConfig every component holds, and broker.conf keeps it
with its comments and other lines."""

from __future__ import annotations

from dataclasses import fields

import pytest

from brokers.config import (
    DYNAMIC_KEYS,
    BrokerConfig,
    ConfigInvalid,
    apply_update,
    from_mapping,
    load,
    persist_changes,
    plan_update,
    render_conf,
    reported_values,
    rewrite_conf,
)
from mqrules.keyed_config import BROKER_SECRET_KEYS

pytestmark = pytest.mark.unit

GOOD = {
    "brokerName": "broker-a",
    "storePathRootDir": "/tmp/x",
    "controlPlaneUrl": "http://127.0.0.1:8000",
    "controlPlaneToken": "rmq_x",
    "totalReplicas": "3",
    "inSyncReplicas": "2",
}


def running() -> BrokerConfig:
    return from_mapping(GOOD)


@pytest.mark.parametrize(
    "updates, changed",
    [
        pytest.param({"retryMaxTimes": "3"}, {"retryMaxTimes": ("16", "3")}, id="an integer"),
        pytest.param({"retryMaxTimes": 3}, {"retryMaxTimes": ("16", "3")}, id="a JSON number, as broker.conf writes it"),
        pytest.param({"allAckInSyncStateSet": "TRUE"}, {"allAckInSyncStateSet": ("false", "true")}, id="a boolean, any case"),
        pytest.param({"useDelayLevel": True}, {"useDelayLevel": ("false", "true")}, id="a JSON boolean"),
        pytest.param({"slaveTimeout": " 5000 "}, {"slaveTimeout": ("3000", "5000")}, id="trimmed as a broker.conf line"),
        pytest.param({"inSyncReplicas": "2"}, {}, id="the same value changes nothing"),
        pytest.param(
            {"inSyncReplicas": "3", "minInSyncReplicas": "2"},
            {"inSyncReplicas": ("2", "3"), "minInSyncReplicas": ("1", "2")},
            id="related keys together",
        ),
        pytest.param({"brokerStatusReportInterval": "500"}, {"brokerStatusReportInterval": ("2000", "500")}, id="ours"),
        pytest.param({"deleteWhen": "01;13"}, {"deleteWhen": ("04", "01;13")}, id="retention: deleteWhen"),
        pytest.param(
            {"diskMaxUsedSpaceRatio": "60", "diskSpaceCleanForciblyRatio": "70", "diskSpaceWarningLevelRatio": "80"},
            {
                "diskMaxUsedSpaceRatio": ("75", "60"),
                "diskSpaceCleanForciblyRatio": ("85", "70"),
                "diskSpaceWarningLevelRatio": ("90", "80"),
            },
            id="retention: the three ratios together",
        ),
        pytest.param(
            {"cleanFileForciblyEnable": "false"}, {"cleanFileForciblyEnable": ("true", "false")}, id="retention: forced"
        ),
    ],
)
def test_a_dynamic_change_is_typed_and_names_what_changes(updates, changed):
    update = plan_update(running(), updates)
    assert update.changed == changed
    for key, (_, new) in changed.items():
        assert reported_values(update.config)[key] == new


@pytest.mark.parametrize(
    "updates, problems",
    [
        pytest.param({"listenPort": "10999"}, ["listenPort: cannot be changed on a running broker"], id="not dynamic"),
        pytest.param({"retryMaxTime": "3"}, ["retryMaxTime: unknown key"], id="a typo"),
        pytest.param(
            {"namesrvAddr": "x:9876"}, ["namesrvAddr: a RocketMQ broker key this broker does not support"], id="unsupported"
        ),
        pytest.param({"retryMaxTimes": "many"}, ["retryMaxTimes: must be an integer"], id="not an integer"),
        pytest.param({"retryMaxTimes": "-1"}, ["retryMaxTimes: must be >= 0"], id="broker.conf's range"),
        pytest.param({"useDelayLevel": "yes"}, ["useDelayLevel: must be true or false"], id="not a boolean"),
        pytest.param({"slaveTimeout": "0"}, ["slaveTimeout: must be > 0"], id="slaveTimeout > 0"),
        pytest.param({"brokerStatusReportInterval": "0"}, ["brokerStatusReportInterval: must be > 0"], id="interval > 0"),
        pytest.param({"haMaxGapNotInSync": "0"}, ["haMaxGapNotInSync: must be > 0"], id="gap > 0"),
        pytest.param({"inSyncReplicas": "4"}, ["inSyncReplicas: must be <= totalReplicas"], id="across keys: totalReplicas"),
        pytest.param(
            {"minInSyncReplicas": "3"}, ["inSyncReplicas/minInSyncReplicas: need 1 <= minInSyncReplicas"], id="across keys"
        ),
        pytest.param({"deleteWhen": "4pm"}, ["deleteWhen: '4pm' is not an hour"], id="retention: deleteWhen"),
        pytest.param({"fileReservedTime": "0"}, ["fileReservedTime: must be > 0"], id="retention: hours > 0"),
        pytest.param(
            {"diskSpaceWarningLevelRatio": "80"}, ["diskSpaceCleanForciblyRatio: the ratios must be in order"], id="ratio order"
        ),
        pytest.param({"diskMaxUsedSpaceRatio": "96"}, ["diskMaxUsedSpaceRatio: must be between 10 and 95"], id="ratio range"),
        pytest.param({"retryMaxTimes": "3\nlistenPort=1"}, ["retryMaxTimes: the value must fit on one line"], id="one line"),
        pytest.param({"retryMaxTimes": ["3"]}, ["retryMaxTimes: must be a string"], id="not text"),
        pytest.param(
            {"listenPort": "1", "bogus": "1", "retryMaxTimes": "x"},
            ["listenPort: cannot be changed", "bogus: unknown key"],
            id="every key refused at once (values after the keys)",
        ),
    ],
)
def test_a_refused_change_names_each_problem(updates, problems):
    with pytest.raises(ConfigInvalid) as e:
        plan_update(running(), updates)
    assert len(e.value.problems) == len(problems), e.value.problems
    for got, wanted in zip(e.value.problems, problems, strict=True):
        assert got.startswith(wanted), e.value.problems


def test_every_value_a_change_accepts_a_broker_conf_accepts():
    """One rule: the config a change produces is exactly what its broker.conf would load as."""
    update = plan_update(running(), {"inSyncReplicas": "3", "minInSyncReplicas": "2", "retryMaxTimes": "0"})
    assert from_mapping({**GOOD, "inSyncReplicas": "3", "minInSyncReplicas": "2", "retryMaxTimes": "0"}) == update.config


def test_the_dynamic_keys_are_broker_conf_keys_and_no_secret_is_reported():
    names = {f.name for f in fields(BrokerConfig)}
    assert DYNAMIC_KEYS <= names and not DYNAMIC_KEYS & BROKER_SECRET_KEYS
    reported = reported_values(running())
    assert not BROKER_SECRET_KEYS & reported.keys() and reported["brokerName"] == "broker-a"
    assert reported["brokerStatusReportInterval"] == "2000"


def test_an_applied_change_reaches_the_shared_instance_and_nothing_else():
    shared = running()
    holder = {"config": shared}  # a component holding the broker's config by reference
    update = plan_update(shared, {"inSyncReplicas": "3", "slaveTimeout": "4000"})
    apply_update(shared, update)
    assert holder["config"] is shared and (shared.inSyncReplicas, shared.slaveTimeout) == (3, 4000)
    assert shared.listenPort == 10911
    with pytest.raises(AttributeError):  # still frozen for everyone else
        shared.inSyncReplicas = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "text, changes, expected",
    [
        pytest.param(
            "# the a set\nbrokerName=a\ninSyncReplicas = 1\n",
            {"inSyncReplicas": "2"},
            "# the a set\nbrokerName=a\ninSyncReplicas=2\n",
            id="the line replaced, comments kept",
        ),
        pytest.param("brokerName=a", {"retryMaxTimes": "3"}, "brokerName=a\nretryMaxTimes=3\n", id="a key not set is added"),
        pytest.param(
            "#retryMaxTimes=1\nretryMaxTimes=5\n\nretryMaxTimes=6\n",
            {"retryMaxTimes": "3"},
            "#retryMaxTimes=1\nretryMaxTimes=3\n\nretryMaxTimes=3\n",
            id="every setting line, never a comment",
        ),
    ],
)
def test_broker_conf_keeps_its_other_lines(text, changes, expected):
    assert rewrite_conf(text, changes) == expected


def test_a_persisted_change_is_what_the_next_start_loads(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# operator notes\n" + render_conf(GOOD))
    update = plan_update(load(conf), {"retryMaxTimes": "2", "allAckInSyncStateSet": "true"})
    persist_changes(conf, {key: new for key, (_, new) in update.changed.items()})
    assert load(conf) == update.config
    assert conf.read_text().startswith("# operator notes\n")
    assert [p.name for p in tmp_path.iterdir()] == ["broker.conf"]  # the temporary file was renamed over it
