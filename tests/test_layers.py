"""The house rules on imports (collect → facts → judge → act → render, thin CLI, the lab apart), checked by
walking every module's imports.

Relative imports are resolved (the lab uses only those) and imports inside functions count: a lazy import
is still an edge, for the layers and for cycles alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "macfleet"

# package -> what it may import from macfleet (besides itself)
ALLOWED: dict[str, set[str]] = {
    "macfleet.errors": set(),
    "macfleet.constants": set(),  # facts stated once (issue 26 item 4): anyone may read them
    "macfleet.facts": {"macfleet.errors"},
    "macfleet.inventory": {"macfleet.errors"},
    "macfleet.judge": {"macfleet.facts", "macfleet.inventory.model", "macfleet.errors"},
    "macfleet.lab": {"macfleet.inventory.model", "macfleet.errors"},
    "macfleet.collect": {"macfleet.errors", "macfleet.facts", "macfleet.inventory"},
    # The node's programs (run on the Macs, standard library only): nothing of the controller.
    "macfleet.node": set(),
    "macfleet.act": {"macfleet.errors", "macfleet.facts", "macfleet.inventory", "macfleet.judge", "macfleet.collect",
                     "macfleet.paths", "macfleet.node"},
    "macfleet.flow": {
        "macfleet.errors",
        "macfleet.facts",
        "macfleet.inventory",
        "macfleet.judge",
        "macfleet.collect",
        "macfleet.act",
        "macfleet.paths",  # the controller's state files, named once
    },
    # The healer runs flows and renders its status page; nothing but the CLI imports it.
    "macfleet.watch": {"macfleet.errors", "macfleet.facts", "macfleet.inventory", "macfleet.judge", "macfleet.collect",
                       "macfleet.act", "macfleet.flow", "macfleet.render", "macfleet.paths"},
    "macfleet.render": {"macfleet.errors", "macfleet.facts", "macfleet.inventory", "macfleet.judge", "macfleet"},
    # Thin rooms: options in, one flow, a renderer out. (`macfleet` itself: the version string.)
    "macfleet.cli": {"macfleet.flow", "macfleet.render", "macfleet.inventory", "macfleet.errors", "macfleet.paths",
                     "macfleet.watch", "macfleet"},
}

# The facts stated once (macfleet/constants.py, issue 26 item 4) import nothing: every layer may read them.
EVERYONES = "macfleet.constants"

# Cycles known to exist in a wing another change is straightening; this list may only shrink (a test fails
# when an entry here is no longer a cycle, so it is removed with the fix).
KNOWN_CYCLES: set[frozenset[str]] = set()  # none left: keep it that way


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    rel = PACKAGE.parent.joinpath(*dotted.split("."))
    return rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file()


def _absolute(me: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    """The absolute module an ImportFrom names (`from ..facts import x` in macfleet.lab.faults -> macfleet.facts)."""
    if node.level == 0:
        return node.module
    base = me.split(".") if is_package else me.split(".")[:-1]
    if node.level - 1 > len(base):
        return None
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(source: str, me: str, is_package: bool = False) -> list[tuple[str, bool]]:
    """(module imported, at top level?) for every macfleet import in `source`, relative ones resolved; a
    `from package import submodule` counts as importing the submodule."""
    tree = ast.parse(source)
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        top = id(node) in top_level
        if isinstance(node, ast.Import):
            found += [(a.name, top) for a in node.names if a.name.startswith("macfleet")]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(me, is_package, node)
            if not module or not (module == "macfleet" or module.startswith("macfleet.")):
                continue
            for a in node.names:
                sub = f"{module}.{a.name}"
                found.append((sub if _is_module(sub) else module, top))
    return found


def _imports(path: Path) -> list[tuple[str, bool]]:
    return imports_of(path.read_text(), _name(path), path.name == "__init__.py")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_violations(me: str, imports: list[tuple[str, bool]]) -> list[str]:
    out = []
    for imported, top_level in imports:
        if _within(imported, "macfleet.cli") and not (_within(me, "macfleet.cli") or me == "macfleet.__main__"):
            out.append(f"{me} imports the CLI ({imported})")
        if _within(imported, "macfleet.lab") and not _within(me, "macfleet.lab"):
            if me != "macfleet.cli.lab":
                out.append(f"{me} imports the lab ({imported}); only cli/lab.py may")
            elif top_level:
                out.append("cli/lab.py must import the lab lazily, inside its commands")
            continue
        for package, allowed in ALLOWED.items():
            if not _within(me, package) or _within(imported, package):
                continue
            if (imported == "macfleet" and "macfleet" in allowed) or imported == EVERYONES:
                continue
            if not any(_within(imported, a) for a in allowed if a != "macfleet"):
                out.append(f"{me} may not import {imported} (allowed: {sorted(allowed)})")
    return out


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_imports_follow_the_layers(path: Path) -> None:
    assert layer_violations(_name(path), _imports(path)) == []


def test_the_checker_sees_a_relative_import_of_facts_in_the_lab() -> None:
    """The lab uses only relative imports: the rule must still catch the lab reading our parsers."""
    faults = PACKAGE / "lab" / "faults.py"
    source = faults.read_text() + "\nfrom ..facts.thunderbolt import parse_thunderbolt\n"
    found = layer_violations("macfleet.lab.faults", imports_of(source, "macfleet.lab.faults"))
    assert found == ["macfleet.lab.faults may not import macfleet.facts.thunderbolt "
                     "(allowed: ['macfleet.errors', 'macfleet.inventory.model'])"]
    lazy = "def f():\n    from ...facts import registry\n"
    assert layer_violations("macfleet.lab.macos.tools", imports_of(lazy, "macfleet.lab.macos.tools"))


def test_the_checker_keeps_the_cli_thin() -> None:
    src = "from macfleet.judge.topology import check_cabling\nfrom .options import JsonOpt\n"
    assert layer_violations("macfleet.cli.topology", imports_of(src, "macfleet.cli.topology")) == [
        "macfleet.cli.topology may not import macfleet.judge.topology (allowed: ['macfleet', 'macfleet.errors', "
        "'macfleet.flow', 'macfleet.inventory', 'macfleet.paths', 'macfleet.render', 'macfleet.watch'])"]


def import_graph() -> dict[str, set[str]]:
    """Module -> the macfleet modules it imports, lazily or not."""
    return {_name(p): {m for m, _ in _imports(p) if m != _name(p)} for p in _modules()}


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Each strongly connected group of two or more modules (Tarjan), as the set of its members."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.add(frozenset(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_lazy_imports_included() -> None:
    found = cycles(import_graph())
    assert found - KNOWN_CYCLES == set(), [sorted(c) for c in found - KNOWN_CYCLES]
    assert KNOWN_CYCLES - found == set(), f"no longer a cycle, remove it from KNOWN_CYCLES: {KNOWN_CYCLES - found}"


def test_the_cycle_check_sees_a_lazy_import() -> None:
    """A judge importing a flow inside a function closes a cycle (flow imports that judge at top level)."""
    lazy = imports_of("def f():\n    from macfleet.flow import topology\n", "macfleet.judge.topology")
    assert lazy == [("macfleet.flow.topology", False)]
    graph = import_graph()
    graph["macfleet.judge.topology"] |= {m for m, _ in lazy}
    assert any({"macfleet.judge.topology", "macfleet.flow.topology"} <= c for c in cycles(graph))


def test_lint_clean() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            *[p for p in ("macfleet", "tests", "bench", "playbooks") if (PACKAGE.parent / p).exists()],
        ],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------------------------------
# Code that runs on a node is a file in macfleet/node, never a string (issue 26 item 3)
# ------------------------------------------------------------------------------------------------------

NODE_DIR = PACKAGE / "node"
_PROGRAM_NODES = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.For, ast.While, ast.Try, ast.With)


def programs_in_strings(source: str) -> list[str]:
    """The string literals in `source` that are Python programs or pieces of one: several lines that parse as
    Python and hold an import, a def or a block (prose, shell lines and templates do not parse, or hold none)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value
        if sum(1 for line in text.splitlines() if line.strip()) < 3:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        if any(isinstance(n, _PROGRAM_NODES) for n in ast.walk(tree)):
            found.append(f"line {node.lineno}: {text.strip().splitlines()[0][:60]!r}")
    return found


@pytest.mark.parametrize("path", [p for p in _modules() if not _within(_name(p), "macfleet.node")
                                  and not _within(_name(p), "macfleet.lab")], ids=_name)
def test_no_node_program_is_a_string(path: Path) -> None:
    """A program run on a node (or by the controller's own Python) lives in a file, linted and tested: see
    macfleet/node. (The lab's stand-ins are the lab's own business.)"""
    assert programs_in_strings(path.read_text()) == [], "move it to a file under macfleet/node"


def test_the_program_check_sees_a_fragment_and_passes_prose_and_shell() -> None:
    fragment = 'X = r"""\ndef digest(p):\n    h = 1\n    return h\n"""\n'
    assert programs_in_strings(fragment) == ["line 1: 'def digest(p):'"]
    prose = '"""One line of prose.\n\nAnd another: with a colon, and (brackets).\nThird."""\n'
    shell = 'S = """\nfor f in /a/*; do\n  echo $f\ndone\n"""\n'
    assert programs_in_strings(prose) == [] and programs_in_strings(shell) == []


def private_flow_names(source: str, me: str, is_package: bool = False) -> list[str]:
    """`flow/` composes through public functions (issue 26 item 5): the private names (`_x`) a flow module takes
    from another flow module, by `from … import _x` or as `module._x` on a flow module it imported."""
    if not _within(me, "macfleet.flow"):
        return []
    tree = ast.parse(source)
    out, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(me, is_package, node)
            for a in node.names:
                sub = f"{module}.{a.name}"
                if _is_module(sub) and _within(sub, "macfleet.flow"):
                    aliases[a.asname or a.name] = sub
                elif module and _within(module, "macfleet.flow") and module != me and a.name.startswith("_"):
                    out.append(f"{me} imports {module}.{a.name}")
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and _within(a.name, "macfleet.flow")})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and isinstance(node.value, ast.Name)
                and aliases.get(node.value.id, me) != me):
            out.append(f"{me} uses {aliases[node.value.id]}.{node.attr}")
    return out


@pytest.mark.parametrize("path", [p for p in _modules() if _within(_name(p), "macfleet.flow")], ids=_name)
def test_a_flow_takes_no_private_name_of_another_flow(path: Path) -> None:
    assert private_flow_names(path.read_text(), _name(path), path.name == "__init__.py") == []


def test_the_private_name_check_sees_both_spellings() -> None:
    src = ("from macfleet.flow.rollout import Say, _history\nfrom .doctor import _read\n"
           "from macfleet.flow import reboot\n\ndef f():\n    return reboot._lock_holder, _history\n")
    assert private_flow_names(src, "macfleet.flow.models") == [
        "macfleet.flow.models imports macfleet.flow.rollout._history",
        "macfleet.flow.models imports macfleet.flow.doctor._read",
        "macfleet.flow.models uses macfleet.flow.reboot._lock_holder"]
    assert private_flow_names("from macfleet.act.transfer import _x\n", "macfleet.flow.models") == []
