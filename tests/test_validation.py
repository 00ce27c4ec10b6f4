"""The one validator module (mqrules/validation.py): its rules as tables, and proof that the name
rule is written nowhere else and that the pure modules import with the standard library alone."""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from controlplane.controller.core.config import SCHEMA as CONTROLLER_CONFIG
from mqrules import validation as v
from nameserver.core.config import SCHEMA as NAMESRV_CONFIG
from nameserver.core.water_levels import parse_water_levels

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = (
    "mqrules",
    "controlplane",
    "nameserver",
    "dashboards",
    "audits",
    "celery_tasks",
    "brokers",
    "spark_jobs",
    "chaos",
    "bench",
    "testkit",
)
HOME = ROOT / "mqrules" / "validation.py"


NAMES = {
    "letters and digits": ("DefaultCluster1", True),
    "every allowed sign": ("%RETRY%group|a_b.c-d", True),
    "127 characters": ("n" * 127, True),
    "128 characters": ("n" * 128, False),
    "empty": ("", False),
    "a slash (liveness keys use it)": ("a/b", False),
    "a space": ("a b", False),
    "non-ASCII": ("brökér", False),
    "not a string": (12, False),
    "None": (None, False),
    'a trailing newline ("$" alone would take it)': ("b1\n", False),
    "a NUL": ("b\x001", False),
}


@pytest.mark.parametrize("value, ok", NAMES.values(), ids=NAMES.keys())
def test_the_name_rule(value, ok):
    assert v.is_name(value) is ok
    assert (v.name(value) is None) is ok


ADDRS = {
    "host:port": ("127.0.0.1:10911", True),
    "a host name": ("broker-a.example:8080", True),
    "IPv6 in brackets": ("[::1]:10911", True),
    "no port": ("127.0.0.1", False),
    "a six-digit port": ("h:123456", False),
    "a space": ("h h:1", False),
    "too long": ("h" * 250 + ":10911", False),
    "not a string": (10911, False),
    "port 1": ("h:1", True),
    "port 65535": ("h:65535", True),
    "port 0": ("h:0", False),
    "port 65536": ("h:65536", False),
    "a port with a leading zero": ("h:080", False),
    "a port in Arabic digits (Python's \\d takes them)": ("10.1.2.3:١٢٣", False),
    "a trailing newline": ("h:1\n", False),
}


@pytest.mark.parametrize("value, ok", ADDRS.values(), ids=ADDRS.keys())
def test_the_address_rule(value, ok):
    assert v.is_addr(value) is ok
    assert (v.addr(value) is None) is ok


@pytest.mark.parametrize(
    "value, ok",
    [(0, True), (v.MAX_ID, True), (v.MAX_ID + 1, False), (-1, False), ("12", False), (True, False), (1.0, False)],
)
def test_integers_are_strict_json_integers(value, ok):
    assert (v.integer()(value) is None) is ok


@pytest.mark.parametrize(
    "value, ok",
    [(0, True), (1.5, True), (-0.1, False), (float("nan"), False), (float("inf"), False), (True, False), ("1", False)],
)
def test_rates_are_finite_non_negative_numbers(value, ok):
    assert (v.rate(value) is None) is ok


def test_an_object_reports_every_field_error_at_once_and_drops_unknown_fields():
    required = {"clusterName": v.name, "brokerAddr": v.addr}
    optional = {"brokerId": v.integer()}
    out, errors = v.json_object({"clusterName": "c1", "brokerId": None, "extra": 1}, required, optional)
    assert out == {"clusterName": "c1"} and errors == {"brokerAddr": [v.REQUIRED_MESSAGE]}
    with pytest.raises(v.Invalid) as caught:
        v.checked({"clusterName": "a/b", "brokerAddr": "x", "brokerId": -1}, required, optional)
    assert caught.value.fields == {
        "clusterName": [v.NAME_MESSAGE],
        "brokerAddr": [v.ADDR_MESSAGE],
        "brokerId": [f"must be an integer from 0 to {v.MAX_ID}"],
    }
    with pytest.raises(v.Invalid) as caught:
        v.checked([1], required)
    assert caught.value.fields == ["must be a JSON object"]


# --- the rules of issue 14: what a schema can say exactly, text Postgres can store, JSON we can parse


@pytest.mark.parametrize("low, high", [(0, 0), (0, 9), (1, 9), (1, 65535), (100, v.INT_MAX), (1, v.MAX_ID), (10, 99)])
def test_a_decimal_pattern_takes_exactly_the_numbers_of_its_range(low, high):
    pattern = re.compile("^" + v.decimal_pattern(low, high) + "$")
    listed = re.compile("^(?:" + v.decimal_pattern(low, high) + ";)+$")  # embedded, as in a list of ids
    edges = {0, 1, 9, 10, 99, 100, low - 1, low, low + 1, high - 1, high, high + 1, high * 10, 10 ** len(str(high)), 2**63, 2**64}
    rng = random.Random(14)
    numbers = {n for n in edges | {rng.randrange(0, 3 * high + 2) for _ in range(5000)} | set(range(0, 300)) if n >= 0}
    wrong = [n for n in sorted(numbers) if bool(pattern.fullmatch(str(n))) != (low <= n <= high)]
    wrong += [n for n in sorted(numbers) if bool(listed.fullmatch(f"{n};{high};")) != (low <= n <= high)]
    assert wrong == []
    for text in ("", "01", "+1", "-1", " 1", "1 ", "١", "1.0"):
        assert not pattern.fullmatch(text), text


@pytest.mark.parametrize(
    "text, message",
    [
        ("plain", None),
        ("emoji 😀", None),
        ("a\x00b", v.NUL_MESSAGE),
        ("\ud800", v.SURROGATE_MESSAGE),
        ("\udfff x", v.SURROGATE_MESSAGE),
    ],
)
def test_text_postgres_can_store(text, message):
    assert v.storable(text) == message


IDS = {
    "one": ("1", {1}),
    "several, with spaces and a trailing ';'": (" 1 ; 2;3 ;", {1, 2, 3}),
    "blank": ("", set()),
    "Long.MAX": (str(v.MAX_ID), {v.MAX_ID}),
    "Long.MAX + 1": (str(v.MAX_ID + 1), None),
    "20 digits": ("9" * 20, None),
    "5,000 digits (int()'s limit is 4,300)": ("9" * 5000, None),
    "zero": ("0", None),
    "negative": ("-1", None),
    "an empty id": ("1;;2", None),
    "Arabic digits": ("١", None),
    "a tab": ("1\t;2", None),
}


@pytest.mark.parametrize("raw, ids", IDS.values(), ids=IDS.keys())
def test_broker_ids_to_clean_each_fit_a_java_long(raw, ids):
    assert (v.broker_ids_text(raw) is None) is (ids is not None)
    if ids is not None:
        assert v.broker_ids(raw) == ids


CHECK_CODES = {
    "addr;millis": ("127.0.0.1:10911;1700000000000", True),
    "no millis": ("127.0.0.1:10911;", False),
    "no port": ("127.0.0.1;1", False),
    "a NUL in the address": ("127.0.0.1\x00:10911;1", False),
    "an address over 255 characters": ("h" * 250 + ":10911;1", False),
    "millis of 20 digits": ("h:1;" + "1" * 20, False),
    "a trailing newline": ("h:1;1\n", False),
}


@pytest.mark.parametrize("code, ok", CHECK_CODES.values(), ids=CHECK_CODES.keys())
def test_a_register_check_code_is_an_address_and_millis(code, ok):
    assert (v.register_check_code(code) is None) is ok


@pytest.mark.parametrize(
    "text, value", [("0", 0), ("-1", -1), ("200", 200), ("1.0", None), (" 2", None), ("١٢", None), ("", None)]
)
def test_query_integers_are_ascii_decimals(text, value):
    assert v.query_integer(text) == value


JSON_REFUSED = {
    "nested 50,000 deep": ("[" * 50_000 + "]" * 50_000, {"non_field_errors": ["JSON nested too deeply"]}),
    "not UTF-8": (b'{"a": "\xff"}', {"non_field_errors": ["not UTF-8 text (byte 7)"]}),
    "an integer of 5,000 digits": ("9" * 5000, {"non_field_errors": ["not valid JSON: an integer of too many digits"]}),
    "NaN": ('{"a": [1, NaN]}', {"a": {"1": [v.NON_FINITE_MESSAGE]}}),
    "-Infinity": ('{"a": -Infinity}', {"a": [v.NON_FINITE_MESSAGE]}),
    "1e400": ('{"a": {"b": 1e400}}', {"a": {"b": [v.NON_FINITE_MESSAGE]}}),
    "NaN as the whole body": ("NaN", {"non_field_errors": [v.NON_FINITE_MESSAGE]}),
}


@pytest.mark.parametrize("raw, fields", JSON_REFUSED.values(), ids=JSON_REFUSED.keys())
def test_json_we_cannot_take_is_refused_with_where(raw, fields):
    with pytest.raises(v.Invalid) as caught:
        v.parse_json(raw)
    assert caught.value.fields == fields


def test_json_we_can_take_is_parsed_as_json_would():
    raw = '{"a": [1, 2.5, "😀", "\\ud83d\\ude00", "NaN", {"Infinity": null}], "b": "\\u00e9"}'
    assert v.parse_json(raw) == v.parse_json(raw.encode()) == json.loads(raw)
    assert v.parse_json("[" * 500 + "]" * 500)  # deep, but not too deep
    # NUL and lone surrogates are the fields' business (``storable``): an unknown field is dropped
    assert v.parse_json('{"k\\u0000": "\\ud800"}') == {"k\x00": "\ud800"}


CONFIG_BOUNDS = {
    "an int key at Integer.MAX": (NAMESRV_CONFIG, "waitSecondsForService", v.INT_MAX, v.INT_MAX),
    "an int key beyond": (NAMESRV_CONFIG, "waitSecondsForService", v.INT_MAX + 1, None),
    "an int key as text beyond": (CONTROLLER_CONFIG, "electMasterMaxRetryCount", str(v.INT_MAX + 1), None),
    "a long key at Long.MAX": (NAMESRV_CONFIG, "scanNotActiveBrokerInterval", v.LONG_MAX, v.LONG_MAX),
    "a long key as text at Long.MAX": (CONTROLLER_CONFIG, "scanInactiveMasterInterval", str(v.LONG_MAX), v.LONG_MAX),
    "a long key beyond": (CONTROLLER_CONFIG, "scanNotActiveBrokerInterval", v.LONG_MAX + 1, None),
    "10^40": (CONTROLLER_CONFIG, "scanNotActiveBrokerInterval", 10**40, None),
    "below the minimum": (CONTROLLER_CONFIG, "scanNotActiveBrokerInterval", 99, None),
    "Arabic digits": (NAMESRV_CONFIG, "waitSecondsForService", "١٢", None),
    "a float": (NAMESRV_CONFIG, "waitSecondsForService", 12.0, None),
    "a bool for an int": (NAMESRV_CONFIG, "waitSecondsForService", True, None),
    "'TRUE'": (NAMESRV_CONFIG, "supportActingMaster", "TRUE", True),
    "' true'": (NAMESRV_CONFIG, "supportActingMaster", " true", None),
    "text": (CONTROLLER_CONFIG, "controllerType", "jRaft", "jRaft"),
    "text with NUL": (CONTROLLER_CONFIG, "controllerType", "a\x00", None),
    "text with a lone surrogate": (CONTROLLER_CONFIG, "controllerType", "a\ud800", None),
    "a number for text": (CONTROLLER_CONFIG, "controllerType", 5, None),
}


@pytest.mark.parametrize("schema, key, raw, parsed", CONFIG_BOUNDS.values(), ids=CONFIG_BOUNDS.keys())
def test_config_values_are_bounded_as_java_types_them(schema, key, raw, parsed):
    if parsed is None:
        with pytest.raises(ValueError):
            schema.parse(key, raw)
    else:
        assert schema.parse(key, raw) == parsed


@pytest.mark.parametrize("schema", [NAMESRV_CONFIG, CONTROLLER_CONFIG], ids=["NamesrvConfig", "ControllerConfig"])
def test_the_config_schema_says_what_parse_takes(schema):
    for key, default in schema.defaults.items():
        declared = schema.json_schema(key)
        if isinstance(default, bool) or not isinstance(default, int):
            continue
        number, text = declared["oneOf"]
        low, high = schema.bounds(key)
        assert (number["minimum"], number["maximum"]) == (low, high)
        for n in (low - 1, low, high, high + 1):
            assert bool(re.fullmatch(text["pattern"], str(n))) == (low <= n <= high) == _parses(schema, key, str(n))


@pytest.mark.parametrize(
    "schema, keys",
    [
        (NAMESRV_CONFIG, {"enableControllerInNamesrv", "enableAllTopicList", "clientRequestThreadPoolNums"}),
        (CONTROLLER_CONFIG, {"controllerType", "isProcessReadEvent", "controllerThreadPoolNums"}),
    ],
    ids=["NamesrvConfig", "ControllerConfig"],
)
def test_a_key_accepted_with_no_effect_says_so_in_its_schema(schema, keys):
    """RocketMQ's keys with nothing to do here stay accepted (an operator's tools keep working), but the
    config page and the API schema say they do nothing."""
    assert keys <= schema.notes.keys() <= schema.defaults.keys()
    for key, note in schema.notes.items():
        assert note.startswith("No effect here: ") and schema.json_schema(key)["description"] == note
    assert not schema.notes.keys() & {"supportActingMaster", "enableElectUncleanMaster", "scanNotActiveBrokerInterval"}


def _parses(schema, key, raw) -> bool:
    try:
        schema.parse(key, raw)
    except ValueError:
        return False
    return True


# --- water levels: the broker's inSync verdict and threshold are optional fields -----------------

MASTER = {
    "brokerName": "b1",
    "brokerId": 0,
    "role": "SYNC_MASTER",
    "masterEpoch": 1,
    "maxOffset": 10,
    "confirmOffset": 10,
    "minOffset": 0,
}
SLAVE = {
    "brokerId": 1,
    "addr": "127.0.0.1:10921",
    "ackOffset": 5,
    "lagBytes": 5,
    "lastCaughtUpMs": 0,
    "transferBytesPerS": 0.0,
    "inSyncStateSet": True,
}


def test_water_levels_accept_the_brokers_in_sync_verdict_and_threshold():
    levels = parse_water_levels({**MASTER, "haMaxGapNotInSync": 1024, "slaves": [{**SLAVE, "inSync": False}]})
    assert levels["haMaxGapNotInSync"] == 1024 and levels["slaves"][0]["inSync"] is False
    assert parse_water_levels({**MASTER, "slaves": [SLAVE]}) == {**MASTER, "slaves": [SLAVE]}  # older brokers


def test_a_bad_in_sync_verdict_is_a_field_error():
    with pytest.raises(v.Invalid) as caught:
        parse_water_levels({**MASTER, "haMaxGapNotInSync": -1, "slaves": [{**SLAVE, "inSync": "yes"}]})
    assert caught.value.fields == {
        "haMaxGapNotInSync": [f"must be an integer from 0 to {v.MAX_ID}"],
        "slaves": {"0": {"inSync": ["must be true or false"]}},
    }


# --- one home --------------------------------------------------------------------------------------


def _first_party_sources():
    for package in FIRST_PARTY:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != HOME:
                yield path


def _string_literals(path: Path):
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING:
            yield tok.start[0], tok.string


def _restates_the_name_rule(literal: str) -> bool:
    """The name rule's character set written out: as a regex class (``%|a-zA-Z0-9_.-``), as an
    explicit set of characters, or as its message."""
    as_class = "%|" in literal and "a-z" in literal and "0-9" in literal
    as_set = "0123456789" in literal and "%" in literal and "|" in literal
    as_message = "%|_.-" in literal or "%%|_.-" in literal
    return as_class or as_set or as_message


def test_the_name_rule_is_written_only_in_the_validator_module():
    assert any(_restates_the_name_rule(s) for _, s in _string_literals(HOME)), "the detector no longer sees the rule"
    again = [
        f"{path.relative_to(ROOT)}:{line}: {literal[:60]}"
        for path in _first_party_sources()
        for line, literal in _string_literals(path)
        if _restates_the_name_rule(literal)
    ]
    assert again == [], "the name rule is written again; call mqrules.validation instead:\n" + "\n".join(again)


def test_no_first_party_module_compiles_a_pattern_of_names_or_addresses():
    compiled = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _first_party_sources()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "re.compile(" in line and ("a-z" in line or r"\d{1,5}" in line)
    ]
    assert compiled == [], "a name or address pattern outside mqrules/validation.py:\n" + "\n".join(compiled)


def test_the_pure_modules_import_with_the_standard_library_alone():
    # -S: no site-packages, so Django, DRF or Celery cannot be imported by accident.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import mqrules.validation, mqrules.codes, mqrules.keyed_config;"
        "import controlplane.controller.core.rules, nameserver.core.config, nameserver.core.water_levels,"
        " nameserver.core.routes;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework', 'celery')))"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
