"""Broker configuration: a properties file with RocketMQ's key names, read as RocketMQ reads it.

RocketMQ's BrokerStartup loads broker.conf with Java's ``Properties.load(InputStream)`` and
``MixAll.properties2Object`` trims each value; so does this module (the ``javaproperties`` library):
``key=value``, ``key: value`` and ``key value``, ``#`` and ``!`` comment lines, a line ending in an odd
number of backslashes continued on the next, ``\\uXXXX`` escapes, the file's bytes read as ISO-8859-1,
and a key set twice keeps its last value.

Unknown keys are refused (a typo must not silently fall back to a default), and so are RocketMQ keys
of features this broker does not have and values it does not support yet, each with its own message;
values are typed by the key's default. ``python -m brokers -c broker.conf`` exits with code 2 and one
line per problem when the file is invalid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import javaproperties

from mqrules import validation
from mqrules.acl import DEFAULT_SKEW_MS
from mqrules.keyed_config import BROKER_SECRET_KEYS

from .core.delay_levels import DEFAULT_DELAY_LEVELS, parse_delay_levels
from .core.retention import HOUR_MS, RetentionPolicy, parse_delete_when, ratio_problems
from .core.roles import BrokerRole
from .store.files import write_text_atomically
from .tls import tls_problems


class ConfigInvalid(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class BrokerConfig:
    brokerName: str = ""  # required
    brokerClusterName: str = "DefaultCluster"
    brokerId: int = 0
    brokerIP1: str = "127.0.0.1"
    listenPort: int = 10911
    haListenPort: int = 10912
    grpcServerPort: int = 8081  # the RocketMQ 5 client endpoint (MessagingService)
    storePathRootDir: str = ""  # required
    flushDiskType: str = "ASYNC_FLUSH"
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4  # ASYNC_FLUSH: the flush thread flushes once this many 4 KB pages are unflushed
    flushCommitLogThoroughInterval: int = 10000  # ms: and then whatever is unflushed
    mappedFileSizeCommitLog: int = 1 << 30
    # The message index (brokers/store/index.py, docs/messages.md §1; RocketMQ's names and defaults): a
    # file of maxHashSlotNum slots and maxIndexNum entries (420 MB, sparse), followed by a new one when full.
    messageIndexEnable: bool = True
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 20_000_000
    # The control plane (nameserver + controller) this broker belongs to.
    controlPlaneUrl: str = ""  # required, e.g. http://127.0.0.1:8000
    controlPlaneToken: str = ""  # a broker token, or controlPlaneTokenFile
    controlPlaneTokenFile: str = ""
    brokerHeartbeatInterval: int = 1000
    registerNameServerPeriod: int = 30000
    brokerNotActiveTimeoutMillis: int = 10000
    # The timeout of each heartbeat to the nameserver (RocketMQ's BrokerConfig: 1000 ms, reference §2.1);
    # one unanswered this long resets the link (brokers/control/nameserver.py), which registers again.
    sendHeartbeatTimeoutMillis: int = 1000
    # true (RocketMQ's default) has a broker speak to nameservers older than RIP-32: heartbeats as
    # QUERY_DATA_VERSION, the member group through the route of rmq_sys_SYNC_BROKER_MEMBER_{brokerName}
    # (reference §3.4, §3.7). The control plane is a new nameserver and this broker speaks only the new
    # frames, so false is the one value it takes (_check refuses true).
    compatibleWithOldNameSrv: bool = False
    # Slave-acting-master (reference §5): the member-group poll, pre-online, escape, the lock quorum.
    enableSlaveActingMaster: bool = False
    syncBrokerMemberGroupPeriod: int = 1000
    skipPreOnline: bool = False
    enableRemoteEscape: bool = False  # an acting master sends due timers to another master (brokers/escape.py)
    # true: a FIFO queue is handed out once its pop record is on totalReplicas / 2 + 1 replicas (RIP-32's
    # lock quorum, reference §5.5; brokers/grpc/consumer.py _pop_orderly)
    lockInStrictMode: bool = False
    # Ours: the token brokers of one replica group present on each other's peer channel (listenPort,
    # brokers/control/peers.py); empty: the control-plane token (controlPlaneToken / ...TokenFile).
    peerToken: str = ""
    # Delivery attempts before a message goes to its group's DLQ: the subscription-group setting of
    # that name, applied to every group (this broker keeps no per-group subscription configs).
    retryMaxTimes: int = 16
    # Ours: after a takeover (a new master, or an acting master), a message its old master had handed
    # out and that is not acked within this long is delivered again, whatever its invisible time: the
    # old master may have recorded a receive whose answer never reached the client. 0: keep each
    # message's own invisible time (RocketMQ's behaviour).
    popReviveAfterTakeoverMillis: int = 5000
    # Timer messages (brokers/timer.py; RocketMQ's names): off refuses them. The wheel turns every
    # timerPrecisionMs (RocketMQ: 1000; a due message waits at most about one turn) and takes
    # delivery times up to timerMaxDelaySec ahead.
    timerWheelEnable: bool = True
    timerPrecisionMs: int = 50
    timerMaxDelaySec: int = 259200
    # 4.x delay levels (brokers/core/delay_levels.py), carried out by the same wheel: a message's DELAY
    # property is a level of messageDelayLevel; useDelayLevel (RocketMQ's proxy setting) rounds every
    # 5.x delivery time up to a level.
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    useDelayLevel: bool = False
    # RocketMQ's proxy setting: a sent message's type (normal, FIFO, delay, transactional) must be one
    # its topic's message.type takes. Off for 4.x applications whose topics carry no type (their
    # delay-level and transactional messages go to plain NORMAL topics). Retry and DLQ topics are
    # never checked.
    enableTopicMessageTypeCheck: bool = True
    # Transactions (brokers/transaction.py; RocketMQ's names and defaults): a half message unresolved
    # this long is checked (its producer asked), every transactionCheckInterval, at most
    # transactionCheckMax times, then discarded to TRANS_CHECK_MAX_TIME_TOPIC.
    transactionTimeOut: int = 6000
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 30000
    # Replication (reference §2.7, §4): the role in classic master/slave mode, the HA link, quorum write.
    brokerRole: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    haMasterAddress: str = ""  # a slave's master HA address; empty: the one the nameserver reports
    haTransferBatchSize: int = 32 * 1024
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20000
    haMaxTimeSlaveNotCatchup: int = 15000
    haMaxGapNotInSync: int = 256 * 1024 * 1024
    totalReplicas: int = 1
    inSyncReplicas: int = 1
    minInSyncReplicas: int = 1
    enableAutoInSyncReplicas: bool = False
    allAckInSyncStateSet: bool = False
    slaveTimeout: int = 3000
    syncFromLastFile: bool = False
    asyncLearner: bool = False
    # Controller mode (reference §2.1, §2.7): the controller assigns ids and roles.
    enableControllerMode: bool = False
    brokerElectionPriority: int = 2**31 - 1  # lower is preferred
    controllerHeartBeatTimeoutMills: int = 10000
    syncBrokerMetadataPeriod: int = 5000
    checkSyncStateSetPeriod: int = 5000
    zoneName: str = ""
    # Ours: how often the broker reports its status, config and offsets to the control plane (the
    # broker_status frame, docs/websocket.md), for brokerStatus / consumerProgress and the dashboard.
    brokerStatusReportInterval: int = 2000
    # Retention and disk policy (brokers/retention.py, the rules in brokers/core/retention.py; RocketMQ's
    # MessageStoreConfig names and defaults): commit-log files older than fileReservedTime hours go at a
    # deleteWhen hour (hours 0-23, ';'-separated), one per deleteCommitLogFilesInterval ms, looked at
    # every cleanResourceInterval ms and whenever a file is started; past diskMaxUsedSpaceRatio percent
    # expired files go at once, past diskSpaceCleanForciblyRatio (cleanFileForciblyEnable) the oldest go
    # expired or not, past diskSpaceWarningLevelRatio sends are refused.
    fileReservedTime: int = 72
    # Ours: the retention in milliseconds, overriding fileReservedTime when > 0 (tests and small disks:
    # RocketMQ's key takes whole hours).
    fileReservedTimeMillis: int = 0
    deleteWhen: str = "04"
    deleteCommitLogFilesInterval: int = 100
    cleanResourceInterval: int = 10000
    diskMaxUsedSpaceRatio: int = 75
    diskSpaceCleanForciblyRatio: int = 85
    diskSpaceWarningLevelRatio: int = 90
    cleanFileForciblyEnable: bool = True
    # RocketMQ: how long a deleted file still mapped by a reader may live. Reads here are preads that
    # finish in microseconds; a deleted file is closed once the reads in flight are done, well within it.
    destroyMapedFileIntervalForcibly: int = 120000
    # Metrics (brokers/metrics.py, docs/metrics.md; RocketMQ's BrokerConfig keys): PROM serves Prometheus'
    # text format at http://metricsPromExporterHost:metricsPromExporterPort/metrics (host empty: brokerIP1;
    # port 0: a free one, reported as status.metricsAddr), DISABLE serves nothing. RocketMQ's default is
    # DISABLE; ours is PROM, so a cluster can be watched without configuring each broker.
    metricsExporterType: str = "PROM"
    metricsPromExporterHost: str = ""
    metricsPromExporterPort: int = 5557
    # Access control (ACL 2.0, issue 39; brokers/acl.py, docs/acl.md; RocketMQ 5.3's names): every client
    # request's signature checked against its user's secret key (authentication), and what it asks of
    # which topic and group against the user's policies (authorization). aclEnable is 4.x's switch: it
    # turns both on. Users and policies come from the control plane; until they first arrive, every
    # client request is refused.
    authenticationEnabled: bool = False
    authorizationEnabled: bool = False
    aclEnable: bool = False
    # Ours: a gRPC signature's x-mq-date-time further than this from the broker's clock is refused (a
    # captured header cannot be replayed later). rocketmq-python-client stamps that header with its
    # LOCAL time followed by 'Z', so a client whose clock is outside UTC looks skewed by its UTC offset:
    # run such clients with TZ=UTC, or raise this above the offset.
    authenticationSkewMillis: int = DEFAULT_SKEW_MS
    # TLS (brokers/tls.py, docs/acl.md "TLS"; RocketMQ's names where it has them): the gRPC endpoint's mode
    # (disabled | permissive | enforcing, RocketMQ's TlsMode), the certificate and key the broker's
    # listeners present, the cluster CA; ours: mutual TLS with the cluster CA on the HA link and the peer
    # channel (per-broker certificates instead of peerToken), and the CA of the control plane's https.
    tlsServerMode: str = "disabled"
    tlsServerCertPath: str = ""
    tlsServerKeyPath: str = ""
    tlsServerTrustCertPath: str = ""
    tlsClientCertPath: str = ""  # empty: tlsServerCertPath (a broker's certificate serves both ends)
    tlsClientKeyPath: str = ""
    tlsClientTrustCertPath: str = ""  # empty: tlsServerTrustCertPath
    tlsReplicationEnable: bool = False
    controlPlaneCaPath: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def broker_addr(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def metrics_host(self) -> str:
        return self.metricsPromExporterHost or self.brokerIP1

    @property
    def grpc_addr(self) -> str:
        return f"{self.brokerIP1}:{self.grpcServerPort}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.brokerIP1}:{self.haListenPort}"

    @property
    def token(self) -> str:
        if self.controlPlaneToken:
            return self.controlPlaneToken
        return Path(self.controlPlaneTokenFile).read_text().strip()

    @property
    def peer_token(self) -> str:
        return self.peerToken or self.token

    @property
    def retention_policy(self) -> RetentionPolicy:
        return RetentionPolicy(
            reserved_ms=self.fileReservedTimeMillis or self.fileReservedTime * HOUR_MS,
            delete_hours=parse_delete_when(self.deleteWhen),
            max_used_ratio=self.diskMaxUsedSpaceRatio,
            clean_forcibly_ratio=self.diskSpaceCleanForciblyRatio,
            warning_ratio=self.diskSpaceWarningLevelRatio,
            clean_forcibly=self.cleanFileForciblyEnable,
        )

    @property
    def authentication_on(self) -> bool:
        return self.authenticationEnabled or self.aclEnable

    @property
    def authorization_on(self) -> bool:
        return self.authorizationEnabled or self.aclEnable

    @property
    def heartbeat_timeout_millis(self) -> int:
        # RocketMQ sends brokerNotActiveTimeoutMillis only with enableSlaveActingMaster; else the
        # nameserver's default of 120 s applies. We always send a heartbeat, so a short timeout is safe.
        return self.brokerNotActiveTimeoutMillis


# RocketMQ's MetricsExporterType: OTLP_GRPC and LOG are RocketMQ's too, not served here (refused at startup).
METRICS_EXPORTER_TYPES = ("DISABLE", "PROM")

_FIELDS = {f.name: f for f in fields(BrokerConfig) if f.name != "extra"}

# RocketMQ broker keys (BrokerConfig, MessageStoreConfig) for features this broker does not have: an
# operator's broker.conf that sets one learns so at startup, instead of reading "unknown key".
_UNSUPPORTED_KEYS = {
    "namesrvAddr": "brokers find the nameserver and the controller at controlPlaneUrl",
    "controllerAddr": "brokers find the nameserver and the controller at controlPlaneUrl",
    "fetchNamesrvAddrByAddressServer": "brokers find the nameserver and the controller at controlPlaneUrl",
    "enableDLegerCommitLog": "DLedger replication; use enableControllerMode for automatic failover",
    "duplicationEnable": "DLedger's duplication mode",
    "enablePropertyFilter": "SQL92 filtering",
    "enableCalcFilterBitMap": "SQL92 filtering's bit maps",
    "enableConsumeQueueExt": "the extended consume queue of SQL92 filtering",
    "transientStorePoolEnable": "the off-heap write buffer",
    "enableLmq": "light message queues",
    "enableMultiDispatch": "multi-dispatch of light message queues",
}


def _key_problem(key: str) -> str | None:
    """Why ``key`` cannot appear in a broker.conf, or None."""
    if key in _FIELDS:
        return None
    if key in _UNSUPPORTED_KEYS:
        return f"{key}: a RocketMQ broker key this broker does not support ({_UNSUPPORTED_KEYS[key]})"
    return f"{key}: unknown key"


# Properties.load(InputStream) reads bytes as ISO-8859-1; other characters are written as \uXXXX.
CONF_ENCODING = "latin-1"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Properties' line terminators (a form feed is whitespace)
_JAVA_WHITESPACE = "".join(map(chr, range(0x21)))  # what Java's String.trim() removes: U+0000..U+0020


def _java_trim(value: str) -> str:
    """``value`` as RocketMQ's ``MixAll.properties2Object`` takes it: ``String.trim()``."""
    return value.strip(_JAVA_WHITESPACE)


def _settings(text: str) -> list[javaproperties.PropertiesElement]:
    """``text``'s logical lines (a key-value with its continuation lines, a comment, blank lines) as
    ``Properties.load`` reads them. A malformed ``\\u`` escape (Java: IllegalArgumentException)
    raises ConfigInvalid with the number of the line it starts on."""
    elements: list[javaproperties.PropertiesElement] = []
    try:
        for element in javaproperties.parse(text):
            elements.append(element)
    except javaproperties.InvalidUEscapeError as exc:
        line = 1 + sum(len(_LINE_BREAK.findall(e.source)) for e in elements)
        raise ConfigInvalid([f"line {line}: {exc.escape}: a \\u escape takes four hexadecimal digits"]) from None
    return elements


def parse_properties(text: str) -> dict[str, str]:
    """``{key: value}`` as RocketMQ reads a broker.conf (the module's docstring): the last setting of
    a key wins, every value trimmed."""
    return {e.key: _java_trim(e.value) for e in _settings(text) if isinstance(e, javaproperties.KeyValue)}


def _conf_text(value: object) -> str:
    """A value as broker.conf writes it: booleans ``true`` / ``false``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


# Escaped in a written value: the backslash, and every character outside printable ASCII. Nothing else
# needs it after the separator (a value's ``=``, ``:``, ``#`` and ``!`` are its own), so a URL or a path
# stays readable.
_NEEDS_ESCAPE = re.compile(r"[^\x20-\x7e]|\\")


def _setting_line(key: str, text: str) -> str:
    """``key=text`` as one properties line that reads back as ``text`` (trimmed, as every value is)."""
    return f"{key}={_NEEDS_ESCAPE.sub(lambda m: javaproperties.escape(m.group()), text)}\n"


def render_conf(keys: Mapping[str, object]) -> str:
    """A ``broker.conf`` text, one ``key=value`` line per key in the given order: the inverse of
    :func:`parse_properties`. Unknown keys and values that do not fit on one line are refused, so a
    harness typo fails where the file is written; booleans are written ``true`` / ``false``."""
    problems, lines = [], []
    for key, value in keys.items():
        if (problem := _key_problem(key)) is not None:
            problems.append(problem)
            continue
        text = _conf_text(value)
        if "\n" in text or "\r" in text:
            problems.append(f"{key}: the value must fit on one line")
        lines.append(_setting_line(key, text))
    if problems:
        raise ConfigInvalid(problems)
    return "".join(lines)


def load(path: str | Path) -> BrokerConfig:
    try:
        text = Path(path).read_text(encoding=CONF_ENCODING)
    except OSError as exc:
        raise ConfigInvalid([f"cannot read {path}: {exc.strerror}"]) from None
    return from_mapping(parse_properties(text))


def from_mapping(values: dict[str, str]) -> BrokerConfig:
    problems: list[str] = []
    typed: dict[str, object] = {}
    for key, raw in values.items():
        if (problem := _key_problem(key)) is not None:
            problems.append(problem)
            continue
        default = _FIELDS[key].default
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false"):
                    raise ValueError("must be true or false")
                typed[key] = raw.lower() == "true"
            elif isinstance(default, int):
                typed[key] = int(raw)
            else:
                typed[key] = raw
        except ValueError as exc:
            problems.append(f"{key}: {exc if 'must' in str(exc) else 'must be an integer'}")
    config = BrokerConfig(**typed) if not problems else None
    if config is not None:
        problems += _check(config)
    if problems:
        raise ConfigInvalid(problems)
    return config  # type: ignore[return-value]


def _listener_problems(c: BrokerConfig) -> list[str]:
    """The ports the broker listens on, and its metrics' exporter."""
    problems = []
    for key in ("listenPort", "haListenPort", "grpcServerPort"):
        if not 1 <= getattr(c, key) <= 65535:
            problems.append(f"{key}: must be a port number (1-65535)")
    if not 0 <= c.metricsPromExporterPort <= 65535:
        problems.append("metricsPromExporterPort: must be a port number (1-65535), or 0 for a free one")
    if c.metricsExporterType not in METRICS_EXPORTER_TYPES:
        problems.append(f"metricsExporterType: must be one of {', '.join(METRICS_EXPORTER_TYPES)}")
    return problems


def _check(c: BrokerConfig) -> list[str]:
    problems = []
    for key in ("brokerName", "storePathRootDir", "controlPlaneUrl"):
        if not getattr(c, key):
            problems.append(f"{key}: required")
    for key in ("brokerName", "brokerClusterName"):
        value = getattr(c, key)
        if value and (message := validation.name(value)) is not None:
            problems.append(f"{key}: {message}")
    if c.brokerId < 0:
        problems.append("brokerId: must be >= 0")
    problems += _listener_problems(c)
    if c.flushDiskType not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        problems.append("flushDiskType: must be ASYNC_FLUSH or SYNC_FLUSH")
    if c.brokerRole not in set(BrokerRole):
        problems.append("brokerRole: must be ASYNC_MASTER, SYNC_MASTER or SLAVE")
    elif c.brokerRole == BrokerRole.SLAVE and c.brokerId == 0:
        problems.append("brokerId: a SLAVE's brokerId must be > 0 (0 is the master's)")
    if c.haMasterAddress and ":" not in c.haMasterAddress:
        problems.append("haMasterAddress: must be host:port")
    if not 1024 <= c.haTransferBatchSize <= 16 * 1024 * 1024:
        problems.append("haTransferBatchSize: must be between 1024 and 16777216")
    for key in (
        "haSendHeartbeatInterval",
        "haHousekeepingInterval",
        "slaveTimeout",
        "haMaxTimeSlaveNotCatchup",
        "haMaxGapNotInSync",
        "brokerStatusReportInterval",
    ):
        if getattr(c, key) <= 0:
            problems.append(f"{key}: must be > 0")
    if not 1 <= c.minInSyncReplicas <= c.inSyncReplicas <= max(c.totalReplicas, c.inSyncReplicas):
        problems.append("inSyncReplicas/minInSyncReplicas: need 1 <= minInSyncReplicas <= inSyncReplicas")
    if c.inSyncReplicas > c.totalReplicas:
        problems.append("inSyncReplicas: must be <= totalReplicas")
    if c.mappedFileSizeCommitLog < 4096:
        problems.append("mappedFileSizeCommitLog: must be at least 4096")
    problems += _index_problems(c)
    if c.controlPlaneUrl and not c.controlPlaneUrl.startswith(("http://", "https://")):
        problems.append("controlPlaneUrl: must start with http:// or https://")
    if not c.controlPlaneToken and not c.controlPlaneTokenFile:
        problems.append("controlPlaneToken: required (or controlPlaneTokenFile)")
    elif c.controlPlaneTokenFile and not c.controlPlaneToken and not Path(c.controlPlaneTokenFile).is_file():
        problems.append(f"controlPlaneTokenFile: {c.controlPlaneTokenFile} does not exist")
    if c.compatibleWithOldNameSrv:
        problems.append(
            "compatibleWithOldNameSrv: true is for nameservers older than RIP-32 (heartbeats as QUERY_DATA_VERSION, "
            "the member group through a topic route); the control plane is a new one: set false or leave it out"
        )
    for key in (
        "brokerHeartbeatInterval",
        "registerNameServerPeriod",
        "brokerNotActiveTimeoutMillis",
        "flushIntervalCommitLog",
        "flushCommitLogThoroughInterval",
        "syncBrokerMemberGroupPeriod",
        "sendHeartbeatTimeoutMillis",
        "authenticationSkewMillis",
    ):
        if getattr(c, key) <= 0:
            problems.append(f"{key}: must be > 0")
    for key in ("flushCommitLogLeastPages", "popReviveAfterTakeoverMillis", "retryMaxTimes"):
        if getattr(c, key) < 0:
            problems.append(f"{key}: must be >= 0")
    if not 10 <= c.timerPrecisionMs <= 1000:
        problems.append("timerPrecisionMs: must be between 10 and 1000")
    if c.timerMaxDelaySec <= 0:
        problems.append("timerMaxDelaySec: must be > 0")
    try:
        longest = max(parse_delay_levels(c.messageDelayLevel))
    except ValueError as exc:
        problems.append(f"messageDelayLevel: {exc}")
    else:
        if longest > c.timerMaxDelaySec * 1000:
            problems.append("messageDelayLevel: a level is longer than timerMaxDelaySec")
    for key in ("transactionTimeOut", "transactionCheckMax", "transactionCheckInterval"):
        if getattr(c, key) <= 0:
            problems.append(f"{key}: must be > 0")
    return problems + _retention_problems(c) + tls_problems(c)


def _index_problems(c: BrokerConfig) -> list[str]:
    """The message index's sizes: Java ints, as RocketMQ's (an index file's entry 0 is never used)."""
    problems = []
    if not 1 <= c.maxHashSlotNum <= 2**31 - 1:
        problems.append("maxHashSlotNum: must be between 1 and 2147483647")
    if not 2 <= c.maxIndexNum <= 2**31 - 1:
        problems.append("maxIndexNum: must be between 2 and 2147483647 (an index file's entry 0 is never used)")
    return problems


def _retention_problems(c: BrokerConfig) -> list[str]:
    problems = []
    for key in ("fileReservedTime", "deleteCommitLogFilesInterval", "cleanResourceInterval", "destroyMapedFileIntervalForcibly"):
        if getattr(c, key) <= 0:
            problems.append(f"{key}: must be > 0")
    if c.fileReservedTimeMillis < 0:
        problems.append("fileReservedTimeMillis: must be >= 0 (0: fileReservedTime applies)")
    try:
        parse_delete_when(c.deleteWhen)
    except ValueError as exc:
        problems.append(f"deleteWhen: {exc}")
    return problems + ratio_problems(c.diskMaxUsedSpaceRatio, c.diskSpaceCleanForciblyRatio, c.diskSpaceWarningLevelRatio)


# --- changes on a running broker (update_broker_config, mqadmin's updateBrokerConfig) ------------------

# The keys an operator may change without a restart. Each is read from the broker's one BrokerConfig
# at use time, except where a component keeps a value derived from it at startup, which
# brokers/admin.py rebuilds after a change (the HA service's QuorumConfig, the metalog's revive cap, the
# transaction checker's limits). Keys read once (ports, paths, roles, periods of loops that started,
# the timer wheel's slots) need a restart.
DYNAMIC_KEYS = frozenset(
    {
        "retryMaxTimes",
        "popReviveAfterTakeoverMillis",
        "useDelayLevel",
        "enableTopicMessageTypeCheck",
        "lockInStrictMode",
        "transactionTimeOut",
        "transactionCheckMax",
        "transactionCheckInterval",
        "inSyncReplicas",
        "minInSyncReplicas",
        "allAckInSyncStateSet",
        "enableAutoInSyncReplicas",
        "haMaxTimeSlaveNotCatchup",
        "haMaxGapNotInSync",
        "slaveTimeout",
        "brokerElectionPriority",
        "brokerStatusReportInterval",
        # Retention: brokers/retention.py reads them at every look (RocketMQ reads them at every run).
        "fileReservedTime",
        "fileReservedTimeMillis",
        "deleteWhen",
        "deleteCommitLogFilesInterval",
        "cleanResourceInterval",
        "diskMaxUsedSpaceRatio",
        "diskSpaceCleanForciblyRatio",
        "diskSpaceWarningLevelRatio",
        "cleanFileForciblyEnable",
        "destroyMapedFileIntervalForcibly",
        # Access control (brokers/acl.py): switched on and off while clients keep their connections
        # (docs/acl.md "Turning access control on in a running cluster").
        "authenticationEnabled",
        "authorizationEnabled",
        "aclEnable",
    }
)


def conf_values(config: BrokerConfig) -> dict[str, str]:
    """Every key's value as broker.conf text."""
    return {key: _conf_text(getattr(config, key)) for key in _FIELDS}


def reported_values(config: BrokerConfig) -> dict[str, str]:
    """What the broker_status report shows: every key but the secrets."""
    return {key: value for key, value in conf_values(config).items() if key not in BROKER_SECRET_KEYS}


@dataclass(frozen=True)
class ConfigUpdate:
    config: BrokerConfig  # the whole configuration with the changes
    changed: dict[str, tuple[str, str]]  # key -> (old, new) as broker.conf text; only values that differ


def plan_update(config: BrokerConfig, updates: Mapping[str, object]) -> ConfigUpdate:
    """Check an operator's changes (``{key: broker.conf text}``) to a running broker's ``config``:
    only DYNAMIC_KEYS, and the values as a broker.conf holding them is checked (the merged values
    go through ``from_mapping``: one rule for both). Raises ConfigInvalid, one problem per key.
    Pure: nothing is applied (``apply_update``) or written (``rewrite_conf``)."""
    problems, texts = [], {}
    for key, value in updates.items():
        if key not in DYNAMIC_KEYS:
            restart = f"{key}: cannot be changed on a running broker (set it in broker.conf and restart)"
            problems.append(_key_problem(key) or restart)
        elif isinstance(value, bool | int):  # a JSON number or boolean: as broker.conf writes it
            texts[key] = _conf_text(value)
        elif not isinstance(value, str):
            problems.append(f"{key}: must be a string")
        elif "\n" in value or "\r" in value:
            problems.append(f"{key}: the value must fit on one line")
        else:
            texts[key] = _java_trim(value)  # as every value in broker.conf is taken
    if problems:
        raise ConfigInvalid(problems)
    old = conf_values(config)
    new = from_mapping(old | texts)
    changed = {key: (old[key], text) for key in texts if (text := _conf_text(getattr(new, key))) != old[key]}
    return ConfigUpdate(new, changed)


def apply_update(shared: BrokerConfig, update: ConfigUpdate) -> None:
    """Carry ``update``'s changed keys into ``shared``, the one BrokerConfig every component of the
    broker holds by reference. It stays a frozen dataclass so that no component changes it by accident:
    this is the one sanctioned change, of DYNAMIC_KEYS only, all keys at once (no await in between, so
    no reader on the event loop sees half of an update such as inSyncReplicas with minInSyncReplicas).
    Derived copies are the caller's to rebuild (brokers/admin.py)."""
    for key in update.changed:
        if key not in DYNAMIC_KEYS:
            raise ValueError(f"{key} is not a dynamic key")
        object.__setattr__(shared, key, getattr(update.config, key))


def rewrite_conf(text: str, changes: Mapping[str, str]) -> str:
    """``text`` (a broker.conf) with ``changes`` (``{key: text}``): each setting of a changed key, in
    whichever form it was written (``key: value``, continued over several lines, ...), is replaced by
    one ``key=value`` line, every other line (comments, blank lines, other keys) kept as it was; a key
    the file did not set is added at the end. So a restart keeps what an operator changed (RocketMQ
    persists updateBrokerConfig to its broker.conf too)."""
    lines, seen = [], set()
    for element in _settings(text):
        if isinstance(element, javaproperties.KeyValue) and element.key in changes:
            lines.append(_setting_line(element.key, changes[element.key]))
            seen.add(element.key)
        else:
            lines.append(element.source)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    lines += [_setting_line(key, value) for key, value in changes.items() if key not in seen]
    return "".join(lines)


def persist_changes(path: str | Path, changes: Mapping[str, str]) -> None:
    """Write ``changes`` into the broker.conf at ``path`` (``rewrite_conf``), atomically: a crash
    leaves the old file or the new one. Blocking: run it off the event loop."""
    path = Path(path)
    text = rewrite_conf(path.read_text(encoding=CONF_ENCODING), changes)
    write_text_atomically(path, text, encoding=CONF_ENCODING)
