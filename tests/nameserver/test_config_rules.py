"""Reference §3.8: NamesrvConfig names, defaults and update rules."""

import pytest

from nameserver.core.config import DEFAULTS, ConfigError, NamesrvConfig, validate_update

pytestmark = pytest.mark.unit


def test_defaults_are_rocketmqs():
    c = NamesrvConfig.from_overrides({})
    assert c.scan_not_active_broker_interval == 5000
    assert (c.support_acting_master, c.notify_min_broker_id_changed) == (False, False)
    assert c["unRegisterBrokerQueueCapacity"] == 3000 and c["waitSecondsForService"] == 45
    assert c.black_list() == {"configBlackList", "configStorePath", "kvConfigPath"}


@pytest.mark.parametrize(
    "changes, parsed",
    [
        ({"supportActingMaster": "true"}, {"supportActingMaster": True}),
        ({"supportActingMaster": False}, {"supportActingMaster": False}),
        ({"scanNotActiveBrokerInterval": "1000"}, {"scanNotActiveBrokerInterval": 1000}),
    ],
)
def test_valid_updates_are_typed(changes, parsed):
    assert validate_update(NamesrvConfig.from_overrides({}), changes) == parsed


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"supportActingMaster": "yes"}, "supportActingMaster"),
        ({"scanNotActiveBrokerInterval": "soon"}, "scanNotActiveBrokerInterval"),
        ({"scanNotActiveBrokerInterval": 0}, "scanNotActiveBrokerInterval"),
        ({"noSuchKey": 1}, "noSuchKey"),
    ],
)
def test_invalid_updates_name_the_field(changes, field):
    with pytest.raises(ConfigError) as e:
        validate_update(NamesrvConfig.from_overrides({}), changes)
    assert field in e.value.field_errors and not e.value.black_listed


@pytest.mark.parametrize("key", ["configBlackList", "configStorePath", "kvConfigPath"])
def test_black_listed_keys_are_refused(key):
    with pytest.raises(ConfigError) as e:
        validate_update(NamesrvConfig.from_overrides({}), {key: "x", "supportActingMaster": True})
    assert e.value.black_listed == {key}


def test_configured_black_list_extends_the_fixed_one():
    c = NamesrvConfig.from_overrides({"configBlackList": "configBlackList;supportActingMaster"})
    with pytest.raises(ConfigError) as e:
        validate_update(c, {"supportActingMaster": True})
    assert e.value.black_listed == {"supportActingMaster"}


def test_every_default_key_has_a_camel_case_rocketmq_name():
    assert all(k[0].islower() and "_" not in k for k in DEFAULTS)
