"""Unlock a FileVault Mac waiting at its unlock screen over SSH (macOS 26), and see where a node stands.

apple_ssh_and_filevault(7) (Darwin, 1 July 2025; https://keith.github.io/xcode-man-pages/apple_ssh_and_filevault.7.html):
with Remote Login on, a FileVault Mac whose Data volume is locked answers SSH with password authentication only
(its OpenSSH configuration and every account's keys are on that volume); a password login there unlocks the
volume, "does not immediately permit an SSH session", and "macOS will disconnect SSH briefly while it completes
mounting the data volume and starting the remaining services dependent on it. Thereafter, SSH ... [is] fully
available". So: the host key is checked strictly against the node's recorded unlock-screen key (never a blind
accept), the password is sent once, no session is asked for, and whatever the server does next (a success, or
the connection dropped under it) the node is then waited for with its normal key. A password refused outright
is a failure. The password only ever goes to the authenticated, key-checked transport: never argv, never a log,
never an error message.
"""

from __future__ import annotations

import getpass
import logging
import socket
from dataclasses import dataclass

import paramiko

from macfleet.collect.ssh import SshTarget, fingerprint, host_entry, key_recorded, unlock_key_matches
from macfleet.errors import AT_UNLOCK_SCREEN

# paramiko's transport thread logs a dropped connection; the caller reports what happened itself
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class Seen:
    """Which SSH a node answers with now."""

    state: str  # unlock-screen | normal | unknown-key | unreachable
    detail: str
    fingerprint: str | None = None


def _entry(target: SshTarget) -> str:
    return host_entry(target.host, target.port)


def _connect(target: SshTarget) -> paramiko.Transport:
    sock = socket.create_connection((target.host, target.port), timeout=target.connect_timeout_s)
    transport = paramiko.Transport(sock)
    transport.banner_timeout = target.connect_timeout_s
    try:
        transport.start_client(timeout=target.connect_timeout_s)
    except BaseException:
        transport.close()
        raise
    return transport


def _judge_key(target: SshTarget, key: paramiko.PKey) -> Seen:
    fp = fingerprint(key)
    if key_recorded(target.known_hosts, _entry(target), key):
        return Seen("normal", "up with its normal host key: not locked", fp)
    if unlock_key_matches(target.unlock_known_hosts, _entry(target), key):
        return Seen("unlock-screen", f"{AT_UNLOCK_SCREEN} (its unlock-screen key {fp})", fp)
    return Seen("unknown-key", f"shows a host key that is neither its known key nor its recorded unlock-screen key "
                               f"({fp}): either it was reinstalled or someone is in between; nothing was sent. If its "
                               f"console shows the unlock screen, record that key with `macfleet trust --unlock "
                               f"{target.node}`", fp)


def look(target: SshTarget) -> Seen:
    """The host key the node shows now (key exchange only, nothing sent), judged against both recorded keys."""
    try:
        transport = _connect(target)
    except (OSError, paramiko.SSHException, EOFError) as exc:
        return Seen("unreachable", f"cannot connect to {_entry(target)}: {getattr(exc, 'strerror', None) or exc}")
    try:
        return _judge_key(target, transport.get_remote_server_key())
    finally:
        transport.close()


def send_password(target: SshTarget, password: str) -> tuple[bool, str]:
    """Log in with the password at the unlock screen: (sent and not refused, what happened). The key is checked
    against the unlock-screen key first; any other key gets nothing."""
    try:
        transport = _connect(target)
    except (OSError, paramiko.SSHException, EOFError) as exc:
        return False, f"cannot connect to {_entry(target)}: {getattr(exc, 'strerror', None) or exc}"
    try:
        seen = _judge_key(target, transport.get_remote_server_key())
        if seen.state != "unlock-screen":
            return False, f"not unlocked: {seen.detail}"
        try:
            transport.auth_password(target.user or getpass.getuser(), password)
        except paramiko.BadAuthenticationType as exc:
            return False, f"the unlock screen does not take a password (it offers {', '.join(exc.allowed_types)})"
        except paramiko.AuthenticationException:
            return False, "the unlock screen refused the password (is it a FileVault-enabled user's, for that user?)"
        except (paramiko.SSHException, OSError, EOFError):
            return True, "password sent; the node dropped the connection (as it does while it unlocks)"
        return True, "password accepted; the node disconnects while it mounts its Data volume"
    finally:
        transport.close()
