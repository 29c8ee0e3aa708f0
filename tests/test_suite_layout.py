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
