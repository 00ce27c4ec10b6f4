"""A broker set's acting master as the routes show it against the modes its brokers report
(nameserver/core/acting.py): one row per way the two agree or disagree (RIP-32: the slave starts
acting on its member-group poll, stops when the returning master takes its state back)."""

from __future__ import annotations

import pytest

from nameserver.core.acting import ActingAgreement as A
from nameserver.core.acting import ReportedMode, acting_master_state
from nameserver.core.routes import RoutedActingMaster

pytestmark = pytest.mark.unit

M, S1, S2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
ROUTED_1 = RoutedActingMaster(1, S1, ("T",), 0)


def mode(broker_id: int, addr: str, meta: str | None, stale: bool = False) -> ReportedMode:
    return ReportedMode(broker_id, addr, meta, stale)


@pytest.mark.parametrize(
    "routed, reports, agreement, routed_mode, others",
    [
        pytest.param(None, [mode(0, M, "WRITER"), mode(1, S1, "FOLLOWER")], A.NONE, None, (), id="master-serving"),
        pytest.param(None, [], A.NONE, None, (), id="nothing-reported-nothing-routed"),
        pytest.param(ROUTED_1, [mode(1, S1, "ACTING")], A.AGREED, "ACTING", (), id="routed-slave-acting"),
        pytest.param(
            ROUTED_1,
            [mode(0, M, "WRITER", stale=True), mode(1, S1, "FOLLOWER")],
            A.BROKER_NOT_ACTING,
            "FOLLOWER",
            (),
            id="routed-but-the-slave-has-not-started-acting",
        ),
        pytest.param(ROUTED_1, [], A.BROKER_UNREPORTED, None, (), id="routed-slave-never-reported"),
        pytest.param(ROUTED_1, [mode(1, S1, "ACTING", stale=True)], A.BROKER_UNREPORTED, None, (), id="its-report-is-stale"),
        pytest.param(ROUTED_1, [mode(1, S1, None)], A.BROKER_UNREPORTED, None, (), id="an-older-broker-reports-no-mode"),
        pytest.param(
            RoutedActingMaster(2, S2, ("T",), 0),
            [mode(1, S1, "ACTING"), mode(2, S2, "FOLLOWER")],
            A.ANOTHER_BROKER_ACTING,
            "FOLLOWER",
            (1,),
            id="routes-moved-on-another-still-acting",
        ),
        pytest.param(
            ROUTED_1,
            [mode(1, S1, "ACTING"), mode(2, S2, "ACTING")],
            A.ANOTHER_BROKER_ACTING,
            "ACTING",
            (2,),
            id="two-brokers-acting",
        ),
        pytest.param(
            None,
            [mode(0, M, "WRITER"), mode(1, S1, "ACTING")],
            A.ROUTES_NOT_ACTING,
            None,
            (1,),
            id="master-back-slave-not-handed-back-yet",
        ),
        pytest.param(
            None,
            [mode(1, S1, "ACTING")],
            A.ROUTES_NOT_ACTING,
            None,
            (1,),
            id="broker-acting-routes-not-supportActingMaster-off-or-writeable",
        ),
        pytest.param(None, [mode(1, S1, "ACTING", stale=True)], A.NONE, None, (), id="a-stale-acting-report-says-nothing"),
    ],
)
def test_the_routes_acting_master_against_the_brokers_reports(routed, reports, agreement, routed_mode, others):
    state = acting_master_state(routed, reports)
    assert state.agreement is agreement
    assert state.routed == routed
    assert (state.routed_mode, state.others_acting) == (routed_mode, others)


def test_the_routed_broker_is_matched_by_address_not_id():
    # a report under another id from the routed address is the routed broker's (controller mode ids differ)
    state = acting_master_state(ROUTED_1, [mode(7, S1, "ACTING")])
    assert state.agreement is A.AGREED and state.others_acting == ()
