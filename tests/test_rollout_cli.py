"""`macfleet rollout` wiring: bad input is exit 2 with one line, before any lock or node is touched."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLE_INVENTORY


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("model", "not-a-model", "--from", "."), "bad model 'not-a-model'"),
        (("model", "org/name"), "--from DIR or --hf"),
        (("model", "org/../x", "--from", "."), "bad model"),
        (("exo", "--source", "/nonexistent/build"), "no such directory or file"),
    ],
)
def test_bad_input_exit_2_nothing_locked(cli, tmp_path, args, says) -> None:
    env = {"MACFLEET_STATE_DIR": str(tmp_path)}
    result = cli("rollout", *args, "-i", str(EXAMPLE_INVENTORY), env=env)
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr
    assert not (tmp_path / "macfleet" / "locks").exists() or not list((tmp_path / "macfleet" / "locks").glob("*.json"))


def test_help_lists_the_commands(cli) -> None:
    result = cli("rollout", "--help")
    assert result.exit_code == 0
    for name in ("exo", "model", "status", "history", "rollback"):
        assert name in result.stdout


def _enabled_inventory(tmp_path):
    import shutil

    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (inv / "group_vars" / "all" / "llama.yml").write_text("macfleet_llama:\n  enabled: true\n")
    return inv


def test_llama_rpc_refuses_before_any_node_is_dialled(cli, tmp_path) -> None:
    env = {"MACFLEET_STATE_DIR": str(tmp_path)}
    off = cli("rollout", "llama-rpc", "--source", str(tmp_path), "-i", str(EXAMPLE_INVENTORY), env=env)
    assert off.exit_code == 2 and "llama-rpc is not enabled" in off.stderr
    inv = _enabled_inventory(tmp_path)
    (tmp_path / "build" / "bin").mkdir(parents=True)
    nobin = cli("rollout", "llama-rpc", "--source", str(tmp_path / "build"), "-i", str(inv), env=env)
    assert nobin.exit_code == 2 and "has no bin/rpc-server: not a llama.cpp build" in nobin.stderr
    (tmp_path / "build" / "bin" / "rpc-server").write_text("#!/bin/sh\n")
    (tmp_path / "build" / "VERSION").write_text("b 1; rm -rf /\n")
    badver = cli("rollout", "llama-rpc", "--source", str(tmp_path / "build"), "-i", str(inv), env=env)
    assert badver.exit_code == 2 and "is not a version" in badver.stderr
