"""The lab's inventory is an inventory and nothing else: plain Ansible on it (its defaults read every file of the
directory as an inventory source) finds exactly the lab's Macs, and the admin's password is nowhere in it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.lab


def _plain_ansible(lab, *argv: str) -> subprocess.CompletedProcess:
    """Ansible with its own defaults (no macfleet ansible.cfg, no ANSIBLE_* from the caller), as anyone runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {"ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=lab.workdir, timeout=180)


def test_no_secret_in_the_lab_inventory_and_plain_ansible_finds_exactly_its_macs(lab4):
    password = lab4.password_file.read_text().strip()
    assert password and (lab4.password_file.stat().st_mode & 0o777) == 0o600
    holding = [str(p.relative_to(lab4.inventory)) for p in lab4.inventory.rglob("*")
               if p.is_file() and password.encode() in p.read_bytes()]
    assert holding == [], f"the admin's password is in the inventory directory: {holding}"

    listed = _plain_ansible(lab4, "ansible-inventory", "-i", str(lab4.inventory), "--list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert sorted(json.loads(listed.stdout)["_meta"]["hostvars"]) == sorted(lab4.nodes)
    assert password not in listed.stdout + listed.stderr

    ping = _plain_ansible(lab4, "ansible", "all", "-i", str(lab4.inventory), "-m", "ansible.builtin.ping")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    answered = sorted(line.split()[0] for line in ping.stdout.splitlines() if "| SUCCESS" in line)
    assert answered == sorted(lab4.nodes), ping.stdout
    assert password not in ping.stdout + ping.stderr
