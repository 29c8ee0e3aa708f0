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


def _fixtures_of(conftest: Path) -> set[str]:
    return {node.name for node in ast.parse(conftest.read_text()).body if isinstance(node, ast.FunctionDef)
            and any("fixture" in ast.unparse(d) for d in node.decorator_list)}


def test_lab_tests_live_under_tests_lab_and_no_module_imports_a_fixture() -> None:
    """A lab test elsewhere had to import `lab_small` to see it, and pytest then held two fixtures of that name:
    on a run with workers, a worker that ran it and a tests/lab module brought the lab up twice under one name,
    the second `lab up` taking the first lab down under the tests that used it."""
    tests = LAB_TESTS.parent
    outside = sorted(str(p.relative_to(tests)) for p in tests.rglob("test_*.py")
                     if p.parent != LAB_TESTS and _marks_lab(p))
    assert outside == [], f"lab tests outside tests/lab/ (move them there): {outside}"
    fixtures = {("tests.conftest" if c.parent == tests else f"tests.{c.parent.name}.conftest"): _fixtures_of(c)
                for c in tests.rglob("conftest.py")}
    imported = sorted(f"{p.relative_to(tests)}: {a.name}" for p in tests.rglob("*.py")
                      for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.ImportFrom)
                      for a in node.names if a.name in fixtures.get(node.module or "", set()))
    assert imported == [], f"fixtures imported into a module (a second fixture of that name): {imported}"
