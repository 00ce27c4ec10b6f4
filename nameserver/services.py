"""Writes to the registry: load under a row lock, decide with the pure core, store, tell.

Each broker set (``BrokerGroup`` row) is the unit of locking: concurrent registrations of one set
take turns on ``SELECT ... FOR UPDATE``; different sets proceed in parallel.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from django.db import transaction
from django.db.models import F

from controlplane.isolation import is_isolated
from mqrules import topic_attributes

from . import liveness, notify, route_cache
from .core import perm as P
from .core.registry import RegisterOutcome, RegisterRequest, decide_register, decide_unregister
from .core.values import Group, MinBrokerIdChange, QueueData
from .models import BrokerGroup, BrokerMember, TopicQueue
from .selectors import group_value, queue_value
from .settings_store import current_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegisterResult:
    outcome: RegisterOutcome
    group: Group
    master_addr: str | None = None
    master_ha_addr: str | None = None
    conflicting_state_version: int | None = None
    isolated: bool = False  # an operator isolated this broker: it takes no writes (controlplane.models.Isolation)


def _after_commit(fn) -> None:
    transaction.on_commit(fn, robust=True)


def _tell(change: MinBrokerIdChange | None) -> None:
    if change is not None:
        _after_commit(partial(notify.min_broker_id_changed, change))


def _locked_group(broker_name: str, cluster_name: str, zone_name: str = "") -> BrokerGroup:
    # Insert-if-absent first so that 20 concurrent first registrations all end up locking one row.
    BrokerGroup.objects.bulk_create(
        [BrokerGroup(cluster_name=cluster_name, broker_name=broker_name, zone_name=zone_name)],
        ignore_conflicts=True,
    )
    return BrokerGroup.objects.select_for_update().get(broker_name=broker_name)


def register_broker(request: RegisterRequest) -> RegisterResult:
    """``REGISTER_BROKER`` (reference §3.3)."""
    config = current_config()
    with transaction.atomic():
        row = _locked_group(request.broker_name, request.cluster_name, request.zone_name)
        before = group_value(row)
        queues = {q.topic: queue_value(q, row.broker_name) for q in TopicQueue.objects.filter(group=row)}
        decision = decide_register(
            before if before.members else None,
            queues,
            request,
            notify_min_broker_id_changed=config.notify_min_broker_id_changed,
            delete_topic_with_broker_registration=config.delete_topic_with_broker_registration,
        )
        after = decision.group
        # Rows whose (id, address) pair left the set go first: one address, one id (unique constraint).
        stale = [m.pk for m in BrokerMember.objects.filter(group=row) if after.broker_addrs.get(m.broker_id) != m.broker_addr]
        BrokerMember.objects.filter(pk__in=stale).delete()
        accepted = decision.outcome is RegisterOutcome.ACCEPTED
        if accepted:
            me = after.member_with_id(request.broker_id)
            BrokerMember.objects.update_or_create(
                group=row,
                broker_id=me.broker_id,
                defaults=dict(
                    broker_addr=me.broker_addr,
                    ha_server_addr=me.ha_server_addr,
                    grpc_addr=me.grpc_addr,
                    heartbeat_timeout_millis=me.heartbeat_timeout_millis,
                    state_version=me.data_version.state_version,
                    data_version_counter=me.data_version.counter,
                    data_version_timestamp=me.data_version.timestamp,
                ),
            )
            row.cluster_name, row.zone_name = after.cluster_name, after.zone_name
            row.enable_acting_master = after.enable_acting_master
            row.save(update_fields=["cluster_name", "zone_name", "enable_acting_master", "updated_at"])
            _store_queue_data(row, decision.queue_data or {})
            if decision.deleted_topics:
                TopicQueue.objects.filter(group=row, topic__in=decision.deleted_topics).delete()
            _after_commit(
                partial(liveness.mark_registered, request.cluster_name, request.broker_addr, me.heartbeat_timeout_millis)
            )
        if not BrokerMember.objects.filter(group=row).exists():
            row.delete()
        gone = [liveness.member(before.cluster_name, a) for a in decision.removed_addrs]
        _after_commit(partial(liveness.forget, gone))
        if after != before or decision.queue_data or decision.deleted_topics:
            _after_commit(route_cache.registry_changed)
        _tell(decision.notification)
    return RegisterResult(
        decision.outcome,
        after,
        decision.master_addr,
        decision.master_ha_addr,
        decision.conflicting_state_version,
        isolated=is_isolated(request.cluster_name, request.broker_addr),
    )


def _store_queue_data(row: BrokerGroup, queue_data: dict[str, QueueData]) -> None:
    for topic, qd in queue_data.items():
        TopicQueue.objects.update_or_create(
            topic=topic,
            group=row,
            defaults=dict(
                read_queue_nums=qd.read_queue_nums,
                write_queue_nums=qd.write_queue_nums,
                perm=qd.perm,
                topic_sys_flag=qd.topic_sys_flag,
                attributes=dict(qd.attributes),
            ),
        )


@dataclass(frozen=True)
class UnregisterResult:
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    set_removed: bool
    write_perm_wiped: bool


def unregister_broker(
    cluster_name: str,
    broker_addr: str,
    *,
    broker_name: str | None = None,
    only_if_expired: bool = False,
    now_ms: int | None = None,
) -> UnregisterResult | None:
    """``UNREGISTER_BROKER``, channel close and expiry (reference §3.4); None if not registered.

    ``only_if_expired`` re-checks liveness under the lock, so a scan never removes a broker whose
    heartbeat arrived after the scan read the deadline index (at ``now_ms``: None is Redis's clock).
    """
    key = liveness.member(cluster_name, broker_addr)
    with transaction.atomic():
        found = BrokerMember.objects.filter(group__cluster_name=cluster_name, broker_addr=broker_addr)
        if broker_name:
            found = found.filter(group__broker_name=broker_name)
        found = found.values_list("group_id", flat=True).first()
        if found is None:
            if not only_if_expired:
                _after_commit(partial(liveness.forget, [key]))
            return None
        row = BrokerGroup.objects.select_for_update().get(pk=found)
        if only_if_expired and not liveness.is_expired(key, now_ms):
            return None
        decision = decide_unregister(
            group_value(row), broker_addr, notify_min_broker_id_changed=current_config().notify_min_broker_id_changed
        )
        if decision.removed is None:  # removed by a concurrent call before we got the lock
            return None
        BrokerMember.objects.filter(group=row, broker_addr=broker_addr).delete()
        if decision.set_removed:
            row.delete()
        elif decision.wipe_write_perm:
            TopicQueue.objects.filter(group=row).update(perm=F("perm").bitand(int(~P.Perm.WRITE & 0b111)))
        _after_commit(partial(liveness.forget, [key]))
        _after_commit(route_cache.registry_changed)
        _tell(decision.notification)
    log.info("unregistered %s/%s[%s] at %s", cluster_name, row.broker_name, decision.removed.broker_id, broker_addr)
    return UnregisterResult(
        cluster_name,
        row.broker_name,
        broker_addr,
        decision.removed.broker_id,
        decision.set_removed,
        decision.wipe_write_perm,
    )


def record_heartbeat(cluster_name: str, broker_addr: str) -> bool:
    """``BROKER_HEARTBEAT`` (904): refreshes liveness in Redis only; False for an unknown broker."""
    return liveness.heartbeat([liveness.member(cluster_name, broker_addr)])[0]


def scan_not_active_brokers(now_ms: int | None = None) -> list[UnregisterResult]:
    """``scanNotActiveBroker``: unregister every broker silent past its timeout.

    Run by Celery beat every second; the Redis slot makes it scan at most once per
    ``scanNotActiveBrokerInterval`` however many beats and workers run. ``now_ms``: the instant
    expiry is judged at (None: Redis's clock, see liveness).
    """
    liveness.hearing(now_ms, look=True)  # every beat tick, whatever the interval: the blindness guard's record
    if not liveness.acquire_scan_slot(current_config().scan_not_active_broker_interval):
        return []
    removed = []
    for value in liveness.expired_members(now_ms):
        cluster_name, addr = liveness.split_member(value)
        try:
            result = unregister_broker(cluster_name, addr, only_if_expired=True, now_ms=now_ms)
        except Exception:
            log.exception("could not unregister expired broker %s", value)
            continue
        if result is not None:
            removed.append(result)
        elif not BrokerMember.objects.filter(group__cluster_name=cluster_name, broker_addr=addr).exists():
            liveness.forget([value])  # a stale liveness entry with no registry row behind it
    return removed


# --- topic administration ----------------------------------------------------------------------


class UnknownBrokers(LookupError):
    def __init__(self, names: list[str]):
        super().__init__(", ".join(names))
        self.names = names


def target_groups(cluster_name: str | None, broker_names: list[str] | None) -> list[BrokerGroup]:
    """The broker sets a topic change goes to (``broker_names``, else every set of ``cluster_name``),
    by name; UnknownBrokers names what is not there. Read again under lock by the change itself."""
    if broker_names:
        rows = list(BrokerGroup.objects.filter(broker_name__in=broker_names).order_by("broker_name"))
        missing = sorted(set(broker_names) - {r.broker_name for r in rows})
        if missing:
            raise UnknownBrokers(missing)
        return rows
    rows = list(BrokerGroup.objects.filter(cluster_name=cluster_name).order_by("broker_name"))
    if not rows:
        raise UnknownBrokers([f"cluster {cluster_name}"])
    return rows


def update_topic(request: Mapping) -> list[str]:
    """``create_or_update_topic`` for a checked request (the fields of ``TopicUpdateSerializer``:
    ``topicName, readQueueNums, writeQueueNums, perm, topicSysFlag, attributes?`` and one of
    ``clusterName`` / ``brokerNames``), as REST and the dashboard take it."""
    return create_or_update_topic(
        request["topicName"],
        read_queue_nums=request["readQueueNums"],
        write_queue_nums=request["writeQueueNums"],
        perm=request["perm"],
        topic_sys_flag=request["topicSysFlag"],
        attributes=request.get("attributes"),
        cluster_name=request.get("clusterName"),
        broker_names=request.get("brokerNames"),
    )


def create_or_update_topic(
    topic: str,
    *,
    read_queue_nums: int,
    write_queue_nums: int,
    perm: int,
    topic_sys_flag: int = 0,
    attributes: Mapping[str, str] | None = None,
    cluster_name: str | None = None,
    broker_names: list[str] | None = None,
) -> list[str]:
    """``UPDATE_AND_CREATE_TOPIC`` on a cluster or on chosen broker sets; returns their names.

    ``attributes`` (``topic_attributes.parse_update``'s) change those each broker set has for the
    topic and keep the rest. The route changes at once; each target broker set is also told over its
    websocket so that its brokers store the topic config (and stamp it with a new data version).
    """
    with transaction.atomic():
        _after_commit(route_cache.registry_changed)
        rows = target_groups(cluster_name, broker_names)
        locked = list(BrokerGroup.objects.select_for_update().filter(id__in=[r.id for r in rows]).order_by("id"))
        current = dict(TopicQueue.objects.filter(topic=topic, group__in=locked).values_list("group_id", "attributes"))
        for row in locked:
            group = group_value(row)
            # A masterless set under acting master serves reads only, as a prime slave registers it.
            effective = P.without_write(perm) if group.enable_acting_master and not group.has_master else perm
            final = topic_attributes.updated(current.get(row.id), attributes or {})
            _store_queue_data(
                row, {topic: QueueData(row.broker_name, read_queue_nums, write_queue_nums, effective, topic_sys_flag, final)}
            )
            payload = {
                "topicName": topic,
                "readQueueNums": read_queue_nums,
                "writeQueueNums": write_queue_nums,
                "perm": perm,
                "topicSysFlag": topic_sys_flag,
                "attributes": final,
                "brokerName": row.broker_name,
            }
            addrs = [m.broker_addr for m in group.members]
            _after_commit(partial(notify.push, row.cluster_name, addrs, "update_topic", payload))
    return [r.broker_name for r in rows]


def delete_topic(topic: str, *, cluster_name: str | None = None, broker_names: list[str] | None = None) -> int:
    """``DELETE_TOPIC_IN_NAMESRV`` (everywhere, on a cluster, or on chosen broker sets)."""
    with transaction.atomic():
        _after_commit(route_cache.registry_changed)
        qs = TopicQueue.objects.filter(topic=topic)
        if broker_names:
            qs = qs.filter(group__broker_name__in=broker_names)
        elif cluster_name:
            qs = qs.filter(group__cluster_name=cluster_name)
        targets = list(qs.select_related("group"))
        for q in targets:
            addrs = list(q.group.members.values_list("broker_addr", flat=True))
            payload = {"topicName": topic, "brokerName": q.group.broker_name}
            _after_commit(partial(notify.push, q.group.cluster_name, addrs, "delete_topic", payload))
        deleted, _ = qs.delete()
    return deleted


def change_write_perm(broker_name: str, *, writeable: bool) -> int:
    """``WIPE_WRITE_PERM_OF_BROKER`` (205) / ``ADD_WRITE_PERM_OF_BROKER`` (327): how many topics changed."""
    with transaction.atomic():
        row = BrokerGroup.objects.select_for_update().filter(broker_name=broker_name).first()
        if row is None:
            raise UnknownBrokers([broker_name])
        _after_commit(route_cache.registry_changed)
        qs = TopicQueue.objects.filter(group=row)
        if writeable:
            return qs.update(perm=F("perm").bitor(int(P.Perm.WRITE)))
        return qs.update(perm=F("perm").bitand(int(~P.Perm.WRITE & 0b111)))
