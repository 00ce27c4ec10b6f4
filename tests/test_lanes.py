"""How ``make test`` shares the suite between two pytest-xdist workers (tests/lanes.py), on a
throw-away suite: a module at a time, the Spark audits as one unit, the e2e modules handed out first."""

from __future__ import annotations

import pytest

from tests import lanes

pytestmark = pytest.mark.unit

pytest_plugins = ["pytester"]

RECORD = """
import os, pytest
@pytest.fixture(autouse=True)
def record(request):
    with open(os.environ["LANES_LOG"], "a") as f:
        f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {request.node.nodeid}\\n")
"""


def test_a_test_s_unit_is_its_module_and_the_spark_audits_are_one():
    assert lanes.unit_of("tests/brokers/test_x.py::test_a[1]") == "tests/brokers/test_x.py"
    assert lanes.unit_of("tests/audits/test_a.py::test_a") == lanes.unit_of("tests/audits/test_b.py::T::test_b")
    assert lanes.handed_out_first("tests/e2e/test_soak.py") and not lanes.handed_out_first("tests/test_cli.py")


def test_two_workers_run_each_module_whole_the_audits_in_one_and_the_e2e_modules_first(pytester, monkeypatch, tmp_path):
    log = tmp_path / "lanes.log"
    monkeypatch.setenv("LANES_LOG", str(log))
    files = {f"tests/audits/test_a{i}.py": 3 for i in range(3)}
    files |= {f"tests/brokers/test_m{i}.py": 4 for i in range(6)} | {f"tests/e2e/test_e{i}.py": 2 for i in range(3)}
    for path, count in files.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(f"def test_{n}(): pass\n" for n in range(count)))
    pytester.makeconftest(RECORD)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:django", "-n", "2", "--dist", "loadfile", plugins=[lanes])
    result.assert_outcomes(passed=sum(files.values()))
    ran = [line.split() for line in log.read_text().splitlines()]
    workers_of = {path: {w for w, nodeid in ran if nodeid.startswith(path)} for path in files}
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of
    assert len(set().union(*(workers_of[p] for p in files if p.startswith("tests/audits/")))) == 1
    for worker in ("gw0", "gw1"):  # on each worker, no other module after the first two units before an e2e one
        order = [nodeid.split("::")[0] for w, nodeid in ran if w == worker]
        units = list(dict.fromkeys(lanes.unit_of(m) for m in order))
        later = units[2:]
        e2e = [u for u in later if u.startswith("tests/e2e/")]
        assert later[: len(e2e)] == e2e, units
