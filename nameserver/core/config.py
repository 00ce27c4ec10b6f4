"""``NamesrvConfig``: RocketMQ's key names and defaults (reference §3.8).

Keys keep RocketMQ's camelCase so that an operator's ``namesrv.conf`` knowledge carries over.
"""

from __future__ import annotations

from collections.abc import Mapping

from mqrules.keyed_config import THREAD_POOL_NO_EFFECT, ConfigError, ConfigSchema, KeyedConfig, Value

__all__ = ["DEFAULTS", "ConfigError", "NamesrvConfig", "validate_update"]

DEFAULTS: dict[str, Value] = {
    "scanNotActiveBrokerInterval": 5000,
    "supportActingMaster": False,
    "notifyMinBrokerIdChanged": False,
    "enableControllerInNamesrv": False,
    "deleteTopicWithBrokerRegistration": False,
    "unRegisterBrokerQueueCapacity": 3000,
    "needWaitForService": False,
    "waitSecondsForService": 45,
    "enableAllTopicList": True,
    "enableTopicList": True,
    "orderMessageEnable": False,
    "returnOrderTopicConfigToBroker": True,
    "clientRequestThreadPoolNums": 8,
    "defaultThreadPoolNums": 16,
    "clientRequestThreadPoolQueueCapacity": 50000,
    "defaultThreadPoolQueueCapacity": 10000,
    "configBlackList": "configBlackList;configStorePath;kvConfigPath",
}

# Keys kept with RocketMQ's names and defaults, so that an operator's namesrv.conf and tools carry over,
# that do nothing in this control plane: each says so where it is shown (the config page, the API).
NO_EFFECT = {
    "enableControllerInNamesrv": "No effect here: the controller always runs in the control plane, next to the nameserver.",
    "unRegisterBrokerQueueCapacity": "No effect here: each unregistration is its own row-locked transaction, not a queued batch.",
    "needWaitForService": "No effect here: the nameserver answers routes as soon as it runs.",
    "waitSecondsForService": "No effect here: the nameserver answers routes as soon as it runs.",
    "enableAllTopicList": "No effect here: the topic list (GET /api/v1/nameserver/topics) is always served.",
    "enableTopicList": "No effect here: the topic list (GET /api/v1/nameserver/topics) is always served.",
    "orderMessageEnable": "No effect here: there is no order-topic KV config; routes carry orderTopicConf null.",
    "returnOrderTopicConfigToBroker": "No effect here: there is no order-topic KV config to return to brokers.",
    "clientRequestThreadPoolNums": THREAD_POOL_NO_EFFECT,
    "defaultThreadPoolNums": THREAD_POOL_NO_EFFECT,
    "clientRequestThreadPoolQueueCapacity": THREAD_POOL_NO_EFFECT,
    "defaultThreadPoolQueueCapacity": THREAD_POOL_NO_EFFECT,
}

SCHEMA = ConfigSchema(
    defaults=DEFAULTS,
    # Always refused, whatever configBlackList says (it cannot remove itself).
    always_black_listed=frozenset({"configBlackList", "configStorePath", "kvConfigPath"}),
    # Lower bounds that keep the control plane sane (a 0 ms scan interval would spin the beat).
    minimums={
        "scanNotActiveBrokerInterval": 100,
        "unRegisterBrokerQueueCapacity": 1,
        "clientRequestThreadPoolNums": 1,
        "defaultThreadPoolNums": 1,
        "clientRequestThreadPoolQueueCapacity": 1,
        "defaultThreadPoolQueueCapacity": 1,
    },
    # NamesrvConfig.java: scanNotActiveBrokerInterval is a long; the other integers are ints.
    longs=frozenset({"scanNotActiveBrokerInterval"}),
    notes=NO_EFFECT,
)


class NamesrvConfig(KeyedConfig):
    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Value]) -> NamesrvConfig:  # type: ignore[override]
        return super().from_overrides(SCHEMA, overrides)

    @property
    def support_acting_master(self) -> bool:
        return bool(self.values["supportActingMaster"])

    @property
    def notify_min_broker_id_changed(self) -> bool:
        return bool(self.values["notifyMinBrokerIdChanged"])

    @property
    def scan_not_active_broker_interval(self) -> int:
        return int(self.values["scanNotActiveBrokerInterval"])

    @property
    def delete_topic_with_broker_registration(self) -> bool:
        return bool(self.values["deleteTopicWithBrokerRegistration"])


def validate_update(current: NamesrvConfig, changes: Mapping[str, object]) -> dict[str, Value]:
    return current.validate_update(changes)
