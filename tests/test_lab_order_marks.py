"""The lab modules' `minutes=` marks order the run (tests/conftest.py); a whole run, with workers or without,
names a mark the run disagrees with, and a run of chosen tests does not (it measures part of a module)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT

pytest_plugins = ["pytester"]

CONFTEST = ("from tests.conftest import pytest_runtest_logreport, pytest_runtest_makereport, "
            "pytest_terminal_summary  # noqa: F401\n")
MODULE = """
import pytest

pytestmark = pytest.mark.lab(minutes={minutes})


def test_quick():
    pass
"""
HEADING = "lab modules whose minutes= mark this run disagrees with"


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makeini('[pytest]\ntestpaths = t\nmarkers =\n    lab: a lab module\n')
    pytester.mkdir("t")
    (pytester.path / "t" / "conftest.py").write_text(CONFTEST)
    (pytester.path / "t" / "test_marked_long.py").write_text(MODULE.format(minutes=5))
    (pytester.path / "t" / "test_marked_right.py").write_text(MODULE.format(minutes=0.5))
    return pytester


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "workers"])
def test_a_whole_run_names_the_mark_it_disagrees_with(suite: pytest.Pytester, workers: list[str]) -> None:
    result = suite.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert HEADING in out and "t/test_marked_long.py: marked 5 min, took 0.0 min" in out
    assert "test_marked_right" not in out.split(HEADING)[1]


def test_a_chosen_part_names_none(suite: pytest.Pytester) -> None:
    for chosen in (["t/test_marked_long.py"], ["-k", "quick"]):
        result = suite.runpytest_subprocess("-p", "no:cacheprovider", *chosen)
        result.assert_outcomes(passed=2 if chosen[0] == "-k" else 1)
        assert HEADING not in result.stdout.str()

