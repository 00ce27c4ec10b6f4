"""Registration and unregistration of a broker in its broker set (reference §3.3, §3.4, §3.6).

``decide_register`` and ``decide_unregister`` take the current state of one broker set (as the
caller loaded it under a row lock) and return what must change; they do no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum

from . import perm as P
from .values import (
    DEFAULT_HEARTBEAT_TIMEOUT_MILLIS,
    MASTER_ID,
    DataVersion,
    Group,
    Member,
    MinBrokerIdChange,
    QueueData,
    TopicConfig,
)


@dataclass(frozen=True)
class RegisterRequest:
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int
    ha_server_addr: str = ""
    zone_name: str = ""
    heartbeat_timeout_millis: int | None = None
    # None marks a broker of a version that predates RIP-32 (it never takes part in acting master).
    enable_acting_master: bool | None = None
    data_version: DataVersion = DataVersion()
    topic_configs: tuple[TopicConfig, ...] = ()
    grpc_addr: str = ""


class RegisterOutcome(Enum):
    ACCEPTED = "accepted"
    # §3.3 step 5: an older master (lower stateVersion = masterEpoch) must not take id 0 from a newer one.
    REFUSED_STALE_STATE_VERSION = "refused_stale_state_version"
    # §3.3 step 6: a single-topic registration needs a prior full registration.
    REFUSED_SINGLE_TOPIC = "refused_single_topic"


@dataclass(frozen=True)
class RegisterDecision:
    outcome: RegisterOutcome
    group: Group  # the broker set after the registration
    removed_addrs: tuple[str, ...] = ()  # addresses no longer in the set (replaced holder; refused registrant)
    queue_data: Mapping[str, QueueData] | None = None  # topic -> new QueueData of this broker set
    deleted_topics: tuple[str, ...] = ()  # deleteTopicWithBrokerRegistration
    notification: MinBrokerIdChange | None = None
    master_addr: str | None = None  # result for a non-master: the live master's address
    master_ha_addr: str | None = None
    conflicting_state_version: int | None = None  # with REFUSED_STALE_STATE_VERSION


def decide_register(
    group: Group | None,
    queue_data: Mapping[str, QueueData],
    request: RegisterRequest,
    *,
    notify_min_broker_id_changed: bool,
    delete_topic_with_broker_registration: bool = False,
) -> RegisterDecision:
    """``RouteInfoManager.registerBroker`` for one broker set.

    ``group`` is the set before the call (None when this is its first member), ``queue_data`` maps
    each topic to this broker set's current QueueData.
    """
    register_first = group is None or not group.members
    if group is None:
        group = Group(request.cluster_name, request.broker_name)
    # §3.3 step 2: BrokerData carries the flag of its latest registration.
    group = replace(
        group,
        cluster_name=request.cluster_name,
        zone_name=request.zone_name or group.zone_name,
        enable_acting_master=request.enable_acting_master,
    )
    # Step 3: a first registration never counts as a min-id change (the previous minimum reads as 0).
    prev_min = group.min_broker_id if group.members else 0
    min_id_changed = request.broker_id < prev_min  # type: ignore[operator]
    previous_at_addr = group.member_at(request.broker_addr)
    addrs_before = [m.broker_addr for m in group.members]

    def gone(after: Group, *extra: str) -> tuple[str, ...]:
        still = set(after.broker_addrs.values())
        return tuple(dict.fromkeys([a for a in addrs_before if a not in still] + list(extra)))

    # Step 4: one address, one id (a slave promoted to master re-registers as id 0 at its address).
    kept = tuple(m for m in group.members if not (m.broker_addr == request.broker_addr and m.broker_id != request.broker_id))
    group = replace(group, members=kept)

    # Step 5: double-master guard.
    holder = group.member_with_id(request.broker_id)
    if holder is not None and holder.broker_addr != request.broker_addr:
        if holder.data_version.state_version > request.data_version.state_version:
            return RegisterDecision(
                outcome=RegisterOutcome.REFUSED_STALE_STATE_VERSION,
                group=group,
                removed_addrs=gone(group, request.broker_addr),
                conflicting_state_version=holder.data_version.state_version,
            )

    # Step 6.
    if len(request.topic_configs) == 1 and holder is None:
        return RegisterDecision(outcome=RegisterOutcome.REFUSED_SINGLE_TOPIC, group=group)

    # Step 7.
    member = Member(
        broker_id=request.broker_id,
        broker_addr=request.broker_addr,
        ha_server_addr=request.ha_server_addr,
        data_version=request.data_version,
        heartbeat_timeout_millis=request.heartbeat_timeout_millis or DEFAULT_HEARTBEAT_TIMEOUT_MILLIS,
        grpc_addr=request.grpc_addr,
    )
    others = tuple(m for m in group.members if m.broker_id != request.broker_id)
    group = replace(group, members=tuple(sorted((*others, member), key=lambda m: m.broker_id)))

    # Step 8: only the master or the prime slave writes queue data.
    new_version_broker = request.enable_acting_master is not None
    is_master = request.broker_id == MASTER_ID
    is_prime_slave = new_version_broker and not is_master and request.broker_id == group.min_broker_id
    new_queue_data: dict[str, QueueData] | None = None
    deleted_topics: tuple[str, ...] = ()
    if is_master or is_prime_slave:
        # A newly added id counts as a first registration (``registerFirst |= oldAddr empty``).
        version_changed = (
            register_first or holder is None or previous_at_addr is None or previous_at_addr.data_version != request.data_version
        )
        new_queue_data = {}
        for tc in request.topic_configs:
            if not (version_changed or tc.topic_name not in queue_data):
                continue
            topic_perm = tc.perm
            if is_prime_slave and request.enable_acting_master:
                topic_perm = P.without_write(topic_perm)
            qd = QueueData(
                request.broker_name, tc.read_queue_nums, tc.write_queue_nums, topic_perm, tc.topic_sys_flag, tc.attributes
            )
            if queue_data.get(tc.topic_name) != qd:
                new_queue_data[tc.topic_name] = qd
        if delete_topic_with_broker_registration and is_master and len(request.topic_configs) > 1:
            registered = {tc.topic_name for tc in request.topic_configs}
            deleted_topics = tuple(sorted(t for t in queue_data if t not in registered))

    # Step 11: a slave learns where its master is.
    master_addr = master_ha = None
    if not is_master:
        master = group.member_with_id(MASTER_ID)
        if master is not None:
            master_addr, master_ha = master.broker_addr, master.ha_server_addr

    notification = None
    if min_id_changed and notify_min_broker_id_changed:
        notification = min_broker_id_change(group, offline_broker_addr=None, ha_broker_addr=request.ha_server_addr)

    return RegisterDecision(
        outcome=RegisterOutcome.ACCEPTED,
        group=group,
        removed_addrs=gone(group),
        queue_data=new_queue_data,
        deleted_topics=deleted_topics,
        notification=notification,
        master_addr=master_addr,
        master_ha_addr=master_ha,
    )


@dataclass(frozen=True)
class UnregisterDecision:
    group: Group  # remaining members (empty: the whole broker set is gone)
    removed: Member | None
    set_removed: bool  # drop the BrokerData and every QueueData of this brokerName
    wipe_write_perm: bool  # the set shrank, has acting master enabled, and no id 0 remains
    notification: MinBrokerIdChange | None


def decide_unregister(group: Group, broker_addr: str, *, notify_min_broker_id_changed: bool) -> UnregisterDecision:
    """Batch unregistration of one address (reference §3.4): explicit unregister, channel close or expiry."""
    removed = group.member_at(broker_addr)
    if removed is None:
        return UnregisterDecision(group, None, False, False, None)
    was_min = removed.broker_id == group.min_broker_id
    remaining = replace(group, members=tuple(m for m in group.members if m.broker_addr != broker_addr))
    if not remaining.members:
        return UnregisterDecision(remaining, removed, True, False, None)
    acting = bool(remaining.enable_acting_master)
    no_master = not remaining.has_master
    notification = None
    if was_min and notify_min_broker_id_changed and acting:
        notification = min_broker_id_change(remaining, offline_broker_addr=broker_addr, ha_broker_addr=None)
    return UnregisterDecision(remaining, removed, False, acting and no_master, notification)


def min_broker_id_change(
    group: Group, *, offline_broker_addr: str | None, ha_broker_addr: str | None
) -> MinBrokerIdChange | None:
    """``notifyMinBrokerIdChanged``: the header and its recipients (reference §3.6).

    A new minimum online: every member but the new minimum hears of it (all of them when the set has
    one member). A minimum gone offline: every remaining member hears of it.
    """
    if not group.members:
        return None
    min_id = group.min_broker_id
    addrs = group.broker_addrs
    if offline_broker_addr is not None or len(addrs) == 1:
        recipients = tuple(addrs[i] for i in sorted(addrs))
    else:
        recipients = tuple(addrs[i] for i in sorted(addrs) if i != min_id)
    return MinBrokerIdChange(
        cluster_name=group.cluster_name,
        broker_name=group.broker_name,
        min_broker_id=min_id,  # type: ignore[arg-type]
        min_broker_addr=addrs[min_id],  # type: ignore[index]
        offline_broker_addr=offline_broker_addr,
        ha_broker_addr=ha_broker_addr,
        recipients=recipients,
    )
