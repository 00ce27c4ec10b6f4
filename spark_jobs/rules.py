"""The offset-rollback audit's rules, as pure functions (values in, values out; standard library only).

A rollback: in the serving stream of a replica group, a queue's committed offset went down and it was
not an operator's reset. ``decreases`` is that rule's one definition; the job's fast forms (numpy in
spark_jobs/segments.py, Spark in offset_audit.decreases_exact, the SQL of pg.rollback_steps_sql) are
tested against it (tests/audits/test_rollback_rule.py). ``judge`` then drops the decreases an
operator's logged reset explains and names the cause of the others with ``attribute``.

Background: seed 000 ("no reverse synchronization of metadata ... the consumer offset of this group of
brokers rollback"), reference §5.3 (pre-online) and §5.4 (data versions), §1.5/§1.6 (elections;
unclean = a replica outside the SyncStateSet).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

from .schema import SERVING_SOURCES, Cause, Finding, FindingKind, Source

SLAVE_ROLE = "SLAVE"
# A queue's commits are ordered by these, then by "is a reset" (a reset after a commit equal in all four).
COMMIT_ORDER = ("ts_ms", "master_epoch", "broker_id", "offset")
RESET_SLACK_MS = 60_000  # an operator's logged reset may reach the broker's commit up to this much later


@dataclass(frozen=True, order=True)
class Queue:
    """A consumer queue: what a committed offset belongs to."""

    consumer_group: str
    topic: str
    broker_name: str
    queue_id: int


@dataclass(frozen=True)
class Commit:
    """One committed offset of a queue as a broker of the replica group reported it."""

    broker_id: int
    role: str
    master_epoch: int
    ts_ms: int
    offset: int
    source: str
    cluster_name: str = ""
    queue_max_offset: int | None = None


@dataclass(frozen=True)
class Decrease:
    """``previous`` then ``current``: consecutive commits of ``queue`` in commit order, going down."""

    queue: Queue
    previous: Commit
    current: Commit


@dataclass(frozen=True)
class Election:
    """A committed ``elect`` transition of the controller (controlplane.controller.models.Transition)."""

    transition_id: int
    master_epoch: int  # the epoch it opened
    new_master_broker_id: int | None
    old_sync_state_set: tuple[int, ...]
    trigger: str  # broker / controller / operator


@dataclass(frozen=True)
class GroupElection:
    broker_name: str
    election: Election


@dataclass(frozen=True)
class LoggedReset:
    """An operator's offset reset from the operator audit log (see ``reset_scope``)."""

    action_id: int
    broker_name: str  # "" = every broker set
    consumer_group: str
    topic: str | None  # None = every topic
    queue_id: int | None  # None = every queue
    at_ms: int


@dataclass(frozen=True)
class History:
    """What the controller and the operators did: the audit's second input, next to the events."""

    elections: tuple[GroupElection, ...] = ()
    resets: tuple[LoggedReset, ...] = ()


@dataclass(frozen=True)
class Attribution:
    cause: Cause
    master_epoch: int  # the epoch the rollback belongs to (the election's, else the rolled-back commit's)
    transition_id: int | None = None


# --- the rule -----------------------------------------------------------------------------------


def is_served(commit: Commit) -> bool:
    """Whether the commit says what the serving broker holds (schema.SERVING_SOURCES)."""
    return commit.source in SERVING_SOURCES


def is_reset(commit: Commit) -> bool:
    return commit.source == Source.OPERATOR_RESET


def commit_order(commit: Commit) -> tuple[int, int, int, int, bool]:
    return (commit.ts_ms, commit.master_epoch, commit.broker_id, commit.offset, is_reset(commit))


def is_rollback(previous: Commit, current: Commit) -> bool:
    """A decrease that nobody asked for: operator resets reported as such are intended."""
    return current.offset < previous.offset and not is_reset(current)


def served_streams(commits: Iterable[tuple[Queue, Commit]]) -> list[tuple[Queue, list[Commit]]]:
    """Per queue (in queue order), its served commits in commit order: the stream both rules read."""
    served: dict[Queue, list[Commit]] = defaultdict(list)
    for queue, commit in commits:
        if is_served(commit):
            served[queue].append(commit)
    return [(queue, sorted(served[queue], key=commit_order)) for queue in sorted(served)]


def decreases(commits: Iterable[tuple[Queue, Commit]]) -> list[Decrease]:
    """Every rollback candidate: per queue, its served commits in commit order, and each one below
    the one before it that is not a reported reset. Ordered by queue, then commit order."""
    return [Decrease(q, p, c) for q, steps in served_streams(commits) for p, c in pairwise(steps) if is_rollback(p, c)]


def messages_consumed_again(previous: Commit, current: Commit) -> int:
    """Offsets are "next to consume": going from P back to C hands messages C..P-1 out again."""
    return max(0, previous.offset - current.offset)


# --- explanations and causes ---------------------------------------------------------------------


def reset_scope(params: Mapping[str, object]) -> tuple[str, str | None, int | None] | None:
    """The queues an operator's logged offset reset covers (OperatorAction ``reset_offset``, params
    ``{"consumerGroup", "topic"?, "queueId"?}``): (group, topic or None = all, queueId or None = all),
    or None when the params name no consumer group."""
    group, topic, qid = params.get("consumerGroup"), params.get("topic"), params.get("queueId")
    if not isinstance(group, str) or not group:
        return None
    return (
        group,
        topic if isinstance(topic, str) and topic else None,
        qid if isinstance(qid, int) and not isinstance(qid, bool) else None,
    )


def explains(reset: LoggedReset, decrease: Decrease, slack_ms: int = RESET_SLACK_MS) -> bool:
    """A logged reset explains a decrease of a queue it covers, logged between the previous commit and
    ``slack_ms`` after the decrease (the reset reaches the broker's commit after it is logged)."""
    q = decrease.queue
    return (
        reset.broker_name in ("", q.broker_name)
        and reset.consumer_group == q.consumer_group
        and reset.topic in (None, q.topic)
        and reset.queue_id in (None, q.queue_id)
        and decrease.previous.ts_ms <= reset.at_ms <= decrease.current.ts_ms + slack_ms
    )


def election_between(elections: Iterable[GroupElection], decrease: Decrease) -> Election | None:
    """The latest election of the queue's replica group with ``previous epoch < epoch <= current epoch``."""
    lo, hi = decrease.previous.master_epoch, decrease.current.master_epoch
    inside = [g.election for g in elections if g.broker_name == decrease.queue.broker_name and lo < g.election.master_epoch <= hi]
    return max(inside, key=lambda e: (e.master_epoch, e.transition_id), default=None)


def attribute(previous: Commit, current: Commit, election: Election | None) -> Attribution:
    """The cause of the decrease ``previous`` -> ``current``; ``election``: ``election_between``."""
    if election is not None and election.new_master_broker_id == current.broker_id:
        if election.old_sync_state_set and current.broker_id not in election.old_sync_state_set:
            return Attribution(Cause.UNCLEAN_ELECTION, election.master_epoch, election.transition_id)
        return Attribution(Cause.FAILOVER_STALE_REPLICA, election.master_epoch, election.transition_id)
    if (
        election is None
        and current.broker_id != previous.broker_id
        and current.role != SLAVE_ROLE
        and current.master_epoch <= previous.master_epoch
        and current.source != Source.PRE_ONLINE_SYNC
    ):
        # A master came back and served its own older table while another broker had been serving
        # (acting master), with no election in between: the pre-online reverse sync did not run.
        return Attribution(Cause.FORMER_MASTER_WITHOUT_PRE_ONLINE, current.master_epoch)
    return Attribution(Cause.UNKNOWN, current.master_epoch)


def at(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def rollback_finding(decrease: Decrease, election: Election | None) -> Finding:
    q, previous, current = decrease.queue, decrease.previous, decrease.current
    why = attribute(previous, current, election)
    return Finding(
        kind=FindingKind.ROLLBACK,
        cause=why.cause,
        cluster_name=current.cluster_name,
        consumer_group=q.consumer_group,
        topic=q.topic,
        broker_name=q.broker_name,
        queue_id=q.queue_id,
        master_epoch=why.master_epoch,
        broker_id=current.broker_id,
        role=current.role,
        source=current.source,
        previous_broker_id=previous.broker_id,
        previous_master_epoch=previous.master_epoch,
        previous_offset=previous.offset,
        previous_at=at(previous.ts_ms),
        offset=current.offset,
        messages_again=messages_consumed_again(previous, current),
        queue_max_offset=current.queue_max_offset,
        detected_at=at(current.ts_ms),
        transition_id=why.transition_id,
        operator_initiated=election is not None and election.trigger == "operator",
    )


@dataclass(frozen=True)
class Judgement:
    findings: tuple[Finding, ...]  # one rollback finding per decrease no logged reset explains
    explained_by_reset: int


def judge(found: Iterable[Decrease], history: History, reset_slack_ms: int = RESET_SLACK_MS) -> Judgement:
    """The decreases a logged operator reset explains are not rollbacks; each other one becomes a
    finding with its cause, from the latest election of its group between the two commits."""
    resets: dict[str, list[LoggedReset]] = defaultdict(list)  # by consumer group: most decreases match none
    for r in history.resets:
        resets[r.consumer_group].append(r)
    elections: dict[str, list[GroupElection]] = defaultdict(list)
    for g in history.elections:
        elections[g.broker_name].append(g)
    findings, explained = [], 0
    for d in found:
        if any(explains(r, d, reset_slack_ms) for r in resets.get(d.queue.consumer_group, ())):
            explained += 1
            continue
        findings.append(rollback_finding(d, election_between(elections.get(d.queue.broker_name, ()), d)))
    return Judgement(tuple(findings), explained)


def retention_losses(commits: Iterable[tuple[Queue, Commit]]) -> list[Finding]:
    """Each retention skip (a broker moved a group up to its queue's min offset: retention deleted the
    messages first) with the served commit before it in commit order: the messages the group never
    got are the offsets between the two (0 when the commit before is not among ``commits``). A skip
    goes forward: it is never a rollback, and a commit after it below it is one."""
    found = []
    for queue, steps in served_streams(commits):
        previous: Commit | None = None
        for commit in steps:
            if commit.source == Source.RETENTION_SKIP:
                found.append(retention_finding(queue, previous, commit))
            previous = commit
    return found


def retention_finding(q: Queue, previous: Commit | None, current: Commit) -> Finding:
    lost = current.offset - previous.offset if previous is not None and previous.offset < current.offset else 0
    return Finding(
        kind=FindingKind.RETENTION_SKIP,
        cluster_name=current.cluster_name,
        consumer_group=q.consumer_group,
        topic=q.topic,
        broker_name=q.broker_name,
        queue_id=q.queue_id,
        master_epoch=current.master_epoch,
        broker_id=current.broker_id,
        role=current.role,
        source=current.source,
        previous_broker_id=None if previous is None else previous.broker_id,
        previous_master_epoch=None if previous is None else previous.master_epoch,
        previous_offset=None if previous is None else previous.offset,
        previous_at=None if previous is None else at(previous.ts_ms),
        offset=current.offset,
        messages_lost=lost,
        queue_max_offset=current.queue_max_offset,
        detected_at=at(current.ts_ms),
    )


def rollbacks(commits: Iterable[tuple[Queue, Commit]], history: History, reset_slack_ms: int = RESET_SLACK_MS) -> Judgement:
    """The audit's rollback findings, straight from the definitions: the reference the job is tested against."""
    return judge(decreases(commits), history, reset_slack_ms)
