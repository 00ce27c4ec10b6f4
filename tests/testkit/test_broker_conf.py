"""The one broker.conf renderer (brokers.config.render_conf) and testkit's broker keys: what is
written reads back as the same configuration, and a mistyped key fails where the file is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokers.config import ConfigInvalid, from_mapping, load, parse_properties, render_conf
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf

pytestmark = pytest.mark.unit


def test_rendered_keys_read_back_typed():
    text = render_conf(
        {
            "brokerName": "a",
            "storePathRootDir": Path("/tmp/x"),
            "controlPlaneUrl": "http://h:1",
            "controlPlaneToken": "t",
            "listenPort": 10911,
            "allAckInSyncStateSet": True,
            "enableControllerMode": False,
        }
    )
    assert text.splitlines()[0] == "brokerName=a" and text.endswith("\n")
    assert "allAckInSyncStateSet=true" in text.splitlines() and "enableControllerMode=false" in text.splitlines()
    config = from_mapping(parse_properties(text))
    assert (config.storePathRootDir, config.listenPort, config.allAckInSyncStateSet) == ("/tmp/x", 10911, True)


@pytest.mark.parametrize(
    "keys, problem",
    [
        ({"brokername": "a"}, "brokername: unknown key"),
        ({"listenPort": 1, "haMasterAdress": "h:1"}, "haMasterAdress: unknown key"),
        ({"brokerName": "a\nbrokerId=3"}, "brokerName: the value must fit on one line"),
    ],
    ids=["wrong-case", "typo", "line-break"],
)
def test_a_bad_key_or_value_is_refused_when_written(keys, problem):
    with pytest.raises(ConfigInvalid) as err:
        render_conf(keys)
    assert err.value.problems == [problem]


def test_testkit_broker_keys_make_a_valid_conf(tmp_path):
    ports = BrokerPorts(20001, 20002, 20003)
    keys = broker_keys(
        "group-a", tmp_path / "store", ports, "http://127.0.0.1:8000", cluster="c", token="tok", brokerId=1, brokerRole="SLAVE"
    )
    conf = write_broker_conf(tmp_path / "broker.conf", keys, ["haMasterAddress=127.0.0.1:20012"])
    config = load(conf)
    assert (config.brokerClusterName, config.brokerName, config.brokerId, config.brokerRole) == ("c", "group-a", 1, "SLAVE")
    assert (config.listenPort, config.haListenPort, config.grpcServerPort) == (20001, 20002, 20003)
    assert config.controlPlaneToken == "tok" and config.haMasterAddress == "127.0.0.1:20012"
