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
