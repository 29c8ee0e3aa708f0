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
