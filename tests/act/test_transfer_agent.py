"""The push's private ssh-agent dies with the push, also when the push is killed with SIGKILL (issue 25 item 13):
real ssh-agent, real ssh-add, a real kill -9."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_INVENTORY

pytestmark = pytest.mark.skipif(shutil.which("ssh-agent") is None or not Path("/proc/self").exists(),
                                reason="needs OpenSSH's ssh-agent and /proc")

PUSH = r"""
import sys, time
from pathlib import Path
from macfleet.act import transfer
from macfleet.inventory.load import load_inventory
fleet = load_inventory(Path(sys.argv[1]))
with transfer.transfer_agent(fleet, fleet.node("studio-1")) as env:
    print(env["SSH_AUTH_SOCK"], flush=True)
    time.sleep(300)
"""


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(inv / "id_ed25519")], check=True)
    (inv / "group_vars" / "all" / "ssh.yml").write_text("macfleet_ssh:\n  private_key_file: id_ed25519\n"
                                                        "  known_hosts_file: known_hosts\n")
    return inv


def _holding(sock: str) -> list[int]:
    """The live processes whose command line names the agent's socket (the agent itself)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"ssh-agent") and sock.encode() in cmd and state != "Z":
            out.append(int(d.name))
    return out


def test_the_agent_dies_with_a_push_killed_by_sigkill(tmp_path) -> None:
    inv = _inventory(tmp_path)
    push = subprocess.Popen([sys.executable, "-c", PUSH, str(inv)], stdout=subprocess.PIPE, text=True)
    try:
        assert push.stdout is not None
        sock = push.stdout.readline().strip()
        assert sock, "the agent did not start"
        listed = subprocess.run(["ssh-add", "-l"], env={**os.environ, "SSH_AUTH_SOCK": sock}, capture_output=True,
                                text=True, timeout=10)
        assert listed.returncode == 0 and "ED25519" in listed.stdout  # the inventory's key, loaded
        assert _holding(sock)
    finally:
        push.send_signal(signal.SIGKILL)
        push.wait()
    deadline = time.monotonic() + 15
    while _holding(sock) or Path(sock).exists():
        assert time.monotonic() < deadline, f"ssh-agent still runs after kill -9 of the push: {_holding(sock)}"
        time.sleep(0.05)
    gone = subprocess.run(["ssh-add", "-l"], env={**os.environ, "SSH_AUTH_SOCK": sock}, capture_output=True,
                          text=True, timeout=10)
    assert gone.returncode == 2  # "Could not open a connection to your authentication agent"


def test_the_agent_ends_with_the_push(tmp_path) -> None:
    from macfleet.act import transfer
    from macfleet.inventory.load import load_inventory

    fleet = load_inventory(_inventory(tmp_path))
    with transfer.transfer_agent(fleet, fleet.node("studio-1")) as env:
        sock = env["SSH_AUTH_SOCK"]
        assert _holding(sock)
    deadline = time.monotonic() + 10
    while _holding(sock):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not Path(sock).parent.exists()
