"""``python -m brokers -c broker.conf``: an invalid config gives a clear message and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from brokers.config import ConfigInvalid, from_mapping, parse_properties, render_conf

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GOOD = {
    "brokerName": "broker-a",
    "storePathRootDir": "/tmp/x",
    "controlPlaneUrl": "http://127.0.0.1:8000",
    "controlPlaneToken": "rmq_x",
}


def test_a_valid_config_is_typed_with_rocketmq_defaults():
    c = from_mapping({**GOOD, "brokerId": "1", "flushDiskType": "SYNC_FLUSH", "enableSlaveActingMaster": "true"})
    assert (c.brokerId, c.flushDiskType, c.enableSlaveActingMaster) == (1, "SYNC_FLUSH", True)
    assert (c.brokerClusterName, c.listenPort, c.haListenPort, c.brokerHeartbeatInterval) == (
        "DefaultCluster",
        10911,
        10912,
        1000,
    )
    assert c.broker_addr == "127.0.0.1:10911"
    assert (c.flushIntervalCommitLog, c.flushCommitLogLeastPages, c.flushCommitLogThoroughInterval) == (500, 4, 10000)


# Reference §5.5 and §2.7: the slave-acting-master keys with RocketMQ's defaults.
ACTING_MASTER_DEFAULTS = {
    "enableRemoteEscape": False,
    "skipPreOnline": False,
    "lockInStrictMode": False,
    "syncBrokerMemberGroupPeriod": 1000,
    "sendHeartbeatTimeoutMillis": 1000,
    "compatibleWithOldNameSrv": True,
    "peerToken": "",
}


@pytest.mark.parametrize("key, default", ACTING_MASTER_DEFAULTS.items(), ids=ACTING_MASTER_DEFAULTS.keys())
def test_slave_acting_master_keys_default_as_rocketmq(key, default):
    assert getattr(from_mapping(GOOD), key) == default


@pytest.mark.parametrize(
    "change, value",
    [
        ({"skipPreOnline": "true"}, ("skipPreOnline", True)),
        ({"compatibleWithOldNameSrv": "false"}, ("compatibleWithOldNameSrv", False)),
        ({"syncBrokerMemberGroupPeriod": "200"}, ("syncBrokerMemberGroupPeriod", 200)),
        ({"sendHeartbeatTimeoutMillis": "3000"}, ("sendHeartbeatTimeoutMillis", 3000)),
        ({"enableRemoteEscape": "false", "lockInStrictMode": "false"}, ("lockInStrictMode", False)),
        ({"enableRemoteEscape": "true"}, ("enableRemoteEscape", True)),
        ({"lockInStrictMode": "true"}, ("lockInStrictMode", True)),
    ],
)
def test_slave_acting_master_keys_are_typed(change, value):
    key, expected = value
    assert getattr(from_mapping({**GOOD, **change}), key) == expected


@pytest.mark.parametrize(
    "change, peer_token",
    [
        pytest.param({}, "rmq_x", id="empty: the control-plane token"),
        pytest.param({"peerToken": "group-secret"}, "group-secret", id="its own"),
    ],
)
def test_the_peer_token_falls_back_to_the_control_plane_token(change, peer_token):
    assert from_mapping({**GOOD, **change}).peer_token == peer_token


def test_the_peer_token_falls_back_to_the_control_plane_token_file(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("rmq_from_file\n")
    c = from_mapping({**GOOD, "controlPlaneToken": "", "controlPlaneTokenFile": str(token_file)})
    assert c.peer_token == "rmq_from_file"


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"brokerName": ""}, "brokerName: required"),
        ({"brokerId": "one"}, "brokerId: must be an integer"),
        ({"brokerId": "-1"}, "brokerId: must be >= 0"),
        ({"brokerRole": "SLAVE"}, "brokerId: a SLAVE's brokerId must be > 0"),
        ({"brokerRole": "LEADER"}, "brokerRole: must be ASYNC_MASTER, SYNC_MASTER or SLAVE"),
        ({"inSyncReplicas": "3", "totalReplicas": "2"}, "inSyncReplicas: must be <= totalReplicas"),
        ({"haMasterAddress": "nohost"}, "haMasterAddress: must be host:port"),
        ({"listenPort": "70000"}, "listenPort: must be a port number"),
        ({"flushDiskType": "SOMETIMES"}, "flushDiskType: must be ASYNC_FLUSH or SYNC_FLUSH"),
        ({"enableSlaveActingMaster": "yes"}, "enableSlaveActingMaster: must be true or false"),
        ({"brokerNmae": "typo"}, "brokerNmae: unknown key"),
        ({"controlPlaneUrl": "127.0.0.1:8000"}, "controlPlaneUrl: must start with http"),
        ({"controlPlaneToken": ""}, "controlPlaneToken: required"),
        ({"mappedFileSizeCommitLog": "100"}, "mappedFileSizeCommitLog: must be at least 4096"),
        ({"flushCommitLogLeastPages": "-1"}, "flushCommitLogLeastPages: must be >= 0"),
        ({"popReviveAfterTakeoverMillis": "-1"}, "popReviveAfterTakeoverMillis: must be >= 0"),
        ({"timerPrecisionMs": "5"}, "timerPrecisionMs: must be between 10 and 1000"),
        ({"timerPrecisionMs": "2000"}, "timerPrecisionMs: must be between 10 and 1000"),
        ({"timerMaxDelaySec": "0"}, "timerMaxDelaySec: must be > 0"),
        ({"timerWheelEnable": "maybe"}, "timerWheelEnable"),
        ({"transactionTimeOut": "0"}, "transactionTimeOut: must be > 0"),
        ({"transactionCheckMax": "-1"}, "transactionCheckMax: must be > 0"),
        ({"transactionCheckInterval": "0"}, "transactionCheckInterval: must be > 0"),
        ({"flushCommitLogThoroughInterval": "0"}, "flushCommitLogThoroughInterval: must be > 0"),
        ({"syncBrokerMemberGroupPeriod": "0"}, "syncBrokerMemberGroupPeriod: must be > 0"),
        ({"sendHeartbeatTimeoutMillis": "-5"}, "sendHeartbeatTimeoutMillis: must be > 0"),
        ({"skipPreOnline": "1"}, "skipPreOnline: must be true or false"),
        # Well-known RocketMQ keys of features this broker does not have.
        ({"namesrvAddr": "127.0.0.1:9876"}, "namesrvAddr: a RocketMQ broker key this broker does not support (brokers find"),
        ({"enableDLegerCommitLog": "true"}, "enableDLegerCommitLog: a RocketMQ broker key this broker does not support"),
        ({"duplicationEnable": "false"}, "duplicationEnable: a RocketMQ broker key this broker does not support"),
        ({"enablePropertyFilter": "true"}, "enablePropertyFilter: a RocketMQ broker key this broker does not support"),
        ({"transientStorePoolEnable": "true"}, "transientStorePoolEnable: a RocketMQ broker key this broker does not support"),
        ({"enableLmq": "true"}, "enableLmq: a RocketMQ broker key this broker does not support"),
        ({"aclEnable": "true"}, "aclEnable: a RocketMQ broker key this broker does not support"),
    ],
)
def test_each_problem_is_named(change, problem):
    with pytest.raises(ConfigInvalid) as e:
        from_mapping({**GOOD, **change})
    assert any(p.startswith(problem) for p in e.value.problems), e.value.problems


def test_every_problem_is_named_at_once():
    with pytest.raises(ConfigInvalid) as e:
        from_mapping({**GOOD, "timerPrecisionMs": "1", "transactionCheckMax": "0"})
    assert [p.split(":")[0] for p in e.value.problems] == ["timerPrecisionMs", "transactionCheckMax"]


def test_a_harness_cannot_write_an_unsupported_key_either():
    with pytest.raises(ConfigInvalid, match="namesrvAddr: a RocketMQ broker key this broker does not support"):
        render_conf({"brokerName": "a", "namesrvAddr": "127.0.0.1:9876"})
    assert render_conf({"peerToken": "t", "skipPreOnline": True}) == "peerToken=t\nskipPreOnline=true\n"


def test_properties_format():
    assert parse_properties("# comment\n! also\n\nbrokerName = a\nbrokerId=2\n") == {"brokerName": "a", "brokerId": "2"}
    with pytest.raises(ConfigInvalid, match="line 1"):
        parse_properties("no equals sign")


def test_the_cli_exits_2_with_one_line_per_problem(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerId=x\nlistenPort=0\n")
    run = subprocess.run([sys.executable, "-m", "brokers", "-c", str(conf)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "invalid broker configuration" in run.stderr and "brokerId: must be an integer" in run.stderr
    assert "Traceback" not in run.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "brokers", "-c", str(tmp_path / "nope.conf")], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_the_cli_names_a_rocketmq_key_it_does_not_support(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(render_conf(GOOD) + "enablePropertyFilter=true\n")
    run = subprocess.run([sys.executable, "-m", "brokers", "-c", str(conf)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "enablePropertyFilter: a RocketMQ broker key this broker does not support" in run.stderr
    assert "unknown key" not in run.stderr and "Traceback" not in run.stderr
