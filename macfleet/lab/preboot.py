"""The sshd of a FileVault Mac waiting at its unlock screen: `python -m macfleet.lab.preboot NODE_DIR USER`, run
by the supervisor inside the node's namespace while the node is `locked`.

What it does follows Apple's apple_ssh_and_filevault(7) (Darwin, 1 July 2025; "The capability to unlock the data
volume over SSH appeared in macOS 26 Tahoe"; https://keith.github.io/xcode-man-pages/apple_ssh_and_filevault.7.html):
- "When FileVault is enabled, the data volume is locked ... The macOS version of OpenSSH stores all of its
  configuration files, both system-wide and per-account, in the data volume. Therefore, the usually configured
  authentication methods and shell access are not available during this time": no key login (only `password` is
  offered), no shell, no command, no channel of any kind; and a host key of its own, not the one on the Data
  volume (which key a real Mac shows there is not said: docs/lab.md lists it as a guess).
- "when Remote Login is enabled, it is possible to perform password authentication using SSH even in this
  situation. This can be used to unlock the data volume remotely": the password of the lab's admin (each node's
  own record, checked by the lab's checkpw, as sudo's is) is accepted, and unlocks the node.
- "it does not immediately permit an SSH session. Instead, once the data volume has been unlocked using this
  method, macOS will disconnect SSH briefly while it completes mounting the data volume and starting the
  remaining services dependent on it. Thereafter, SSH (and other enabled services) are fully available": once the
  password is accepted the connection is closed, and the supervisor continues the boot (the node's normal sshd,
  launchd's jobs) after UNLOCK_DROP_S.
A wrong password is refused as OpenSSH refuses one (the client may try again, up to MaxAuthTries).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko

# OpenSSH's defaults, as the node's normal sshd has them (control.SSHD_CONFIG)
MAX_AUTH_TRIES = 6
LOGIN_GRACE_S = 120
# How long SSH is down between the unlock and the node's normal sshd: "briefly" (the man page gives no figure;
# a guess, in docs/lab.md). The supervisor waits this long before it continues the boot.
UNLOCK_DROP_S = 1.0
HOST_KEY = "sshd/preboot_host_ed25519_key"


class _PreBoot(paramiko.ServerInterface):
    def __init__(self, node_dir: Path, user: str):
        self.node_dir, self.user, self.tries = node_dir, user, 0
        self.unlocked = threading.Event()

    def get_allowed_auths(self, username: str) -> str:
        return "password"

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_FAILED

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_FAILED

    def check_auth_password(self, username: str, password: str) -> int:
        self.tries += 1
        if self.tries > MAX_AUTH_TRIES or username != self.user or not _password_ok(self.node_dir, password):
            return paramiko.AUTH_FAILED
        _request_unlock(self.node_dir)
        self.unlocked.set()
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED  # no shell access while the volume is locked


def _password_ok(node_dir: Path, password: str) -> bool:
    """The admin's password against this node's own record, by the lab's checkpw (as sudo's PAM stack does)."""
    checkpw = node_dir.parent.parent / "userland" / "checkpw"
    try:
        p = subprocess.run([str(checkpw), str(node_dir / "admin-password.hash")], input=password.encode() + b"\0",
                           capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def _request_unlock(node_dir: Path) -> None:
    """Ask the supervisor to continue the boot (its request file, as `lab power` writes it)."""
    tmp = node_dir / f".request.{os.getpid()}"
    tmp.write_text(json.dumps({"action": "unlock", "at": time.time()}))
    os.replace(tmp, node_dir / "request")


def _serve(conn: socket.socket, node_dir: Path, user: str, key: paramiko.PKey) -> None:
    transport = paramiko.Transport(conn)
    try:
        transport.add_server_key(key)
        server = _PreBoot(node_dir, user)
        transport.start_server(server=server)
        deadline = time.monotonic() + LOGIN_GRACE_S
        while transport.is_active() and time.monotonic() < deadline:
            if server.unlocked.wait(0.2):
                time.sleep(0.1)  # let the success reach the client, then drop it: the volume is being mounted
                break
    except (paramiko.SSHException, OSError, EOFError):
        pass
    finally:
        transport.close()


def main(node_dir: str, user: str) -> int:
    nd = Path(node_dir)
    key = paramiko.Ed25519Key.from_private_key_file(str(nd / HOST_KEY))
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 22))
    srv.listen(16)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve, args=(conn, nd, user, key), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
