"""mqrules.textformat writes gauge families exactly as prometheus_client's generate_latest does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.utils import floatToGoString

from mqrules import textformat

pytestmark = pytest.mark.unit

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10)


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**15), 10**15))
def test_numbers_as_the_library_writes_them(value):
    assert textformat.number(value) == floatToGoString(value)


@given(
    st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), min_size=0, max_size=4, unique=True).flatmap(
        lambda names: st.tuples(
            st.just(tuple(names)),
            st.lists(st.tuples(*[text] * len(names)), max_size=5),
            st.lists(st.floats(), min_size=5, max_size=5),
        )
    ),
    text,
)
def test_a_gauge_family_as_generate_latest_writes_it(family, documentation):
    names, rows, values = family
    library = GaugeMetricFamily("rmqha_test_gauge", documentation, labels=list(names))
    ours = []
    for labels, value in zip(rows, values, strict=False):
        library.add_metric(list(labels), value)
        ours.append((textformat.label_text(names, labels) if names else "", value))

    class One:
        def collect(self):
            yield library

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())
    assert textformat.gauge_text("rmqha_test_gauge", documentation, ours).encode() == generate_latest(registry)
