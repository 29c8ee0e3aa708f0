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
        # --verify, --check and a push refuse a --from that is not a directory alike, naming it
        (("model", "org/name", "--verify", "--from", "/nonexistent/typo"),
         "--from /nonexistent/typo: no such directory; expected a local directory holding the model's files"),
        (("model", "org/name", "--check", "--from", "/nonexistent/typo"), "--from /nonexistent/typo: no such"),
        (("model", "org/name", "--from", "/nonexistent/typo"), "--from /nonexistent/typo: no such directory"),
        (("model", "org/name", "--verify", "--from", "/etc/hostname"), "--from /etc/hostname: not a directory"),
    ],
)
def test_bad_input_exit_2_nothing_locked(cli, tmp_path, cluster_state, args, says) -> None:
    env = {"MACFLEET_STATE_DIR": str(tmp_path)}
    result = cli("rollout", *args, "-i", str(EXAMPLE_INVENTORY), env=env)
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr
    assert not list(cluster_state.glob("*/lock.json"))


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


SWITCH_HOLDER = r"""
import sys, time
from pathlib import Path
from macfleet.act.lock import ClusterLock, lock_path
from macfleet.flow.rollout import switch_step
lock = ClusterLock(lock_path(Path(sys.argv[1])))
held = lock.acquire("rollout exo", "switch mesh1 to 1.0.73-b")
switch_step(lock, held, {"action": "switch", "from": "1.0.71-a", "to": "1.0.73-b", "mesh": "mesh1",
                         "step": "health"})
print("held", flush=True)
time.sleep(300)
"""


def test_a_killed_switch_refuses_rollout_model_naming_the_repair(cli, tmp_path, cluster_state) -> None:
    """hostile.md row 8: `rollout model` after a kill -9 of `rollout exo` mid-switch took over its lock and threw
    away the repair record; it must refuse (before dialling a node), naming the repair."""
    import json
    import os
    import subprocess
    import sys

    env = {"MACFLEET_STATE_DIR": str(tmp_path)}
    holder = subprocess.Popen([sys.executable, "-c", SWITCH_HOLDER, str(EXAMPLE_INVENTORY)],
                              env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    lock = next(cluster_state.glob("*/lock.json"))
    left = lock.read_text()
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    result = cli("rollout", "model", "org/tiny", "--from", str(model), "-i", str(EXAMPLE_INVENTORY), env=env)
    assert result.exit_code == 1, result.stderr
    assert "Only its repair may take the lock" in result.stderr
    assert "macfleet rollout rollback" in result.stderr and "--force" in result.stderr
    assert lock.read_text() == left and json.loads(left)["phase"]["step"] == "health"


def _tarball(path, members: list[tuple[str, bytes | None, str | None]]):
    """members: (name, data, link target): a file when data is given, else a symlink to the target."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, link or ""
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(("members", "says"), [
    ([("../evil", b"x", None)], "would land outside the build"),
    ([("b/VERSION", b"1.0.73\n", None), ("b/lib", None, "/etc/passwd")], "would land outside the build"),
    ([("c/VERSION", b"1.0; rm -rf /\n", None), ("c/bin/exo", b"#!/bin/sh\n", None)], "is not a version"),
])
def test_a_tampered_tarball_is_bad_input(cli, tmp_path, cluster_state, members, says) -> None:
    """hostile.md row 15: refused, but as `internal error … please report it`, exit 1."""
    env = {"MACFLEET_STATE_DIR": str(tmp_path)}
    evil = _tarball(tmp_path / "evil.tar.gz", members)
    result = cli("rollout", "exo", "--source", str(evil), "--no-build", "-i", str(EXAMPLE_INVENTORY), env=env)
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr and "internal error" not in result.stderr
    assert not list(cluster_state.glob("*/lock.json"))


def test_a_model_file_name_with_a_newline_is_bad_input(cli, tmp_path) -> None:
    env = {"MACFLEET_STATE_DIR": str(tmp_path)}
    model = tmp_path / "m"
    model.mkdir()
    (model / "a\nb.safetensors").write_bytes(b"x")
    result = cli("rollout", "model", "org/tiny", "--from", str(model), "-i", str(EXAMPLE_INVENTORY), env=env)
    assert result.exit_code == 2, result.stderr
    assert "refused the file name 'a\\nb.safetensors'" in result.stderr and "internal error" not in result.stderr
