"""The one validator module (controlplane/validation.py): its rules as tables, and proof that the name
rule is written nowhere else and that the pure modules import with the standard library alone."""

from __future__ import annotations

import io
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from controlplane import validation as v
from nameserver.core.water_levels import parse_water_levels

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = (
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
HOME = ROOT / "controlplane" / "validation.py"


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
    assert again == [], "the name rule is written again; call controlplane.validation instead:\n" + "\n".join(again)


def test_no_first_party_module_compiles_a_pattern_of_names_or_addresses():
    compiled = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _first_party_sources()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "re.compile(" in line and ("a-z" in line or r"\d{1,5}" in line)
    ]
    assert compiled == [], "a name or address pattern outside controlplane/validation.py:\n" + "\n".join(compiled)


def test_the_pure_modules_import_with_the_standard_library_alone():
    # -S: no site-packages, so Django, DRF or Celery cannot be imported by accident.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import controlplane.validation, controlplane.codes, controlplane.keyed_config;"
        "import controlplane.controller.core.rules, nameserver.core.config, nameserver.core.water_levels,"
        " nameserver.core.routes;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework', 'celery')))"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
