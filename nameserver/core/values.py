"""Values that cross the boundary between the pure rules and the services."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MASTER_ID = 0
# Topics whose routes are never rewritten for an acting master (TopicValidator.SYNC_BROKER_MEMBER_GROUP_PREFIX).
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"
# DEFAULT_BROKER_CHANNEL_EXPIRED_TIME: liveness timeout when a registration carries none.
DEFAULT_HEARTBEAT_TIMEOUT_MILLIS = 120_000


@dataclass(frozen=True, order=True)
class DataVersion:
    """``DataVersion``: compared by stateVersion, then counter, then timestamp (reference §5.4)."""

    state_version: int = 0
    counter: int = 0
    timestamp: int = 0


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_sys_flag: int = 0
    attributes: Mapping[str, str] = field(default_factory=dict)  # mqrules.topic_attributes; never mutated


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0
    # Ours: the broker set's topic attributes (message.type), as its master registered them or an
    # operator set them; RocketMQ's QueueData has none (its proxy asks the broker). Never mutated.
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Member:
    """One replica of a broker set as the nameserver knows it: an entry of ``brokerAddrs`` plus the
    durable part of its ``brokerLiveTable`` entry."""

    broker_id: int
    broker_addr: str
    ha_server_addr: str = ""
    data_version: DataVersion = DataVersion()
    heartbeat_timeout_millis: int = DEFAULT_HEARTBEAT_TIMEOUT_MILLIS
    # Ours: where the broker serves RocketMQ 5 clients (gRPC MessagingService); "" if it does not.
    grpc_addr: str = ""


@dataclass(frozen=True)
class Group:
    """``BrokerData``: one broker set (all replicas sharing a brokerName)."""

    cluster_name: str
    broker_name: str
    zone_name: str = ""
    enable_acting_master: bool | None = None
    members: tuple[Member, ...] = ()

    @property
    def broker_addrs(self) -> dict[int, str]:
        return {m.broker_id: m.broker_addr for m in self.members}

    @property
    def grpc_addrs(self) -> dict[int, str]:
        return {m.broker_id: m.grpc_addr for m in self.members if m.grpc_addr}

    def member_at(self, broker_addr: str) -> Member | None:
        return next((m for m in self.members if m.broker_addr == broker_addr), None)

    def member_with_id(self, broker_id: int) -> Member | None:
        return next((m for m in self.members if m.broker_id == broker_id), None)

    @property
    def min_broker_id(self) -> int | None:
        return min((m.broker_id for m in self.members), default=None)

    @property
    def has_master(self) -> bool:
        return self.member_with_id(MASTER_ID) is not None


@dataclass(frozen=True)
class MinBrokerIdChange:
    """``NOTIFY_MIN_BROKER_ID_CHANGE`` (905) header plus the addresses it goes to (reference §3.6)."""

    cluster_name: str
    broker_name: str
    min_broker_id: int
    min_broker_addr: str
    offline_broker_addr: str | None
    ha_broker_addr: str | None
    recipients: tuple[str, ...] = field(default=())

    def header(self) -> dict:
        return {
            "minBrokerId": self.min_broker_id,
            "brokerName": self.broker_name,
            "minBrokerAddr": self.min_broker_addr,
            "offlineBrokerAddr": self.offline_broker_addr,
            "haBrokerAddr": self.ha_broker_addr,
        }
