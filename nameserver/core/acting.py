"""A broker set's acting master as its routes show it, held against the mode its brokers report
(RIP-32; reference §3.5, §5.1, §5.3). Pure.

The routes decide (``routes.routed_acting_master``, the same rule ``pickupTopicRouteData`` applies).
The slave learns it on its own: it starts acting when its member-group poll (or the min-broker-id
push) finds it is the set's smallest id, and stops when the returning master takes its state back
before registering. Until then the two disagree, for a poll period or for as long as a broker misses
the change: the state says which way, so that a page never shows one side as if it were both."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from .broker_status import MetaMode
from .routes import RoutedActingMaster


class ActingAgreement(StrEnum):
    NONE = "none"  # no route shows an acting master and no broker reports acting
    AGREED = "agreed"  # the routes' acting master reports ACTING, and no other broker does
    BROKER_NOT_ACTING = "broker_not_acting"  # the routes show it; it reports another mode
    BROKER_UNREPORTED = "broker_unreported"  # the routes show it; no fresh report of its mode
    ANOTHER_BROKER_ACTING = "another_broker_acting"  # the routes show one; another reports ACTING
    ROUTES_NOT_ACTING = "routes_not_acting"  # a broker reports ACTING; no route shows an acting master


@dataclass(frozen=True)
class ReportedMode:
    """One broker's latest ``broker_status`` report, as far as acting goes."""

    broker_id: int
    broker_addr: str
    mode: str | None  # status.metaMode (MetaMode's values); None: the report has none
    stale: bool  # no report for three of its intervals (broker_status.is_stale): it says nothing now


@dataclass(frozen=True)
class ActingMasterState:
    agreement: ActingAgreement
    routed: RoutedActingMaster | None  # the acting master the routes show, if any
    routed_mode: str | None  # what the routed acting master reports (None: no fresh report, or none routed)
    others_acting: tuple[int, ...]  # ids of the other brokers that report ACTING, sorted


def acting_master_state(routed: RoutedActingMaster | None, reports: Iterable[ReportedMode]) -> ActingMasterState:
    """The set's acting-master state: ``routed`` (the routes' rule) against its brokers' fresh reports,
    matched by address (the address a broker registers with is the one it reports)."""
    fresh = [r for r in reports if not r.stale]
    own = next((r for r in fresh if routed is not None and r.broker_addr == routed.broker_addr), None)
    others = tuple(sorted({r.broker_id for r in fresh if r.mode == MetaMode.ACTING and r is not own}))
    routed_mode = own.mode if own is not None else None
    if routed is None:
        agreement = ActingAgreement.ROUTES_NOT_ACTING if others else ActingAgreement.NONE
    elif others:
        agreement = ActingAgreement.ANOTHER_BROKER_ACTING
    elif own is None or own.mode is None:
        agreement = ActingAgreement.BROKER_UNREPORTED
    elif own.mode == MetaMode.ACTING:
        agreement = ActingAgreement.AGREED
    else:
        agreement = ActingAgreement.BROKER_NOT_ACTING
    return ActingMasterState(agreement, routed, routed_mode, others)
