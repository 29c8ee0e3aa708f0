"""Shared test helpers. Lab fixtures live in tests/lab/conftest.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order a run with workers wants (scripts/test: pytest-xdist, `--dist loadgroup`): the lab's modules
    first, longest first (`pytest.mark.lab(minutes=N)`, its last measured time), each kept whole on one worker in
    its own order (its tests share a module's lab and build on each other) unless it says `whole=False`, then the
    unit tests, one at a time to whichever worker is free. A run without workers runs the same order."""
    def minutes(item: pytest.Item) -> float:
        mark = item.get_closest_marker("lab")
        return float(mark.kwargs.get("minutes", 0)) if mark else -1.0

    for item in items:
        mark = item.get_closest_marker("lab")
        if mark and mark.kwargs.get("whole", True):  # `whole=False`: a module whose tests stand each on their own
            item.add_marker(pytest.mark.xdist_group(item.module.__name__.rsplit(".", 1)[-1]))
    items.sort(key=lambda item: -minutes(item))  # stable: a module's tests keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """Each report of a lab test carries its module's `minutes=` mark, so that the run (its controller, with
    workers) can compare the mark with what the module took."""
    outcome = yield
    mark = item.get_closest_marker("lab")
    if mark and "minutes" in mark.kwargs:
        outcome.get_result().user_properties.append(("lab_minutes", float(mark.kwargs["minutes"])))


_lab_took: dict[str, list[float]] = {}  # lab module -> [its mark's minutes, seconds it took in this run]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    marked = dict(report.user_properties).get("lab_minutes")
    if marked is not None:
        _lab_took.setdefault(report.nodeid.split("::")[0], [marked, 0.0])[1] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The `minutes=` marks are last measurements kept by hand; they only order the run. Name the ones this run
    found off by more than half (and a minute), so that the order stays the longest first. Only a whole run
    measures them (no test chosen by name, keyword or mark)."""
    config = terminalreporter.config
    if config.option.keyword or config.option.markexpr or config.args != config.getini("testpaths"):
        return
    off = [(path, marked, took / 60) for path, (marked, took) in sorted(_lab_took.items())
           if abs(took / 60 - marked) > max(marked / 2, 1.0)]
    if off:
        terminalreporter.write_sep("-", "lab modules whose minutes= mark this run disagrees with (only the order)")
        for path, marked, took in off:
            terminalreporter.write_line(f"{path}: marked {marked:g} min, took {took:.1f} min")


@pytest.fixture(autouse=True)
def cluster_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's own shared cluster state (paths.cluster_state_root), never the machine's /var/lib/macfleet;
    the processes a test starts inherit it."""
    from macfleet.paths import CLUSTER_STATE_ENV

    path = tmp_path_factory.mktemp("cluster-state")
    monkeypatch.setenv(CLUSTER_STATE_ENV, str(path))
    return path


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
