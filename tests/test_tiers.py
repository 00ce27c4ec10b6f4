"""The tier check (tests/tiers.py) on a throw-away suite: a test must choose exactly one tier, and
``-m unit`` does not hide one that did not."""

from __future__ import annotations

import pytest

from tests import tiers

pytestmark = pytest.mark.unit

pytest_plugins = ["pytester"]

INI = "[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini(INI)
    return pytester.runpytest("-p", "no:django", "-p", "no:cacheprovider", *args, plugins=[tiers])


def test_a_suite_whose_tests_each_choose_one_tier_runs(pytester):
    pytester.makepyfile(
        test_a="import pytest\npytestmark = pytest.mark.unit\ndef test_x(): pass\n",
        test_b="import pytest\npytestmark = pytest.mark.e2e\ndef test_y(): pass\n",
    )
    run(pytester, "-m", "unit").assert_outcomes(passed=1, deselected=1)


@pytest.mark.parametrize("selection", [[], ["-m", "unit"]], ids=["whole-suite", "unit-only"])
def test_a_test_without_a_tier_fails_the_run_even_when_deselected(pytester, selection):
    pytester.makepyfile(
        test_a="import pytest\npytestmark = pytest.mark.unit\ndef test_x(): pass\n", test_new="def test_forgot_its_tier(): pass\n"
    )
    result = run(pytester, *selection)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_new.py::test_forgot_its_tier: no tier*"])


def test_a_test_with_two_tiers_fails_the_run(pytester):
    pytester.makepyfile(test_a="import pytest\npytestmark = pytest.mark.unit\n@pytest.mark.integration\ndef test_x(): pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_a.py::test_x: two tiers: unit, integration*"])
