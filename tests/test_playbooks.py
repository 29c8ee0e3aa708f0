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


def test_the_controller_freezes_its_heap_before_each_task_forks_its_workers() -> None:
    # Loaded from beside the playbooks without any setting (NEEDS_ENABLED False), for macfleet and plain
    # ansible-playbook alike; each task's start freezes what the controller holds, so workers do not copy it.
    import gc
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "macfleet_fork_gc", ROOT / "playbooks" / "callback_plugins" / "macfleet_fork_gc.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plugin = module.CallbackModule()
    assert plugin.CALLBACK_NEEDS_ENABLED is False and plugin.CALLBACK_TYPE == "aggregate"
    gc.unfreeze()
    try:
        plugin.v2_playbook_on_task_start(None, False)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
