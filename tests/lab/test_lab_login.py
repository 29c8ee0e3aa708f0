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

from tests.lab.conftest import Lab

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


def _behind_the_jump(lab: Lab, tmp_path: Path) -> tuple[Path, str, str]:
    """A copy of the lab's inventory where the second node is reached through the first (`-F FILE -J`): the
    inventory, the node behind the jump host, its address (the caller blackholes it)."""
    truth = lab.truth()
    jump, target = lab.nodes[0], lab.nodes[1]
    jump_addr, target_addr = truth["nodes"][jump]["address"], truth["nodes"][target]["address"]
    inv = tmp_path / "it's a dir" / "inv"
    shutil.copytree(lab.inventory, inv)
    # OpenSSH hands -F (and only -F) on to the jump host's ssh, inside a shell command: keep that path plain.
    config = tmp_path / "ssh_config"
    config.write_text(f'Host *\n  IdentityFile "{inv}/id_ed25519"\n  UserKnownHostsFile "{inv}/known_hosts"\n'
                      "  StrictHostKeyChecking yes\n")
    hosts = inv / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    entry = next(m["hosts"][target] for m in data["macfleet"]["children"].values() if target in m["hosts"])
    entry["ansible_ssh_extra_args"] = f"-F {config} -J {truth['user']}@{jump_addr}"
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))
    return inv, target, target_addr


def test_a_node_behind_a_jump_host_from_a_path_with_a_space_and_a_quote(lab_small: Lab, tmp_path: Path) -> None:
    inv, target, target_addr = _behind_the_jump(lab_small, tmp_path)
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


def test_doctor_and_a_model_push_reach_a_node_only_through_its_jump_host(
        lab_small: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One login for every SSH use (issue 26 item 2): doctor (paramiko) and `rollout model` (OpenSSH ssh and
    rsync: the feed to the seed, a session per node) reach the node behind the jump host the same way, from the
    same inventory; on main the push could not (its ssh followed neither -J nor the -F file)."""
    inv, target, target_addr = _behind_the_jump(lab_small, tmp_path)
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}\n')
    (model / "model-00001-of-00001.safetensors").write_bytes(os.urandom(300_000))
    subprocess.run(["ip", "route", "add", "blackhole", f"{target_addr}/32"], check=True)
    try:
        assert lab_small.ssh(target, "true", check=False, timeout=30).returncode == 255, "the direct path is open"
        doctor = _macfleet(lab_small, "doctor", "-i", str(inv), "--only", "reachable", "--json")
        checks = json.loads(doctor.stdout)["checks"]
        assert {"check": "reachable", "node": target, "result": "ok"} in checks, doctor.stdout + doctor.stderr
        # the node behind the jump host alone (the feed from the controller and its session go through the jump
        # host), then both (the other node fed; the first one's preflight says it has it all)
        for nodes in ([target], []):
            push = _macfleet(lab_small, "rollout", "model", "test-org/jumped", "--from", str(model), "-i", str(inv),
                             *[w for n in nodes for w in ("--nodes", n)], "--json")
            assert push.returncode == 0, push.stdout + push.stderr
            assert json.loads(push.stdout)["result"] == "pushed", push.stdout
        verify = _macfleet(lab_small, "rollout", "model", "test-org/jumped", "--from", str(model), "-i", str(inv),
                           "--verify", "--json")
        assert verify.returncode == 0 and json.loads(verify.stdout)["differ"] == {}, verify.stdout + verify.stderr
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", f"{target_addr}/32"], check=False)
        lab_small.wait_ssh(target, timeout=30)
        for n in lab_small.nodes:
            lab_small.ssh(n, "rm -rf ~/.exo/models/test-org--jumped ~/.exo/models/.macfleet-staging", check=False)


def test_reboot_reaches_a_node_only_through_its_jump_host(
        lab_small: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`macfleet reboot` of the mesh whose second node answers only through the first (issue 26's last piece of
    one login): the preflight, the reboot, the wait (the jump host reboots too: the node behind it is out of reach
    until both are back), the verification (the catalogue's checks over the kept sessions) all go through it."""
    inv, target, target_addr = _behind_the_jump(lab_small, tmp_path)
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    before = {n: lab_small.ssh(n, "sysctl -n kern.boottime").stdout for n in lab_small.nodes}
    subprocess.run(["ip", "route", "add", "blackhole", f"{target_addr}/32"], check=True)
    try:
        assert lab_small.ssh(target, "true", check=False, timeout=30).returncode == 255, "the direct path is open"
        p = _macfleet(lab_small, "reboot", "-i", str(inv), "--reason", "jump host test", "--json")
        out = json.loads(p.stdout)
        assert p.returncode == 0 and out["result"] == "ok", p.stdout + p.stderr
        assert all(out["nodes"][n]["back"] for n in lab_small.nodes), out["nodes"]
        assert [ph["name"] for ph in out["phases"] if not ph["ok"]] == [], out["phases"]
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", f"{target_addr}/32"], check=False)
        for n in lab_small.nodes:
            lab_small.wait_state(n, {"up"}, timeout=120)
            lab_small.wait_ssh(n, timeout=60)
    after = {n: lab_small.ssh(n, "sysctl -n kern.boottime").stdout for n in lab_small.nodes}
    assert all(after[n] != before[n] for n in lab_small.nodes), (before, after)
