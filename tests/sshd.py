"""A real OpenSSH server on 127.0.0.1 for tests of our SSH and Ansible layers (no lab needed).

It serves the current user (root in CI) with a generated key, and writes an inventory whose
known_hosts holds the server's real host key, so strict host-key checking stays on.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def available() -> bool:
    return os.geteuid() == 0 and Path(SSHD).exists() and shutil.which("ssh-keygen") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalSshd:
    port: int
    inventory: Path
    process: subprocess.Popen
    host_key_pub: str

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def start(tmp: Path, nodes: tuple[str, ...] = ("node-1",)) -> LocalSshd:
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "host_key")], check=True)
    inv = tmp / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(inv / "id_ed25519")], check=True)
    (tmp / "authorized_keys").write_text((inv / "id_ed25519.pub").read_text())
    port = _free_port()
    # one loopback address per node (127.0.0.1, 127.0.0.2...): the inventory refuses two hosts at one address
    addresses = [f"127.0.0.{i + 1}" for i in range(len(nodes))]
    config = tmp / "sshd_config"
    listen = "".join(f"ListenAddress {a}\n" for a in addresses)
    config.write_text(
        f"Port {port}\n{listen}HostKey {tmp / 'host_key'}\nPidFile {tmp / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        # macOS's limits (OpenSSH's defaults): 10 channels per connection, 10 unauthenticated connections.
        "MaxSessions 10\nMaxStartups 10:30:100\nAllowTcpForwarding yes\n"
        "AcceptEnv LANG LC_*\nSubsystem sftp internal-sftp\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    waiting = list(addresses)
    while waiting:  # poll until it accepts connections on every address
        try:
            with socket.create_connection((waiting[0], port), timeout=0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    waiting.pop(0)
                    continue
        except OSError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError("sshd did not start")
        time.sleep(0.05)
    pub = (tmp / "host_key.pub").read_text().split()
    (inv / "known_hosts").write_text("".join(f"[{a}]:{port} {pub[0]} {pub[1]}\n" for a in addresses))
    user = os.environ.get("USER") or "root"
    hosts = "".join(
        f"        {n}:\n"
        f"          ansible_host: {a}\n          ansible_port: {port}\n          ansible_user: {user}\n"
        for n, a in zip(nodes, addresses, strict=True)
    )
    (inv / "hosts.yml").write_text(f"macfleet:\n  children:\n    mesh1:\n      hosts:\n{hosts}")
    (inv / "group_vars" / "all" / "macfleet.yml").write_text(
        "macfleet_ssh:\n  private_key_file: id_ed25519\n  known_hosts_file: known_hosts\n  connect_timeout_s: 5\n"
    )
    (inv / "group_vars" / "all" / "ansible.yml").write_text(
        'ansible_ssh_private_key_file: "{{ inventory_dir }}/id_ed25519"\n'
        "ansible_ssh_common_args: >-\n"
        "  -o {{ ('UserKnownHostsFile=\"' ~ inventory_dir ~ '/known_hosts\"') | quote }}\n"
        "  -o StrictHostKeyChecking=yes\n"
        "ansible_python_interpreter: /usr/bin/python3\n"
    )
    return LocalSshd(port=port, inventory=inv, process=process, host_key_pub=" ".join(pub[:2]))
