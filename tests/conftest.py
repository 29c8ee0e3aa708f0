"""Shared test helpers. Lab fixtures live in tests/lab/conftest.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
# `--lab-shard I/N`: the lab tests cut in N parts by module (a module's tests stay together, with its fixtures),
# so that scripts/test runs the parts at once, each with labs of its own (MACFLEET_TEST_LAB_PREFIX): most of a
# lab test's time is spent waiting on the lab, as on a Mac. Modules go, dearest first, to the part that costs
# least so far, by what each cost when last measured (seconds, `--durations=0`, docs/lab.md); a module not
# listed counts as LAB_COST_UNKNOWN. Tests without the lab marker are kept in every part.
LAB_COSTS = {
    "lab/test_lab_faults.py": 450, "lab/test_doctor_lab.py": 420, "lab/test_topology_lab.py": 87,
    "lab/test_engines_lab.py": 86, "lab/test_lab_mesh.py": 59, "lab/test_watch_hostile_lab.py": 27,
    "lab/test_exo_lab.py": 24, "lab/test_lab_cluster_scripts.py": 10, "lab/test_lab_sudoers.py": 4,
    "lab/test_lab_inventory_secrets.py": 2,
}
LAB_COST_UNKNOWN = 60


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lab-shard", default=None, metavar="I/N",
                     help="run only part I of N of the lab tests (by module, balanced by LAB_COSTS in "
                          "tests/conftest.py); tests without the lab marker are kept")


def _shard_option(config: pytest.Config) -> tuple[int, int] | None:
    value = config.getoption("--lab-shard")
    if value is None:
        return None
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise pytest.UsageError(f"--lab-shard {value!r}: expected I/N with 1 <= I <= N, e.g. 1/3")
    return i, n


def lab_parts(modules: set[str], n: int) -> dict[str, int]:
    """Each module's part (1..n): dearest first, to the part that costs least so far."""
    load = [0] * n
    part: dict[str, int] = {}
    for module in sorted(modules, key=lambda m: (-LAB_COSTS.get(m, LAB_COST_UNKNOWN), m)):
        k = load.index(min(load))
        part[module] = k + 1
        load[k] += LAB_COSTS.get(module, LAB_COST_UNKNOWN)
    return part


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = _shard_option(config)
    if shard is None:
        return
    here = Path(__file__).resolve().parent

    def module(item: pytest.Item) -> str:
        return item.path.resolve().relative_to(here).as_posix()

    lab = [item for item in items if "lab" in item.keywords]
    part = lab_parts({module(item) for item in lab}, shard[1])
    left = [item for item in lab if part[module(item)] != shard[0]]
    if left:
        dropped = {id(item) for item in left}
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if id(item) not in dropped]
EXAMPLE_INVENTORY = ROOT / "inventories" / "example"
SAMPLES = ROOT.parent / "shared" / "samples"
CAPTURES = ROOT / "tests" / "fixtures" / "captures"


def assert_held_out_set(folder: Path, expected: dict) -> None:
    """A held-out set of real outputs: every file in `folder` has its expected verdict and is cited in the
    folder's SOURCES.md, and every verdict has its file."""
    files = {p.name for p in folder.glob("*.txt")}
    assert files == set(expected)
    sources = (folder / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in sources for name in files)


def capture(name: str) -> str:
    """A real capture by its shared/samples file name, from the verbatim copy kept in the repo."""
    found = sorted(CAPTURES.glob(f"*/{name}"))
    assert found, f"no capture {name} under {CAPTURES}"
    return found[0].read_text(encoding="utf-8")


@pytest.fixture
def example_inventory(tmp_path: Path) -> Path:
    """A private copy of inventories/example, to break on purpose."""
    dest = tmp_path / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, dest)
    return dest


class Cli:
    """Runs the real CLI in-process through `main`, the console script's entry point, so the
    exception-to-exit-code mapping is exercised too (typer's own CliRunner would bypass it)."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str, env: dict[str, str] | None = None):
        from macfleet.cli.app import main

        @click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
        def wrapper() -> None:
            main(list(args))

        return self.runner.invoke(wrapper, [], env=env, catch_exceptions=False)

    @staticmethod
    def json(result) -> object:
        return json.loads(result.stdout)


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A real OpenSSH server with one node (`tests/sshd.py`), shared by a module's tests; a module that needs
    more nodes defines its own."""
    from tests import sshd

    s = sshd.start(tmp_path_factory.mktemp("sshd"), nodes=("node-1",))
    yield s
    s.stop()
