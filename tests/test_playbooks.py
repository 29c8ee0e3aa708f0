"""Every playbook passes `ansible-playbook --syntax-check` and `ansible-lint --profile production`,
inside pytest so CI cannot skip them (design.md §6.4)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yml"))
INVENTORY = ROOT / "inventories" / "example"


def _env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_HOME": str(ROOT / ".pytest_cache" / "ansible")}


@pytest.mark.skipif(not PLAYBOOKS, reason="no playbooks yet")
@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: p.name)
def test_syntax_check(playbook: Path) -> None:
    exe = shutil.which("ansible-playbook")
    assert exe, "ansible-playbook is not installed"
    p = subprocess.run([exe, "--syntax-check", "-i", str(INVENTORY), str(playbook)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.skipif(not PLAYBOOKS, reason="no playbooks yet")
def test_ansible_lint_production() -> None:
    exe = shutil.which("ansible-lint")
    assert exe, "ansible-lint is not installed"
    p = subprocess.run([exe, "--profile", "production", "--nocolor", *(str(x) for x in PLAYBOOKS)], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
