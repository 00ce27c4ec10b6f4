"""``python -m brokers -c broker.conf``: the file is read as RocketMQ reads it (Java's Properties.load),
each key acts or is refused, and an invalid config gives a clear message and exit code 2."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import websockets

from brokers.config import ConfigInvalid, from_mapping, load, parse_properties, render_conf, rewrite_conf
from brokers.control.nameserver import CALL_TIMEOUT_S, NameserverLink
from brokers.topics import TopicConfigManager

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
    # RocketMQ's default is true (speak to nameservers older than RIP-32); the control plane is a new
    # one, so false is the one value this broker takes.
    "compatibleWithOldNameSrv": False,
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
        ({"compatibleWithOldNameSrv": "true"}, "compatibleWithOldNameSrv: true is for nameservers older than RIP-32"),
        # Retention (issue 37): RocketMQ's keys, and ours in milliseconds.
        ({"deleteWhen": "4am"}, "deleteWhen: '4am' is not an hour"),
        ({"deleteWhen": "04;25"}, "deleteWhen: '25' is not an hour"),
        ({"fileReservedTime": "0"}, "fileReservedTime: must be > 0"),
        ({"fileReservedTime": "-72"}, "fileReservedTime: must be > 0"),
        ({"fileReservedTimeMillis": "-1"}, "fileReservedTimeMillis: must be >= 0"),
        ({"diskMaxUsedSpaceRatio": "5"}, "diskMaxUsedSpaceRatio: must be between 10 and 95"),
        ({"diskSpaceWarningLevelRatio": "99"}, "diskSpaceWarningLevelRatio: must be between 10 and 95"),
        ({"diskMaxUsedSpaceRatio": "88"}, "diskSpaceCleanForciblyRatio: the ratios must be in order"),
        ({"cleanResourceInterval": "0"}, "cleanResourceInterval: must be > 0"),
        ({"deleteCommitLogFilesInterval": "0"}, "deleteCommitLogFilesInterval: must be > 0"),
        ({"cleanFileForciblyEnable": "sometimes"}, "cleanFileForciblyEnable: must be true or false"),
        # Well-known RocketMQ keys of features this broker does not have.
        ({"namesrvAddr": "127.0.0.1:9876"}, "namesrvAddr: a RocketMQ broker key this broker does not support (brokers find"),
        ({"enableDLegerCommitLog": "true"}, "enableDLegerCommitLog: a RocketMQ broker key this broker does not support"),
        ({"duplicationEnable": "false"}, "duplicationEnable: a RocketMQ broker key this broker does not support"),
        ({"enablePropertyFilter": "true"}, "enablePropertyFilter: a RocketMQ broker key this broker does not support"),
        ({"transientStorePoolEnable": "true"}, "transientStorePoolEnable: a RocketMQ broker key this broker does not support"),
        ({"enableLmq": "true"}, "enableLmq: a RocketMQ broker key this broker does not support"),
        ({"authenticationEnabled": "yes"}, "authenticationEnabled: must be true or false"),
        ({"authenticationSkewMillis": "0"}, "authenticationSkewMillis: must be > 0"),
    ],
)
def test_each_problem_is_named(change, problem):
    with pytest.raises(ConfigInvalid) as e:
        from_mapping({**GOOD, **change})
    assert any(p.startswith(problem) for p in e.value.problems), e.value.problems


# Access control (issue 39): RocketMQ 5.3's switches, default off; aclEnable (4.x) turns both on.
@pytest.mark.parametrize(
    "change, authentication, authorization",
    [
        ({}, False, False),
        ({"authenticationEnabled": "true"}, True, False),
        ({"authorizationEnabled": "true"}, False, True),
        ({"authenticationEnabled": "true", "authorizationEnabled": "true"}, True, True),
        ({"aclEnable": "true"}, True, True),
    ],
    ids=["default off", "authentication", "authorization", "both", "aclEnable: the 4.x alias"],
)
def test_access_control_switches(change, authentication, authorization):
    c = from_mapping({**GOOD, **change})
    assert (c.authentication_on, c.authorization_on) == (authentication, authorization)
    assert c.authenticationSkewMillis == 15 * 60 * 1000


def test_every_problem_is_named_at_once():
    with pytest.raises(ConfigInvalid) as e:
        from_mapping({**GOOD, "timerPrecisionMs": "1", "transactionCheckMax": "0"})
    assert [p.split(":")[0] for p in e.value.problems] == ["timerPrecisionMs", "transactionCheckMax"]


def test_a_harness_cannot_write_an_unsupported_key_either():
    with pytest.raises(ConfigInvalid, match="namesrvAddr: a RocketMQ broker key this broker does not support"):
        render_conf({"brokerName": "a", "namesrvAddr": "127.0.0.1:9876"})
    assert render_conf({"peerToken": "t", "skipPreOnline": True}) == "peerToken=t\nskipPreOnline=true\n"


# Java's Properties.load, as RocketMQ's BrokerStartup reads broker.conf, then each value trimmed as
# MixAll.properties2Object does.
PROPERTIES_SYNTAX = [
    pytest.param("brokerName=a\n", {"brokerName": "a"}, id="key=value"),
    pytest.param("brokerName: a\n", {"brokerName": "a"}, id="key: value"),
    pytest.param("brokerName a\n", {"brokerName": "a"}, id="key value"),
    pytest.param("brokerName\ta\n", {"brokerName": "a"}, id="key<tab>value"),
    pytest.param("brokerName \t= a\n", {"brokerName": "a"}, id="whitespace around the separator"),
    pytest.param("   brokerName=a\n", {"brokerName": "a"}, id="leading whitespace skipped"),
    pytest.param("brokerName=a  \t\n", {"brokerName": "a"}, id="trailing whitespace trimmed (properties2Object)"),
    pytest.param("haMasterAddress=h:1=2\n", {"haMasterAddress": "h:1=2"}, id="only the first separator splits"),
    pytest.param("controlPlaneUrl=http://h:1\n", {"controlPlaneUrl": "http://h:1"}, id="a colon in the value"),
    pytest.param("brokerName\n", {"brokerName": ""}, id="a key alone: empty value"),
    pytest.param("brokerName=\n", {"brokerName": ""}, id="key= : empty value"),
    pytest.param("# brokerName=a\n! brokerId=1\n  # indented\n", {}, id="# and ! comment lines"),
    pytest.param("brokerName=a # not a comment\n", {"brokerName": "a # not a comment"}, id="# after a value is the value's"),
    pytest.param("\n  \n\f\n", {}, id="blank lines"),
    pytest.param("storePathRootDir=/data/\\\n    rocketmq\n", {"storePathRootDir": "/data/rocketmq"}, id="continuation"),
    pytest.param("a=x\\\n  y\\\n  z\n", {"a": "xyz"}, id="continuation over three lines"),
    pytest.param("a=x\\\\\nb=y\n", {"a": "x\\", "b": "y"}, id="an even number of backslashes does not continue"),
    pytest.param("# a comment \\\nb=y\n", {"b": "y"}, id="a comment does not continue"),
    pytest.param("a=C:\\\\data\\tb\n", {"a": "C:\\data\tb"}, id="backslash escapes"),
    pytest.param("a=x\\y\n", {"a": "xy"}, id="a backslash before another character is dropped"),
    pytest.param("zoneName=\\u0041z\\u00e9\n", {"zoneName": "Az\u00e9"}, id="\\u escapes"),
    pytest.param("\\u0062rokerName=a\n", {"brokerName": "a"}, id="\\u escape in a key"),
    pytest.param("my\\ key\\:x=1\n", {"my key:x": "1"}, id="escaped whitespace and colon in a key"),
    pytest.param("brokerId=1\nbrokerId=2\n", {"brokerId": "2"}, id="a key set twice: the last wins"),
    pytest.param("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}, id="CRLF, CR, no final newline"),
]


@pytest.mark.parametrize("text, expected", PROPERTIES_SYNTAX)
def test_broker_conf_is_read_as_java_properties(text, expected):
    assert parse_properties(text) == expected


@pytest.mark.parametrize(
    "text, problem",
    [
        pytest.param("a=\\u12\n", "line 1: \\u12: a \\u escape takes four hexadecimal digits", id="too short"),
        pytest.param("# x\na=b\\\n c\nd=\\uZZZZ\n", "line 4: \\uZZZZ: a \\u escape takes four", id="not hex, line counted"),
    ],
)
def test_a_malformed_unicode_escape_names_its_line(text, problem):
    with pytest.raises(ConfigInvalid) as e:
        parse_properties(text)
    assert e.value.problems[0].startswith(problem), e.value.problems


def test_a_broker_conf_in_every_form_loads_typed(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_bytes(
        b"# broker-a, as an operator wrote it for RocketMQ\n"
        b"brokerName: broker-a\n"
        b"brokerId    1\n"
        b"brokerRole = SLAVE\n"
        b"storePathRootDir=/data/\\\n"
        b"    store\n"
        b"controlPlaneUrl=http://127.0.0.1:8000\n"
        b"controlPlaneToken=rmq_x\n"
        b"zoneName=z\\u00f3ne \xe9\n"  # a \u escape and an ISO-8859-1 byte: both read as RocketMQ reads them
        b"enableSlaveActingMaster=TRUE\n"
    )
    c = load(conf)
    assert (c.brokerName, c.brokerId, c.brokerRole, c.storePathRootDir) == ("broker-a", 1, "SLAVE", "/data/store")
    assert (c.zoneName, c.enableSlaveActingMaster) == ("z\u00f3ne \u00e9", True)


@pytest.mark.parametrize(
    "line, problem",
    [
        ("namesrvAddr 127.0.0.1:9876", "namesrvAddr: a RocketMQ broker key this broker does not support"),
        ("timerPrecisionMs : 5", "timerPrecisionMs: must be between 10 and 1000"),
        ("compatibleWithOldNameSrv true", "compatibleWithOldNameSrv: true is for nameservers older than RIP-32"),
    ],
    ids=["refused key", "refused value", "refused true"],
)
def test_a_refused_key_is_named_whatever_form_sets_it(tmp_path, line, problem):
    conf = tmp_path / "broker.conf"
    conf.write_text(render_conf(GOOD) + line + "\n")
    with pytest.raises(ConfigInvalid) as e:
        load(conf)
    assert [p for p in e.value.problems if p.startswith(problem)], e.value.problems


def test_a_line_without_separator_is_a_key_and_checked_as_one():
    """Properties.load has no syntax error but a malformed \\u: a line of words is a key and its value,
    and the typed checks name it."""
    with pytest.raises(ConfigInvalid) as e:
        from_mapping({**GOOD, **parse_properties("no equals sign\nbrokerId one\n")})
    assert e.value.problems == ["no: unknown key", "brokerId: must be an integer"]


@pytest.mark.parametrize(
    "value",
    ["C:\\data\\broker", "http://h:1/?a=b#c", "\u00e9t\u00e9 \u65e5\U0001f600", "!#=: x"],
    ids=["backslashes", "url", "non-ascii", "separators"],
)
def test_what_render_conf_writes_reads_back(value):
    text = render_conf({"storePathRootDir": value})
    assert text.isascii() and text.count("\n") == 1
    assert parse_properties(text) == {"storePathRootDir": value}


def test_render_conf_leaves_plain_values_readable():
    assert render_conf({"controlPlaneUrl": "http://127.0.0.1:8000", "storePathRootDir": "/a/b"}) == (
        "controlPlaneUrl=http://127.0.0.1:8000\nstorePathRootDir=/a/b\n"
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("retryMaxTimes: 5\n", "retryMaxTimes=3\n", id="key: value"),
        pytest.param("retryMaxTimes 5\n", "retryMaxTimes=3\n", id="key value"),
        pytest.param("# x\nretryMaxTimes=\\\n  5\nbrokerName=a\n", "# x\nretryMaxTimes=3\nbrokerName=a\n", id="continued"),
        pytest.param("retry\\u004daxTimes=5\n", "retryMaxTimes=3\n", id="escaped key"),
        pytest.param("a=1 \\\n retryMaxTimes=5\n", "a=1 \\\n retryMaxTimes=5\nretryMaxTimes=3\n", id="continued value"),
    ],
)
def test_a_runtime_change_rewrites_the_setting_in_whatever_form(text, expected):
    """updateBrokerConfig writes its change over the key's setting however the operator wrote it."""
    rewritten = rewrite_conf(text, {"retryMaxTimes": "3"})
    assert rewritten == expected
    assert parse_properties(rewritten)["retryMaxTimes"] == "3"


@pytest.mark.parametrize("timeout_ms", [200, 1500])
def test_a_heartbeat_gives_up_after_sendHeartbeatTimeoutMillis(tmp_path, timeout_ms):
    """sendHeartbeatTimeoutMillis is the timeout of each heartbeat to the nameserver (RocketMQ's
    BrokerConfig, reference §2.1): a control plane that answers registrations and never a heartbeat
    sees the broker give up that long after the heartbeat came, and close its socket to reconnect,
    not after the link's generic call timeout (CALL_TIMEOUT_S)."""
    heartbeat_at: list[float] = []
    closed_at: list[float] = []

    async def control_plane(ws) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "register":
                    await ws.send(json.dumps({"type": "register_result", "seq": frame["seq"], "payload": {}}))
                elif frame["type"] == "heartbeat" and not heartbeat_at:
                    heartbeat_at.append(loop.time())
        except websockets.ConnectionClosed:
            pass
        if heartbeat_at and not closed_at:
            closed_at.append(loop.time())

    async def scenario() -> None:
        async with websockets.serve(control_plane, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            config = replace(
                from_mapping(GOOD),
                controlPlaneUrl=f"http://127.0.0.1:{port}",
                brokerHeartbeatInterval=50,
                sendHeartbeatTimeoutMillis=timeout_ms,
            )
            link = NameserverLink(config, TopicConfigManager(tmp_path / "topics.json"))
            link.start()
            try:
                for _ in range(100):
                    if closed_at:
                        break
                    await asyncio.sleep(0.1)
            finally:
                await link.stop(unregister=False)

    asyncio.run(scenario())
    assert heartbeat_at and closed_at, "the heartbeat never timed out"
    waited = closed_at[0] - heartbeat_at[0]
    assert timeout_ms / 1000 * 0.9 <= waited < timeout_ms / 1000 + 1.0 < CALL_TIMEOUT_S, waited


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


def test_retention_keys_default_as_rocketmq_and_ours_overrides_the_hours():
    c = from_mapping(GOOD)
    assert (c.fileReservedTime, c.deleteWhen, c.deleteCommitLogFilesInterval, c.cleanResourceInterval) == (72, "04", 100, 10000)
    assert (c.diskMaxUsedSpaceRatio, c.diskSpaceCleanForciblyRatio, c.diskSpaceWarningLevelRatio) == (75, 85, 90)
    assert c.cleanFileForciblyEnable and c.destroyMapedFileIntervalForcibly == 120000
    assert c.retention_policy.reserved_ms == 72 * 3_600_000 and c.retention_policy.delete_hours == {4}
    assert from_mapping({**GOOD, "fileReservedTimeMillis": "1500"}).retention_policy.reserved_ms == 1500


def test_the_cli_refuses_bad_retention_keys_one_line_each(tmp_path):
    conf = tmp_path / "broker.conf"
    text = "".join(
        f"{k}={v}\n"
        for k, v in {**GOOD, "deleteWhen": "noon", "diskSpaceWarningLevelRatio": "97", "fileReservedTime": "0"}.items()
    )
    conf.write_text(text)
    run = subprocess.run([sys.executable, "-m", "brokers", "-c", str(conf)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    for line in (
        "deleteWhen: 'noon' is not an hour",
        "diskSpaceWarningLevelRatio: must be between 10 and 95",
        "fileReservedTime: must be > 0",
    ):
        assert sum(line in row for row in run.stderr.splitlines()) == 1, run.stderr


def test_the_cli_names_a_rocketmq_key_it_does_not_support(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(render_conf(GOOD) + "enablePropertyFilter=true\n")
    run = subprocess.run([sys.executable, "-m", "brokers", "-c", str(conf)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "enablePropertyFilter: a RocketMQ broker key this broker does not support" in run.stderr
    assert "unknown key" not in run.stderr and "Traceback" not in run.stderr
