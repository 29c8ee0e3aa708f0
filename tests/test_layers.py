"""The house rules on imports (design.md §6.1), checked by walking every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "macfleet"

# package -> what it may import from macfleet (besides itself)
ALLOWED: dict[str, set[str]] = {
    "macfleet.errors": set(),
    "macfleet.facts": {"macfleet.errors"},
    "macfleet.inventory": {"macfleet.errors"},
    "macfleet.judge": {"macfleet.facts", "macfleet.inventory.model", "macfleet.errors"},
    "macfleet.lab": {"macfleet.inventory.model", "macfleet.errors"},
    "macfleet.collect": {"macfleet.errors", "macfleet.facts", "macfleet.inventory"},
    "macfleet.act": {"macfleet.errors", "macfleet.facts", "macfleet.inventory", "macfleet.judge", "macfleet.collect",
                     "macfleet.paths"},
    "macfleet.flow": {
        "macfleet.errors",
        "macfleet.facts",
        "macfleet.inventory",
        "macfleet.judge",
        "macfleet.collect",
        "macfleet.act",
    },
    "macfleet.render": {"macfleet.errors", "macfleet.facts", "macfleet.inventory", "macfleet.judge", "macfleet"},
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, at top level?) for every macfleet import in the file."""
    tree = ast.parse(path.read_text())
    found = []
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, id(node) in top_level) for a in node.names if a.name.startswith("macfleet")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("macfleet") and not node.level:
            found += [(node.module, id(node) in top_level)]
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_imports_follow_the_layers(path: Path) -> None:
    me = _name(path)
    for imported, top_level in _imports(path):
        if _within(imported, "macfleet.cli"):
            assert _within(me, "macfleet.cli") or me == "macfleet.__main__", f"{me} imports the CLI ({imported})"
        if _within(imported, "macfleet.lab") and not _within(me, "macfleet.lab"):
            assert me == "macfleet.cli.lab", f"{me} imports the lab ({imported}); only cli/lab.py may"
            assert not top_level, "cli/lab.py must import the lab lazily, inside its commands"
        for package, allowed in ALLOWED.items():
            if not _within(me, package) or _within(imported, package):
                continue
            render_reads_version = package == "macfleet.render" and imported == "macfleet"
            permitted = render_reads_version or any(_within(imported, a) for a in allowed if a != "macfleet")
            assert permitted, f"{me} may not import {imported} (allowed: {sorted(allowed)})"


def test_lint_clean() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            *[p for p in ("macfleet", "tests", "bench") if (PACKAGE.parent / p).exists()],
        ],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
