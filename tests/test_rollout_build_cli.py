"""`rollout exo --build-on`: bad input is exit 2 before anything is read or locked; the inventory's build
settings are validated; a source's version is read from its pyproject.toml; the lab's source tree builds where
it runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from macfleet.errors import UsageError
from macfleet.flow.rollout import read_source_version
from tests.conftest import EXAMPLE_INVENTORY


def _no_lock(_state: Path) -> bool:
    """No cluster lock left in the test's shared cluster state (tests/conftest.py `cluster_state`)."""
    import os

    return not list(Path(os.environ["MACFLEET_CLUSTER_STATE_DIR"]).glob("*/lock.json"))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--build-on", "nosuch"), "build node 'nosuch' is not a node of mesh mesh1"),
        (("--build-on", "studio-1", "--no-build"), "--build-on and --no-build contradict each other"),
    ],
)
def test_bad_build_input_exit_2_nothing_locked(cli, tmp_path, args, says) -> None:
    result = cli("rollout", "exo", "--source", str(tmp_path), *args, "-i", str(EXAMPLE_INVENTORY),
                 env={"MACFLEET_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr and _no_lock(tmp_path)


def _with_build(example_inventory: Path, build: dict) -> Path:
    gv = example_inventory / "group_vars" / "all" / "macfleet.yml"
    data = yaml.safe_load(gv.read_text())
    data["macfleet_exo"]["build"] = build
    gv.write_text(yaml.safe_dump(data))
    return example_inventory


@pytest.mark.parametrize(("build", "says"), [
    ({"command": "make\x1b[2J"}, "without control characters"),
    ({"command": "  "}, "a shell command of 1 to"),
    ({"timeout_s": 0}, "greater than 0"),
    ({"nodes": "studio-1"}, "nodes"),
])
def test_bad_build_settings_are_refused(cli, example_inventory, build, says) -> None:
    result = cli("inventory", "show", "-i", str(_with_build(example_inventory, build)))
    assert result.exit_code == 2 and says in result.stderr, result.stderr


def test_the_default_build_command_is_exos_with_everything_inside_the_release(cli, example_inventory) -> None:
    result = cli("inventory", "show", "-i", str(example_inventory), "--json")
    build = cli.json(result)["meshes"][0]["settings"]["exo"]["build"]
    assert build["node"] is None
    for part in ('UV_PYTHON_INSTALL_DIR="$PWD/.python"', 'UV_PROJECT_ENVIRONMENT="$PWD/.venv"', "npm run build",
                 "uv sync --frozen --no-dev ${MACFLEET_UV_EXTRAS:-} ", "--python-preference only-managed",
                 "ln -sfn ../.venv/bin/exo bin/exo"):
        assert part in build["command"]


def test_source_version_from_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "exo"\nversion = "0.3.70"\n')
    assert read_source_version(tmp_path) == "0.3.70"
    (tmp_path / "VERSION").write_text("1.0.71\n")  # an explicit VERSION file wins
    assert read_source_version(tmp_path) == "1.0.71"
    (tmp_path / "VERSION").unlink()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "exo"\n')
    with pytest.raises(UsageError, match="no \\[project\\] version"):
        read_source_version(tmp_path)


def test_the_lab_source_builds_with_the_paths_of_where_it_runs(tmp_path: Path) -> None:
    from macfleet.lab.exo import build

    src = build.write_source(tmp_path / "src", "1.0.90")
    here = tmp_path / "releases" / "1.0.90-0123456789ab"
    shutil.copytree(src, here)
    p = subprocess.run(["sh", "-c", build.SOURCE_BUILD_COMMAND], cwd=here, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PWD": str(here)}, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (here / ".venv" / "bin" / "exo").read_text().splitlines()[0] == f"#!{here}/.venv/bin/python"
    assert str(here / "lib") in (here / ".venv" / "bin" / "exo").read_text()
    assert build.read_build(here)["version"] == "1.0.90"
    failing = build.write_source(tmp_path / "bad", "1.0.91", fail=True)
    p = subprocess.run(["sh", "-c", build.SOURCE_BUILD_COMMAND], cwd=failing, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 3 and "fails on purpose" in p.stderr


def test_lab_fail_build_needs_source(cli, tmp_path) -> None:
    result = cli("lab", "exo-build", "--version", "1.0.9", "--out", str(tmp_path / "o"), "--fail-build")
    assert result.exit_code == 2 and "--fail-build goes with --source" in result.stderr


def test_lab_builds_mlx_needs_source(cli, tmp_path) -> None:
    result = cli("lab", "exo-build", "--version", "1.0.9", "--out", str(tmp_path / "o"), "--builds-mlx")
    assert result.exit_code == 2 and "--builds-mlx goes with --source" in result.stderr
