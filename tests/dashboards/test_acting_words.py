"""The words the pages use for an acting-master state (dashboards/acting_master.py): every line starts
with "acting master" (static/js/live.js drops the old reason by it), and says which side acts."""

from __future__ import annotations

import pytest

from dashboards.acting_master import describe

pytestmark = pytest.mark.unit


def view(agreement: str, broker_id: int | None, **over) -> dict:
    base = {"topics": ["T"], "otherTopics": 0, "reportedMode": None, "othersActing": []}
    return {"agreement": agreement, "brokerId": broker_id, **base, **over}


@pytest.mark.parametrize(
    "state, text",
    [
        pytest.param(view("agreed", 1, reportedMode="ACTING"), "acting master 1 (read-only)", id="agreed"),
        pytest.param(
            view("agreed", 1, topics=["A", "B"], otherTopics=1),
            "acting master 1 (read-only) for 2 of its 3 topics",
            id="some-topics-writeable",
        ),
        pytest.param(
            view("broker_not_acting", 1, reportedMode="FOLLOWER"),
            "acting master 1 in the routes — broker 1 not acting (it reports FOLLOWER)",
            id="broker-not-acting",
        ),
        pytest.param(
            view("broker_unreported", 2), "acting master 2 in the routes — broker 2 has not reported its mode", id="unreported"
        ),
        pytest.param(
            view("another_broker_acting", 2, othersActing=[1]),
            "acting master 2 in the routes — broker 1 reports acting instead",
            id="another-broker-acting",
        ),
        pytest.param(
            view("routes_not_acting", None, topics=[], othersActing=[1, 2]),
            "acting master: none in the routes — brokers 1, 2 report acting",
            id="several-brokers-acting-none-routed",
        ),
    ],
)
def test_the_words_say_which_side_acts(state, text):
    assert describe(state) == text
    assert text.startswith("acting master")
