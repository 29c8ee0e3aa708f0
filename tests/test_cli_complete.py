"""The shell completes node and mesh names from the inventory the command would read, quietly (cli/complete.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest

from macfleet.cli import complete
from tests.conftest import EXAMPLE_INVENTORY, ROOT

NODES = ["studio-1", "studio-2", "studio-3", "studio-4"]


def _with(inventory: object) -> click.Context:
    ctx = click.Context(click.Command("x"))
    ctx.params["inventory"] = inventory
    return ctx


def test_nodes_meshes_and_limit_terms() -> None:
    ctx = _with(EXAMPLE_INVENTORY)
    assert complete.nodes(ctx, "stu") == NODES
    assert complete.nodes(ctx, "studio-3") == ["studio-3"]
    assert complete.meshes(ctx, "") == ["mesh1"]
    assert complete.limit(ctx, "m") == ["mesh1", "macfleet"]
    assert complete.limit(ctx, "studio-1,!studio-") == [f"studio-1,!{n}" for n in NODES]
    assert complete.limit(ctx, "mesh1:&studio-2") == ["mesh1:&studio-2"]


def test_the_inventory_before_the_command_is_used() -> None:
    root = click.Context(click.Command("macfleet"))
    root.params["inventory"] = EXAMPLE_INVENTORY
    sub = click.Context(click.Command("reboot"), parent=root)
    sub.params["inventory"] = None
    assert complete.nodes(sub, "") == NODES


@pytest.mark.parametrize("inventory", ["/nonexistent", str(ROOT / "README.md")])
def test_an_unreadable_inventory_completes_nothing(inventory: str) -> None:
    from pathlib import Path

    assert complete.nodes(_with(Path(inventory)), "") == []
    assert complete.limit(_with(Path(inventory)), "a") == ["all"]


def _shell(words: str, *, inventory_env: str | None = None) -> subprocess.CompletedProcess:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "_MACFLEET_COMPLETE": "complete_bash",
           "COMP_WORDS": words, "COMP_CWORD": str(cword), "HOME": str(ROOT / "nowhere")}
    if inventory_env is not None:
        env["MACFLEET_INVENTORY"] = inventory_env
    return subprocess.run([sys.executable, "-m", "macfleet"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_bash_completes_a_commands_node_argument_and_stays_quiet_when_it_cannot() -> None:
    """The real completion protocol, as the script `--install-completion` installs drives it."""
    done = _shell("macfleet reboot stu", inventory_env=str(EXAMPLE_INVENTORY))
    assert done.returncode == 0 and done.stdout.split() == NODES and done.stderr == ""
    done = _shell("macfleet reboot -i /nonexistent stu")
    assert done.returncode == 0 and done.stdout.strip() == "" and done.stderr == ""
