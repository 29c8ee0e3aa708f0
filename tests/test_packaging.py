"""What a non-editable install carries besides the package: every playbook file and ansible.cfg."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import macfleet
from macfleet.lab.exo.build import _LIBRARY

ROOT = Path(__file__).resolve().parent.parent


def test_every_playbook_file_is_shipped() -> None:
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = {p.resolve() for patterns in data_files.values() for pattern in patterns for p in ROOT.glob(pattern)}
    wanted = {p.resolve() for p in (ROOT / "playbooks").rglob("*")
              if p.is_file() and p.suffix != ".md" and "__pycache__" not in p.parts}
    assert wanted - shipped == set(), "add these to [tool.setuptools.data-files] in pyproject.toml"
    assert (ROOT / "ansible.cfg").resolve() in shipped
    for target, patterns in data_files.items():
        for pattern in patterns:
            for p in ROOT.glob(pattern):
                # each file lands under share/macfleet/<its path in the checkout>
                assert target == str(Path("share/macfleet") / p.relative_to(ROOT).parent).rstrip("/."), (target, p)


# --- What a clean install needs: every import declared, and the wheel working in a fresh venv ------------------

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Imported only where the feature asks for it, with a clear message when absent, and declared in that extra.
OPTIONAL_IMPORTS = {"huggingface_hub": "hf"}
# The exo stand-in's own modules under the names a lab build gives them beside it (lab/exo/build.py _LIBRARY):
# macfleet's, not a distribution's.
LAB_BUILD_MODULES = {Path(name).stem for name in _LIBRARY}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_canonical(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _third_party_imports() -> dict[str, Path]:
    """Top-level module -> first file importing it, for every module macfleet/ imports that is not the
    standard library's or its own (plain imports, from-imports, and importlib.import_module("name"))."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / "macfleet").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names = [node.args[0].value]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "macfleet" and top not in LAB_BUILD_MODULES:
                    found.setdefault(top, path.relative_to(ROOT))
    return found


def test_every_import_is_a_declared_dependency() -> None:
    declared = _requirement_names(PYPROJECT["dependencies"])
    extras = {extra: _requirement_names(reqs) for extra, reqs in PYPROJECT["optional-dependencies"].items()}
    distributions = importlib.metadata.packages_distributions()
    imports = _third_party_imports()
    assert {"click", "typer", "yaml", "paramiko"} <= imports.keys()  # the scan sees what it must
    missing = []
    for module, where in sorted(imports.items()):
        dists = {_canonical(d) for d in distributions.get(module, [module])}
        wanted = extras[OPTIONAL_IMPORTS[module]] if module in OPTIONAL_IMPORTS else declared
        if not dists & wanted:
            missing.append(f"{module} (imported by {where}; distribution {sorted(dists)})")
    assert missing == [], "declare in pyproject.toml [project] dependencies: " + ", ".join(missing)


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """No PYTHONPATH (the tests run with the checkout on it) and no user site: the venv sees only what the wheel
    and its declared dependencies brought."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONUSERBASE")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("MACFLEET_")}
    return env | {"PYTHONNOUSERSITE": "1", "HOME": str(tmp_path / "home"), "NO_COLOR": "1", "COLUMNS": "100"}


def _run(argv: list[str | Path], env: dict[str, str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv} exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_wheel_installs_and_runs_in_a_fresh_venv_without_extras(tmp_path: Path) -> None:
    """What CI must prove for a new user: `pip install .` (no extras) in a clean venv, then the console script
    works. Dependencies come from the configured index (pip's cache makes a rerun quick)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "ansible.cfg"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("macfleet", "playbooks"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    env = _clean_env(tmp_path)
    (tmp_path / "home").mkdir()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", src], env, tmp_path)
    wheels = sorted((tmp_path / "dist").glob("macfleet-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], env, tmp_path)
    py, exe = venv / "bin" / "python", venv / "bin" / "macfleet"
    _run([py, "-m", "pip", "install", "-q", wheels[0]], env, tmp_path, timeout=600)
    env = env | {"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}  # its ansible-playbook, not ours

    where = _run([py, "-c", "import macfleet, sys; print(macfleet.__file__); print(sys.prefix)"], env, tmp_path)
    assert where.splitlines()[0].startswith(str(venv)), where  # the wheel's copy, not the checkout's
    assert "Usage: macfleet" in _run([exe, "--help"], env, tmp_path)
    assert _run([exe, "--version"], env, tmp_path).split()[-1] == macfleet.__version__
    # the node programs travelled with it, as files read at run time
    sent = _run([py, "-c", "from macfleet.act import transfer; print(len(transfer._SESSION_PROGRAM))"], env, tmp_path)
    assert int(sent) > 1000

    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example", inventory)
    assert _run([exe, "inventory", "check", "-i", inventory], env, tmp_path).startswith(f"ok: {inventory}")
    capture = sorted((ROOT / "tests" / "fixtures" / "captures" / "fdesetup").glob("*_on_1.txt"))[0]
    assert json.loads(_run([exe, "facts", "parse", "fdesetup", capture, "--json"], env, tmp_path))
    # the playbooks travelled with it and the installed ansible-core reads them
    shared = venv / "share" / "macfleet"
    _run([venv / "bin" / "ansible-playbook", "--syntax-check", "-i", inventory, shared / "playbooks" / "bootstrap.yml"],
         env | {"ANSIBLE_CONFIG": str(shared / "ansible.cfg")}, tmp_path)
