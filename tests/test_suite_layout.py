"""The suite's layout: tests/lab/ holds only lab tests (marker `lab`, run under the lab lock and its fixtures);
a test that needs no lab lives beside the other unit tests, where `-m "not lab"` runs it."""

from __future__ import annotations

import ast
from pathlib import Path

LAB_TESTS = Path(__file__).resolve().parent / "lab"


def _marks_lab(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            return "mark.lab" in ast.unparse(node.value)
    return False


def test_every_module_under_tests_lab_is_marked_lab() -> None:
    unmarked = sorted(p.name for p in LAB_TESTS.glob("test_*.py") if not _marks_lab(p))
    assert unmarked == [], f"not lab tests (move them to tests/) or missing `pytestmark = pytest.mark.lab`: {unmarked}"


def test_the_lab_parts_take_every_module_once_and_balance_by_cost() -> None:
    """scripts/test runs the lab tests in parts at once (`--lab-shard I/N`): a module goes whole to one part,
    every module to some part, the same way on every run, dearest first to the part costing least so far."""
    from tests.conftest import LAB_COST_UNKNOWN, LAB_COSTS, lab_parts

    modules = {"lab/a.py", "lab/b.py", "lab/c.py", "lab/new.py", *LAB_COSTS}
    for n in (1, 2, 3, 5):
        parts = lab_parts(modules, n)
        assert set(parts) == modules and set(parts.values()) <= set(range(1, n + 1))
        assert parts == lab_parts(set(sorted(modules, reverse=True)), n)
        load = [sum(LAB_COSTS.get(m, LAB_COST_UNKNOWN) for m, p in parts.items() if p == k) for k in range(1, n + 1)]
        assert max(load) - min(load) <= max(LAB_COSTS.values())


def test_the_lab_costs_name_modules_that_exist() -> None:
    from tests.conftest import LAB_COSTS

    tests = Path(__file__).resolve().parent
    assert [m for m in LAB_COSTS if not (tests / m).is_file()] == []
