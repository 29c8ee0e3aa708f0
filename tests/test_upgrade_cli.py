"""`macfleet upgrade`'s refusals before it dials any Mac (issue 29 item 4): no target build is a refusal naming the
inventory key; a real run without --password-file is bad input (exit 2); a password file others can read is
refused; nothing is locked or changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import EXAMPLE_INVENTORY


def _inventory(tmp_path: Path, build: str | None) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    if build:
        gv = inv / "group_vars" / "all" / "macfleet.yml"
        gv.write_text(gv.read_text().replace("  build: null", f"  build: {build}", 1))
    return inv


def test_no_target_build_is_refused_naming_the_key(cli, tmp_path: Path, cluster_state: Path) -> None:
    result = cli("upgrade", "-i", str(_inventory(tmp_path, None)), "--check", "--json",
                 env={"MACFLEET_STATE_DIR": str(tmp_path / "state")})
    assert result.exit_code == 1, result.stderr
    assert "macfleet_macos.build" in result.stdout
    assert not list(cluster_state.glob("*/lock.json"))


def test_without_a_password_file_it_is_bad_input(cli, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, "25C56")
    result = cli("upgrade", "-i", str(inv), env={"MACFLEET_STATE_DIR": str(tmp_path / "state")})
    assert result.exit_code == 2 and "--password-file" in result.stderr
    loose = tmp_path / "pw"
    loose.write_text("secret\n")
    loose.chmod(0o644)
    result = cli("upgrade", "-i", str(inv), "--password-file", str(loose),
                 env={"MACFLEET_STATE_DIR": str(tmp_path / "state")})
    assert result.exit_code == 2 and "others can read it" in result.stderr and "secret" not in result.stderr
