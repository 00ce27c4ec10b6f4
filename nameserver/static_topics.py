"""Static topics (seed 003, RIP-21): creating one and moving its logical queues between broker sets.

Each change is load → decide → store: the topic's row is locked (``SELECT ... FOR UPDATE``), the pure
rules of mqrules/logical_queues.py make the new mapping, the invariant checker must find
nothing wrong, and the row and its history row (one per epoch) are written in the same transaction.
A change planned against an older epoch is refused (LOGIC_QUEUE_MAPPING_FENCED_EPOCH), so two
operators moving queues of one topic take turns and the second sees the first. A preview runs the
same rules and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from django.db import transaction

from controlplane.isolation import isolated_addrs
from mqrules import logical_queues as lq
from mqrules.codes import ResponseCode as C

from . import notify, route_cache, selectors, services
from .models import BrokerGroup, StaticTopic, StaticTopicChange, TopicQueue

PERM_READ_WRITE = 6  # a static topic's config on each of its broker sets (TopicConfig perm)

# How long a read-only segment stays readable: until its broker deletes its data, by default
# fileReservedTime (72 h) after its last message (reference §7).
FILE_RESERVED_HOURS = 72


class StaticTopicRefused(Exception):
    """Nothing was changed: the RocketMQ (or our) code, why, and the HTTP status to answer with."""

    def __init__(self, code: C, detail: str, http_status: int = 409):
        super().__init__(detail)
        self.code, self.detail, self.http_status = code, detail, http_status


@dataclass(frozen=True)
class Migration:
    before: lq.TopicMapping
    after: lq.TopicMapping
    moves: list[lq.MovePreview]
    applied: bool


def mapping_of(topic: str) -> lq.TopicMapping | None:
    raw = selectors.static_mapping(topic)
    return None if raw is None else lq.TopicMapping.from_wire(raw)


def all_mappings() -> list[lq.TopicMapping]:
    return [lq.TopicMapping.from_wire(row.mapping) for row in StaticTopic.objects.all()]


def _check_targets(names: list[str]) -> None:
    """Every broker set named exists and has a broker that is not isolated."""
    groups = {g.broker_name: g for g in BrokerGroup.objects.filter(broker_name__in=names).prefetch_related("members")}
    missing = sorted(set(names) - groups.keys())
    if missing:
        raise StaticTopicRefused(C.BROKER_NOT_EXIST, "unknown broker set(s): " + ", ".join(missing), 404)
    isolated = isolated_addrs()
    for name in sorted(set(names)):
        group = groups[name]
        members = [(group.cluster_name, m.broker_addr) for m in group.members.all()]
        if not members:
            raise StaticTopicRefused(C.BROKER_NOT_EXIST, f"broker set {name} has no broker registered", 404)
        if all(m in isolated for m in members):
            raise StaticTopicRefused(C.NO_PERMISSION, f"broker set {name} is isolated: it takes no queues", 409)


def _store(row: StaticTopic, m: lq.TopicMapping, kind: str, actor: str, params: dict) -> None:
    """Write the new mapping and its history row; make sure every broker set it names has the topic
    with enough physical queues (the topic config, pushed as any topic update is); after commit, the
    routes change and every broker of the topic is told the new mapping (brokers also get it with
    each registration answer, so a lost push only delays)."""
    wrong = lq.problems(m)
    if wrong:  # a rule bug must fail loudly, never be stored
        raise StaticTopicRefused(C.SYSTEM_ERROR, "the new mapping breaks an invariant: " + "; ".join(wrong), 500)
    row.epoch, row.mapping = m.epoch, m.to_wire()
    row.save()
    StaticTopicChange.objects.create(topic=row, epoch=m.epoch, kind=kind, actor=actor, params=params, mapping=row.mapping)
    # The mapping is pushed before the topic configs: a broker never takes the topic for a plain one.
    transaction.on_commit(partial(_announce, m))
    transaction.on_commit(route_cache.registry_changed)
    if kind in (StaticTopicChange.Kind.CREATE, StaticTopicChange.Kind.MOVE, StaticTopicChange.Kind.RESIZE):
        # Not to a set holding expired segments only: it has nothing of the topic left to serve, and a
        # drained set may have been removed since (its expired records stay, for a move back to reuse).
        serving = m.brokers()
        for broker, count in sorted(lq.physical_queue_counts(m).items()):
            if broker not in serving:
                continue
            services.create_or_update_topic(
                m.topic, read_queue_nums=count, write_queue_nums=count, perm=PERM_READ_WRITE, broker_names=[broker]
            )


def _announce(m: lq.TopicMapping) -> None:
    """Push the mapping to every broker of every broker set it names (best effort)."""
    payload = {"mapping": m.to_wire()}
    for group in BrokerGroup.objects.filter(broker_name__in=m.brokers()).prefetch_related("members"):
        notify.push(group.cluster_name, [member.broker_addr for member in group.members.all()], "static_topic", payload)


def mappings_for(broker_name: str) -> list[dict]:
    """The mappings naming ``broker_name`` (its registration answer carries them): cached per registry
    version, which every change of a mapping moves, as every broker registers every 30 s."""
    return route_cache.cached(
        ("static-topics-for", broker_name), lambda: [m.to_wire() for m in all_mappings() if broker_name in m.brokers()]
    )


def seal(topic: str, queue_id: int, broker_name: str, physical_queue: int, end: int) -> lq.TopicMapping:
    """A broker sealed its segment of logical queue ``queue_id`` (physical queue ``physical_queue``)
    at physical offset ``end``: the new segment's logical start is decided (``lq.decide``). A report
    for a segment that is not (or no longer) the one sealing changes nothing: brokers report again
    until they see the decision, so repeats are expected."""
    with transaction.atomic():
        row = StaticTopic.objects.select_for_update().filter(topic=topic).first()
        if row is None:
            raise StaticTopicRefused(C.TOPIC_NOT_EXIST, f"{topic} is not a static topic", 404)
        m = lq.TopicMapping.from_wire(row.mapping)
        if not 0 <= queue_id < len(m.queues):
            raise StaticTopicRefused(C.INVALID_PARAMETER, f"{topic} has no logical queue {queue_id}", 400)
        old = m.queues[queue_id].sealing
        if old is None or (old.broker_name, old.queue_id) != (broker_name, physical_queue):
            return m
        try:
            after = lq.decide(m, queue_id, end)
        except lq.MappingRefused as exc:
            raise StaticTopicRefused(exc.code, exc.detail, 400) from None
        params = {"queueId": queue_id, "brokerName": broker_name, "physicalQueue": physical_queue, "sealedEnd": end}
        _store(row, after, StaticTopicChange.Kind.DECIDE, f"broker:{broker_name}", params)
    return after


def expire_reported(broker_name: str, queues: Sequence[Sequence]) -> list[lq.TopicMapping]:
    """Seed 003 table 3: the serving broker of ``broker_name`` reported its queues' min offsets (its
    ``broker_status`` rows ``[topic, queueId, minOffset, maxOffset, ...]``): each static topic's read-only
    segments there whose data retention deleted become Expired (``lq.expire``, decided again on the
    locked row, stored with its history row). Cheap when nothing expires: the mappings naming the set
    are cached per registry version and judged before any lock. Returns the mappings changed."""
    mins: dict[str, dict[int, int]] = {}
    for row in queues:
        mins.setdefault(row[0], {})[row[1]] = row[2]
    changed = []
    for wire in mappings_for(broker_name):
        m = lq.TopicMapping.from_wire(wire)
        if m.topic not in mins or lq.expire(m, broker_name, mins[m.topic]) is m:
            continue
        with transaction.atomic():
            row = StaticTopic.objects.select_for_update().filter(topic=m.topic).first()
            if row is None:
                continue
            current = lq.TopicMapping.from_wire(row.mapping)
            after = lq.expire(current, broker_name, mins[m.topic])
            if after is current:
                continue
            params = {"brokerName": broker_name, "minOffsets": {str(q): o for q, o in sorted(mins[m.topic].items())}}
            _store(row, after, StaticTopicChange.Kind.EXPIRE, f"broker:{broker_name}", params)
        changed.append(after)
    return changed


def create(topic: str, queue_count: int, broker_names: list[str], *, actor: str) -> lq.TopicMapping:
    """A new static topic with ``queue_count`` logical queues spread over ``broker_names``."""
    try:
        m = lq.initial(topic, queue_count, broker_names)
    except lq.MappingRefused as exc:
        raise StaticTopicRefused(exc.code, exc.detail, 400) from None
    with transaction.atomic():
        _check_targets(broker_names)
        row, created = StaticTopic.objects.select_for_update().get_or_create(
            topic=topic, defaults={"epoch": m.epoch, "mapping": m.to_wire()}
        )
        if not created:
            raise StaticTopicRefused(C.INVALID_PARAMETER, f"{topic} is a static topic already (epoch {row.epoch})")
        _store(row, m, StaticTopicChange.Kind.CREATE, actor, {"queueNums": queue_count, "brokerNames": broker_names})
    return m


def migrate(
    topic: str,
    *,
    moves: Mapping[int, str] | None = None,
    drain: str | None = None,
    targets: list[str] | None = None,
    scale_out: str | None = None,
    expected_epoch: int | None = None,
    actor: str,
    apply: bool = True,
) -> Migration:
    """Move logical queues of ``topic``: the given ``moves``, every queue writing on ``drain`` (to
    ``targets``; by default the other broker sets writing the topic), or a share for a new broker
    set (``scale_out``). Writes go to the new broker sets as soon as this commits; data is not
    moved. ``apply=False``: the preview, nothing written."""
    with transaction.atomic():
        row = StaticTopic.objects.select_for_update().filter(topic=topic).first()
        if row is None:
            raise StaticTopicRefused(C.TOPIC_NOT_EXIST, f"{topic} is not a static topic", 404)
        before = lq.TopicMapping.from_wire(row.mapping)
        try:
            if expected_epoch is not None:
                lq.ensure_epoch(before, expected_epoch)
            if drain is not None:
                others = sorted({b for b, _ in before.owners().values()} - {drain})
                planned = lq.drain(before, drain, targets or others)
            elif scale_out is not None:
                planned = lq.scale_out(before, scale_out)
            else:
                planned = dict(moves or {})
            _check_targets(sorted(set(planned.values())))
            after = lq.plan_moves(before, planned)
        except lq.MappingRefused as exc:
            status = 409 if exc.code in (C.LOGIC_QUEUE_MAPPING_FENCED_EPOCH, C.LOGIC_QUEUE_MIGRATING) else 400
            raise StaticTopicRefused(exc.code, exc.detail, status) from None
        if apply:
            params = {"moves": {str(k): v for k, v in sorted(planned.items())}, "epochBefore": before.epoch}
            _store(row, after, StaticTopicChange.Kind.MOVE, actor, params)
    return Migration(before, after, lq.preview(before, after), apply)


def migrate_checked(topic: str, d: Mapping, *, actor: str) -> Migration:
    """``migrate`` with a migration body as MigrationSerializer validated it (REST and the dashboard)."""
    drain = d.get("drain") or {}
    return migrate(
        topic,
        moves={m["queueId"]: m["brokerName"] for m in d.get("moves", ())},
        drain=drain.get("brokerName"),
        targets=drain.get("targets"),
        scale_out=d.get("scaleOut"),
        expected_epoch=d.get("epoch"),
        actor=actor,
        apply=not d.get("preview", False),
    )


def _locked(topic: str) -> StaticTopic:
    row = StaticTopic.objects.select_for_update().filter(topic=topic).first()
    if row is None:
        raise StaticTopicRefused(C.TOPIC_NOT_EXIST, f"{topic} is not a static topic", 404)
    return row


@dataclass(frozen=True)
class Change:
    """A change to a static topic as its preview shows it and as applied: the mapping before and after
    (``after`` None: the topic is deleted)."""

    before: lq.TopicMapping | None
    after: lq.TopicMapping | None
    applied: bool


def resize(
    topic: str, queue_count: int, broker_names: list[str] | None, *, expected_epoch: int | None, actor: str, apply: bool
) -> Change:
    """updateStaticTopic with a larger queueNum: ``lq.grow`` over ``broker_names`` (by default the
    broker sets writing the topic now); each gets the topic with its new physical queue count."""
    with transaction.atomic():
        row = _locked(topic)
        before = lq.TopicMapping.from_wire(row.mapping)
        targets = sorted(broker_names or {q.writable.broker_name for q in before.queues})
        try:
            if expected_epoch is not None:
                lq.ensure_epoch(before, expected_epoch)
            _check_targets(targets)
            after = lq.grow(before, queue_count, targets)
        except lq.MappingRefused as exc:
            raise StaticTopicRefused(exc.code, exc.detail, 409) from None  # refused by the mapping as it is now
        if apply:
            params = {"queueNums": queue_count, "brokerNames": targets, "epochBefore": before.epoch}
            _store(row, after, StaticTopicChange.Kind.RESIZE, actor, params)
    return Change(before, after, apply)


def adopt(topic: str, *, actor: str, apply: bool) -> Change:
    """Turn an existing plain topic static: its queues on every broker set become its logical queues
    (``lq.adopt``; offsets unchanged, so its consumers' committed offsets stay right)."""
    with transaction.atomic():
        queue_datas = list(TopicQueue.objects.select_for_update().filter(topic=topic).select_related("group"))
        if not queue_datas:
            raise StaticTopicRefused(C.TOPIC_NOT_EXIST, f"no broker set has a topic named {topic}", 404)
        counts = {q.group.broker_name: max(q.read_queue_nums, q.write_queue_nums) for q in queue_datas}
        try:
            after = lq.adopt(topic, counts)
        except lq.MappingRefused as exc:
            raise StaticTopicRefused(exc.code, exc.detail, 400) from None
        _check_targets(sorted(counts))
        row, created = StaticTopic.objects.select_for_update().get_or_create(
            topic=topic, defaults={"epoch": after.epoch, "mapping": after.to_wire()}
        )
        if not created:
            raise StaticTopicRefused(C.INVALID_PARAMETER, f"{topic} is a static topic already (epoch {row.epoch})")
        if apply:
            _store(row, after, StaticTopicChange.Kind.ADOPT, actor, {"queueNums": counts})
        else:
            transaction.set_rollback(True)  # the preview: the row just made goes again
    return Change(None, after, apply)


def delete(topic: str, *, expected_epoch: int | None, actor: str, apply: bool) -> Change:
    """Delete a static topic: its mapping (with its history) and the topic on every broker set it
    names; messages are not recovered by making it again."""
    with transaction.atomic():
        row = _locked(topic)
        before = lq.TopicMapping.from_wire(row.mapping)
        if expected_epoch is not None:
            try:
                lq.ensure_epoch(before, expected_epoch)
            except lq.MappingRefused as exc:
                raise StaticTopicRefused(exc.code, exc.detail, 409) from None
        if apply:
            brokers = sorted({s.broker_name for q in before.queues for s in q.segments})
            row.delete()
            services.delete_topic(topic, broker_names=brokers)
            transaction.on_commit(route_cache.registry_changed)
    return Change(before, None, apply)


def history(topic: str) -> list[StaticTopicChange]:
    return list(StaticTopicChange.objects.filter(topic_id=topic).order_by("epoch"))
