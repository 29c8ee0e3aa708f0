"""The phases of a coordinated mesh reboot, each one I/O step: read, stop exo, reboot, wait, start exo.

`flow/reboot.py` orders them, times them and verifies between them; nothing here decides. The FileVault
credential is read from a file only its owner may read and reaches `fdesetup authrestart` on stdin as a
property list: never in argv, never in a log, never in an error message.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from xml.sax.saxutils import escape

import paramiko

from macfleet.act.release import LABEL, start_exo, stop_exo
from macfleet.act.transfer import SshArgs, on_nodes, run_remote
from macfleet.collect.commands import CommandSpec, spec_for
from macfleet.collect.gather import gather
from macfleet.collect.ssh import CommandTimeout, SshSession, SshTarget, Unreachable
from macfleet.errors import FactsParseError, MacfleetError, UnreachableError
from macfleet.facts.registry import parse
from macfleet.facts.system import FdesetupFacts
from macfleet.inventory.model import Fleet, Mesh

MAX_CREDENTIAL_BYTES = 4096
# paramiko's transport thread logs every refused handshake of a booting node; the wait reports them itself.
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)
BOOTTIME = CommandSpec("boottime", ("sysctl", "-n", "kern.boottime"), timeout_s=10)
EXO_RUNNING = (f"launchctl print system/{LABEL} 2>/dev/null | grep -q 'state = running' "
               "&& echo running || echo stopped")
Progress = Callable[[str, str, str], None]  # (node, status, detail)


# ------------------------------------------------------------------------------------------- credential


def credential_problem(path: Path | None) -> str | None:
    """None when `path` is a usable credential file, else why not (no secret is read here)."""
    if path is None:
        return "no FileVault credential is stored (macfleet_reboot.filevault_credential_file is not set)"
    try:
        st = path.stat()
    except OSError as exc:
        return f"the credential file {path} cannot be read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"the credential file {path} is not a regular file"
    if st.st_mode & 0o077:
        return f"the credential file {path} is readable by others (mode {st.st_mode & 0o777:o}; make it 0600)"
    if st.st_uid != os.geteuid():
        return f"the credential file {path} belongs to another user (uid {st.st_uid})"
    if st.st_size == 0 or st.st_size > MAX_CREDENTIAL_BYTES:
        return f"the credential file {path} is empty or too large to be a password"
    return None


def authrestart_input(path: Path) -> str:
    """The property list `fdesetup authrestart -inputplist` reads on stdin, with the password from `path`."""
    secret = path.read_text(encoding="utf-8").rstrip("\r\n")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<plist version="1.0"><dict><key>Password</key><string>'
            f"{escape(secret)}</string></dict></plist>\n")


# ------------------------------------------------------------------------------------------------ reads


@dataclass
class BeforeReboot:
    filevault: dict[str, FdesetupFacts | str] = field(default_factory=dict)  # node -> facts or why unread
    boottime: dict[str, str] = field(default_factory=dict)


def read_before(fleet: Fleet, mesh: Mesh, nodes: list[str]) -> BeforeReboot:
    """FileVault and boot time of every node, in one pass; what could not be read says why."""
    fde = spec_for("fdesetup")
    got = gather(fleet, [fleet.node(n) for n in nodes], (fde, BOOTTIME), deadline_s=30)
    out = BeforeReboot()
    for n in nodes:
        if n in got.unreachable:
            out.filevault[n] = f"unreachable: {got.unreachable[n]}"
            continue
        raw = got.outputs.get(n, {}).get(fde.key)
        if raw is None:
            out.filevault[n] = got.failed.get(n, {}).get(fde.key, "no answer")
        else:
            try:
                out.filevault[n] = parse("fdesetup", raw.stdout)
            except FactsParseError as exc:
                out.filevault[n] = exc.message
        boot = got.outputs.get(n, {}).get(BOOTTIME.key)
        if boot is not None and boot.rc == 0:
            out.boottime[n] = boot.stdout.strip()
    return out


def exo_running(fleet: Fleet, nodes: list[str]) -> dict[str, bool]:
    return {n: out.strip().endswith("running")
            for n, out in on_nodes(fleet, nodes, lambda a: run_remote(a, EXO_RUNNING, timeout_s=30)).items()}


def stop_exo_on(fleet: Fleet, nodes: list[str]) -> None:
    if nodes:
        stop_exo(fleet, nodes)


def start_exo_on(fleet: Fleet, nodes: list[str]) -> None:
    if nodes:
        start_exo(fleet, nodes)


# ----------------------------------------------------------------------------------------------- reboot


def issue_reboots(fleet: Fleet, methods: dict[str, str], credential_file: Path | None) -> dict[str, str | None]:
    """Send every node its reboot command at once. node -> None when issued, else why not."""
    secret = authrestart_input(credential_file) if credential_file and "authrestart" in methods.values() else None

    def one(node: str) -> str | None:
        args = SshArgs.for_node(fleet, fleet.node(node))
        try:
            if methods[node] == "authrestart":
                run_remote(args, "sudo -n fdesetup authrestart -inputplist", stdin=secret, timeout_s=60)
            else:
                run_remote(args, "sudo -n shutdown -r now", timeout_s=60)
        except UnreachableError:
            # the connection dropped under the command: the node is going down (it answered the preflight
            # seconds ago); the wait phase tells from its boot time whether it really rebooted
            return None
        except MacfleetError as exc:
            # the secret never reaches the message: only the command line and stderr are in it
            return exc.message
        return None

    with ThreadPoolExecutor(max_workers=max(1, len(methods))) as pool:
        return dict(zip(methods, pool.map(one, methods), strict=True))


@dataclass
class NodeWait:
    back: bool = False
    took_s: float | None = None
    last_seen: str = "not looked at yet"


def _look(target: SshTarget, before: str | None) -> tuple[bool, str]:
    """(back from its reboot, what the node looks like now)."""
    session = SshSession(target)
    try:
        session.connect()
        raw = session.run(BOOTTIME, timeout_s=10)
    except Unreachable as exc:
        return False, f"down: {exc}"
    except CommandTimeout as exc:
        return False, f"answers SSH but not commands: {exc}"
    except (EOFError, OSError, paramiko.SSHException) as exc:  # a node going down or coming up mid-handshake
        return False, f"down: {type(exc).__name__}: {exc}"
    finally:
        session.close()
    now = raw.stdout.strip()
    if raw.rc != 0 or not now:
        return False, f"up, but `sysctl -n kern.boottime` failed: {raw.stderr.strip()[-200:]}"
    if before is not None and now == before:
        return False, "still up: has not gone down yet"
    return True, f"back (booted {now})"


def wait_for_nodes(fleet: Fleet, nodes: list[str], boottime: dict[str, str], timeout_s: float,
                   progress: Progress, cancel: threading.Event | None = None) -> dict[str, NodeWait]:
    """Poll every node until each one answers with a new boot time, or the timeout."""
    started = time.monotonic()
    state = {n: NodeWait() for n in nodes}
    targets = {n: SshTarget.for_node(fleet, fleet.node(n)) for n in nodes}
    targets = {n: replace(t, connect_timeout_s=min(t.connect_timeout_s, 5.0)) for n, t in targets.items()}

    def poll(node: str) -> None:
        while time.monotonic() - started < timeout_s and not (cancel and cancel.is_set()):
            back, seen = _look(targets[node], boottime.get(node))
            if seen != state[node].last_seen:
                progress(node, "back" if back else "waiting", seen)
            state[node].last_seen = seen
            if back:
                state[node].back = True
                state[node].took_s = round(time.monotonic() - started, 1)
                return
            time.sleep(0.5)  # two looks a second per node: each is one TCP connect while the node is down

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        list(pool.map(poll, nodes))
    return state
