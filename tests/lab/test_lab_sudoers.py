"""macfleet's sudoers drop-in under the node's real sudo: a shell command where Ansible's become id goes is
refused (issue 25 item 12, hostile.md row 18), while Ansible's own become and bootstrap's probe still run."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess

import pytest

from macfleet.flow.bootstrap import BECOME_MARK, BECOME_PROBE
from tests.conftest import ROOT

pytestmark = pytest.mark.lab


def test_a_shell_command_in_the_become_line_is_refused_and_ansible_become_still_works(lab4):
    node = lab4.nodes[0]
    target = f"/tmp/macfleet-sudoers-{secrets.token_hex(4)}"
    attempts = [
        # hostile.md row 18, as the review ran it (it made a setuid-root shell) and as issue 25 quotes it
        f"echo BECOME-SUCCESS-a; cp /bin/sh {target}; chmod 4755 {target} ; /usr/bin/python3",
        f"echo BECOME-SUCCESS-a; cp /bin/sh {target}; chmod 4755 {target}; /usr/bin/python3",
        # an id of Ansible's length with a command after it
        f"echo BECOME-SUCCESS-{'a' * 32} ; cp /bin/sh {target} ; chmod 4755 {target} ; /usr/bin/python3",
    ]
    for line in attempts:
        p = lab4.ssh(node, f"sudo -n /bin/sh -c {shlex.quote(line)} </dev/null", check=False)
        assert p.returncode != 0 and "password is required" in p.stderr, (line, p.stdout, p.stderr)
        assert lab4.ssh(node, f"test -e {target}", check=False).returncode == 1, line

    # bootstrap's own check that sudo runs its probe without a password
    probe = lab4.ssh(node, shlex.join(BECOME_PROBE.argv) + " </dev/null", check=False)
    assert probe.returncode == 0 and BECOME_MARK in probe.stdout, probe.stderr

    # Ansible's become, through our ansible.cfg (pipelining): a module runs as root on every Mac
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    p = subprocess.run(["ansible", "-i", str(lab4.inventory), "macfleet", "--become", "-m", "ansible.builtin.command",
                        "-a", "id -u"], capture_output=True, text=True, env=env, cwd=lab4.workdir, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    as_root = re.findall(r"^(\S+) \| CHANGED \| rc=0 >>\n0$", p.stdout, re.M)  # `id -u` said 0
    assert sorted(as_root) == sorted(lab4.nodes), p.stdout
