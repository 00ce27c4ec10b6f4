"""``python -m brokers -c broker.conf``: an invalid config gives a clear message and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from brokers.config import ConfigInvalid, from_mapping, parse_properties

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
        ({"flushCommitLogThoroughInterval": "0"}, "flushCommitLogThoroughInterval: must be > 0"),
    ],
)
def test_each_problem_is_named(change, problem):
    with pytest.raises(ConfigInvalid) as e:
        from_mapping({**GOOD, **change})
    assert any(p.startswith(problem) for p in e.value.problems), e.value.problems


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
