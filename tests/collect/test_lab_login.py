"""In the lab: a node reachable only through a jump host, from an inventory under a path with a space and a
quote. macfleet's own SSH (topology check), plain ansible-playbook and `topology apply --check` all get there
the same way. Real sshd, real ssh, real Ansible."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.lab.conftest import Lab, lab_small  # noqa: F401 - the shared two-node lab fixture

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]

PLAYBOOK = """\
- name: Read the OS version over SSH.
  hosts: macfleet
  gather_facts: false
  tasks:
    - name: Read sw_vers.
      ansible.builtin.command:
        argv: [sw_vers]
      changed_when: false
"""


def _macfleet(lab: Lab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=lab.workdir, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_node_behind_a_jump_host_from_a_path_with_a_space_and_a_quote(lab_small: Lab, tmp_path: Path) -> None:  # noqa: F811
    truth = lab_small.truth()
    jump, target = lab_small.nodes[0], lab_small.nodes[1]
    jump_addr, target_addr = truth["nodes"][jump]["address"], truth["nodes"][target]["address"]
    inv = tmp_path / "it's a dir" / "inv"
    shutil.copytree(lab_small.inventory, inv)
    # OpenSSH hands -F (and only -F) on to the jump host's ssh, inside a shell command: keep that path plain.
    config = tmp_path / "ssh_config"
    config.write_text(f'Host *\n  IdentityFile "{inv}/id_ed25519"\n  UserKnownHostsFile "{inv}/known_hosts"\n'
                      "  StrictHostKeyChecking yes\n")
    hosts = inv / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    entry = next(m["hosts"][target] for m in data["macfleet"]["children"].values() if target in m["hosts"])
    entry["ansible_ssh_extra_args"] = f"-F {config} -J {truth['user']}@{jump_addr}"
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))

    subprocess.run(["ip", "route", "add", "blackhole", f"{target_addr}/32"], check=True)
    try:
        direct = lab_small.ssh(target, "true", check=False, timeout=30)
        assert direct.returncode == 255, "the direct path to the target is still open"

        check = _macfleet(lab_small, "topology", "check", "-i", str(inv), "--json")
        assert check.returncode == 0, check.stdout + check.stderr
        assert not [f for f in json.loads(check.stdout)["findings"] if f["code"] == "unreachable"]

        (tmp_path / "read.yml").write_text(PLAYBOOK)
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o StrictHostKeyChecking=yes"}
        play = subprocess.run(["ansible-playbook", "-i", str(inv), str(tmp_path / "read.yml"), "--limit", target],
                              capture_output=True, text=True, timeout=600, env=env)
        assert play.returncode == 0, play.stdout + play.stderr
        assert "ok=1" in play.stdout

        apply = _macfleet(lab_small, "topology", "apply", "--check", "-i", str(inv))
        assert apply.returncode == 0, apply.stdout + apply.stderr
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", f"{target_addr}/32"], check=False)
    lab_small.wait_ssh(target, timeout=30)
