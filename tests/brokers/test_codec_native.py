"""The native codec's own checks (brokers/store/_codec.c): it enforces the limits and refusals that
codec.configure() hands it, and no rule of its own. Collected only where the native module is built
(tests/brokers/conftest.py); test_codec.py requires it to be built wherever a C compiler is, and runs
every behaviour check against both implementations.
"""

from __future__ import annotations

import pytest

from brokers.store import codec
from brokers.store import message as m
from brokers.store.consumequeue import ConsumeQueues
from tests.brokers.test_codec import LIMIT, native

pytestmark = pytest.mark.unit


@pytest.fixture
def reconfigured():
    """Configure the native codec with other rules for one test, then with Python's own again."""
    yield lambda rules: codec.configure(native(), rules)
    codec.configure(native())


def test_the_native_codec_enforces_the_limits_and_messages_python_hands_it(reconfigured):
    topic, props = "x" * 10, {"k": "v" * 100}
    fine = codec.native_rules()
    assert native().prepare([m.Message(topic, 0, b"x", props)], LIMIT)[1] == []

    reconfigured(codec.native_rules(max_topic_length=9, max_properties_length=50))
    _, rejects = native().prepare([m.Message(topic, 0, b"x"), m.Message("T", 0, b"x", props)], LIMIT)
    assert rejects == [
        (0, "MESSAGE_ILLEGAL", "topic length must be 1..9 bytes"),
        (1, "PROPERTIES_SIZE_EXCEEDED", "properties exceed 50 bytes"),
    ]

    # Texts, status names and ranges are Python's too: change them there and the C code follows.
    rules = dict(
        fine,
        topic_type="TOPIC?",
        record_size="{size} > segment",
        illegal="ILLEGAL!",
        ints=tuple(
            (name, 0, 5, f"{name} out of 0..5") if name == "queue_id" else (name, lo, hi, text)
            for name, lo, hi, text in fine["ints"]
        ),
    )
    reconfigured(rules)
    _, rejects = native().prepare(
        [m.Message(5, 0, b"x"), m.Message("T", 0, b"x" * LIMIT), m.Message("T", 6, b"x"), m.Message("T", 5, b"x")], LIMIT
    )
    assert rejects == [
        (0, "ILLEGAL!", "TOPIC?"),
        (1, "ILLEGAL!", f"{LIMIT + 92} > segment"),
        (2, "ILLEGAL!", "queue_id out of 0..5"),
    ]


def test_the_native_codec_refuses_rules_its_record_layout_cannot_hold(reconfigured):
    fine = codec.native_rules()
    for wrong, why in [
        (dict(fine, max_topic_length=256), "max_topic_length"),  # a one-byte length
        (dict(fine, max_properties_length=40000), "max_properties_length"),  # a signed 16-bit one
        (dict(fine, head_body_size=92), "head_body_size"),
        (dict(fine, ints=fine["ints"][:-1]), "ints"),
        (dict(fine, hosts=(fine["hosts"][0], fine["hosts"][0])), "hosts"),
        ({k: v for k, v in fine.items() if k != "body_type"}, "body_type"),
    ]:
        with pytest.raises(ValueError, match=why):
            reconfigured(wrong)
        # A refused configure leaves the rules in force untouched.
        refused = native().prepare([m.Message("", 0, b"x")], LIMIT)[1]
        assert refused == [(0, "MESSAGE_ILLEGAL", "topic length must be 1..127 bytes")]


def test_a_body_changed_after_prepare_is_an_error_not_a_corrupt_record(tmp_path):
    body = bytearray(b"abc")
    records, _ = native().prepare([m.Message("T", 0, body)], LIMIT)
    body.extend(b"def")
    queues = ConsumeQueues(tmp_path)
    try:
        with pytest.raises(ValueError, match="changed after prepare"):
            native().encode_run(records, 0, 1, 0, 0, queues.queues, queues.get)
        assert all(cq.max_offset == 0 for cq in queues.queues.values())  # no offsets given out
    finally:
        queues.close()
