"""``ControllerConfig``: RocketMQ's key names and defaults (reference §1.13)."""

from __future__ import annotations

from collections.abc import Mapping

from mqrules.keyed_config import THREAD_POOL_NO_EFFECT, ConfigSchema, KeyedConfig, Value

DEFAULTS: dict[str, Value] = {
    "controllerType": "DLedger",
    "scanNotActiveBrokerInterval": 5000,
    "scanInactiveMasterInterval": 5000,
    "controllerThreadPoolNums": 16,
    "controllerRequestThreadPoolQueueCapacity": 50000,
    "electMasterMaxRetryCount": 3,
    "enableElectUncleanMaster": False,
    "isProcessReadEvent": False,
    "notifyBrokerRoleChanged": True,
    "configBlackList": "configBlackList;configStorePath",
    "configStorePath": "~/controller/controller.properties",
}

# Keys kept with RocketMQ's names and defaults, so that an operator's controller.conf and tools carry
# over, that do nothing in this control plane: each says so where it is shown (the config page, the API).
NO_EFFECT = {
    "controllerType": "No effect here: the controller keeps its state in PostgreSQL, not in DLedger or JRaft.",
    "controllerThreadPoolNums": THREAD_POOL_NO_EFFECT,
    "controllerRequestThreadPoolQueueCapacity": THREAD_POOL_NO_EFFECT,
    "isProcessReadEvent": "No effect here: reads come from PostgreSQL; there is no replicated log to append them to.",
    "configStorePath": "No effect here: this config is kept in PostgreSQL.",
}

SCHEMA = ConfigSchema(
    defaults=DEFAULTS,
    always_black_listed=frozenset({"configBlackList", "configStorePath", "rocketmqHome"}),
    minimums={
        "scanNotActiveBrokerInterval": 100,
        "scanInactiveMasterInterval": 100,
        "electMasterMaxRetryCount": 1,
        "controllerThreadPoolNums": 1,
        "controllerRequestThreadPoolQueueCapacity": 1,
    },
    # ControllerConfig.java: the two scan intervals are longs; the other integers are ints.
    longs=frozenset({"scanNotActiveBrokerInterval", "scanInactiveMasterInterval"}),
    notes=NO_EFFECT,
)


class ControllerConfig(KeyedConfig):
    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Value]) -> ControllerConfig:  # type: ignore[override]
        return super().from_overrides(SCHEMA, overrides)

    @property
    def enable_elect_unclean_master(self) -> bool:
        return bool(self.values["enableElectUncleanMaster"])

    @property
    def elect_master_max_retry_count(self) -> int:
        return int(self.values["electMasterMaxRetryCount"])

    @property
    def notify_broker_role_changed(self) -> bool:
        return bool(self.values["notifyBrokerRoleChanged"])

    @property
    def scan_not_active_broker_interval(self) -> int:
        return int(self.values["scanNotActiveBrokerInterval"])

    @property
    def scan_inactive_master_interval(self) -> int:
        return int(self.values["scanInactiveMasterInterval"])
