"""The phases of a coordinated mesh reboot, each one I/O step: read, stop exo, reboot, wait, start exo.

`flow/reboot.py` orders them, times them and verifies between them; nothing here decides. Every command goes
over the nodes' kept-open sessions (`collect.kept`; watch's own when watch reboots), in parallel: a step
costs one round trip, not one SSH handshake per node. The FileVault
credential is read from a file only its owner may read and reaches `fdesetup authrestart` on stdin as a
property list: never in argv, never in a log, never in an error message.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import paramiko

from macfleet.act.fanout import each_node
from macfleet.act.release import LABEL, START_EXO_LINE, STOP_EXO_LINE
from macfleet.act.transfer import REMOTE_PYTHON
from macfleet.collect.commands import BOOTTIME, CommandSpec, spec_for
from macfleet.collect.gather import Gathered
from macfleet.collect.kept import KeptSession, NodeSessions
from macfleet.collect.ssh import AtUnlockScreen, CommandTimeout, Raw, Unreachable
from macfleet.errors import FactsParseError, RemoteCommandError
from macfleet.facts.registry import parse
from macfleet.facts.system import FdesetupFacts
from macfleet.node import program

MAX_CREDENTIAL_BYTES = 4096
# paramiko's transport thread logs every refused handshake of a booting node; the wait reports them itself.
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)
# exo's LaunchDaemon as launchd sees it: "state = running" in its description while the process runs
EXO_JOB = CommandSpec("exo-job", ("launchctl", "print", f"system/{LABEL}"), timeout_s=30)
PREFLIGHT_SPECS = (spec_for("fdesetup"), BOOTTIME, EXO_JOB)  # what a reboot reads before anything changes
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
    exo_running: dict[str, bool] = field(default_factory=dict)  # only the nodes where it could be read


def read_before(sessions: NodeSessions, nodes: list[str]) -> BeforeReboot:
    """FileVault, boot time and exo's job on every node, in one pass; what could not be read says why."""
    return before_from(sessions.gather(PREFLIGHT_SPECS, deadline_s=30, nodes=nodes), nodes)


def before_from(got: Gathered, nodes: list[str]) -> BeforeReboot:
    """The same from a pass that read PREFLIGHT_SPECS among others (watch's probe just before it reboots)."""
    fde = PREFLIGHT_SPECS[0]
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
        job = got.outputs.get(n, {}).get(EXO_JOB.key)
        if job is not None:  # a job launchd does not know exits non-zero: not running
            out.exo_running[n] = job.rc == 0 and "state = running" in job.stdout
    return out


def on_sessions(sessions: NodeSessions, nodes: list[str], line: str, timeout_s: float = 60) -> dict[str, Raw]:
    """One command line on every node at once over its kept session; RemoteCommandError for a non-zero exit,
    the unreachable nodes gathered into one UnreachableError (raised after every node answered)."""
    spec = CommandSpec("reboot-step", ("sh", "-c", line), timeout_s=timeout_s)

    def one(node: str) -> Raw:
        try:
            return sessions.get(node).run_line(line, timeout_s=timeout_s, spec=spec)
        except CommandTimeout:
            return Raw(stdout="", stderr=f"no answer within {timeout_s:g} s", rc=-1, took_s=timeout_s)

    results: dict[str, Raw] = each_node(nodes, one, parallel=max(1, len(nodes)))  # type: ignore[assignment]
    bad = next(((n, r) for n, r in results.items() if r.rc != 0), None)
    if bad is not None:
        raise RemoteCommandError(bad[0], line[:200], bad[1].rc, bad[1].stderr)
    return results


# How long exo gets to end its runners itself once asked (SIGTERM) before the ones left get SIGKILL: longer than
# exo's own escalation on its runners (3 s, SIGTERM, 9 retries 2 s apart, SIGKILL: exo b5375f8
# src/exo/utils/async_process.py:32-36,206-235, about 28 s), so exo releases the RDMA device its own way first.
EXO_STOP_GRACE_S = 45.0
# A runner still there this long after exo was asked ignored the request: exo waits 3 s for it, then SIGTERMs it and
# waits 5 s (async_process.py:32-33); past that, exo is repeating SIGTERM or killing it.
RUNNER_LATE_S = 8.0
_STOP_PROGRAM = program("exo_stop")  # node program: SIGTERM, wait, SIGKILL what is left, report (argv LABEL GRACE_S)
UNINTERRUPTIBLE = "U"  # ps(1) on macOS: "U  Marks a process in uninterruptible wait"


@dataclass
class ExoStop:
    """How exo stopped on one node: what was asked to exit, what did not when asked, what survived SIGKILL."""

    pid: int | None = None  # exo's daemon, None: it was not running
    took_s: float = 0.0
    asked: list[dict] = field(default_factory=list)  # {pid, command, state}
    late: list[dict] = field(default_factory=list)  # {pid, command, state, exited_s}: ended only past RUNNER_LATE_S
    ignored_term: list[dict] = field(default_factory=list)
    survived_kill: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def stopped(self) -> bool:
        """exo is gone: nothing survived SIGKILL, and the stop program reported."""
        return not self.survived_kill and self.error is None

    def holdouts(self) -> list[str]:
        """One sentence per process that did not exit when asked (empty when exo stopped cleanly)."""
        out = [f"pid {p['pid']} ({p['command'][:80]}) ignored SIGTERM: it ended only {p['exited_s']:g} s after exo "
               "was asked to stop (exo killed it)" for p in self.late]
        for p in self.ignored_term:
            stuck = next((s for s in self.survived_kill if s["pid"] == p["pid"]), None)
            what = f"pid {p['pid']} ({p['command'][:80]}, state {p['state']}) did not exit on SIGTERM"
            if stuck is None:
                out.append(f"{what}: killed (SIGKILL)")
            elif stuck["state"].startswith(UNINTERRUPTIBLE):
                out.append(f"{what} and is still there after SIGKILL in state {stuck['state']} (uninterruptible "
                           "wait: it holds the RDMA device; only a reboot frees it, and the shutdown may be slow)")
            else:
                out.append(f"{what} and is still there after SIGKILL (state {stuck['state']})")
        if self.error:
            out.append(self.error)
        return out


def stop_exo_line(grace_s: float = EXO_STOP_GRACE_S) -> str:
    """Ask exo to stop (the node program), then boot its job out (unloads it: KeepAlive cannot start it again)."""
    argv = [REMOTE_PYTHON, "-c", _STOP_PROGRAM, LABEL, f"{grace_s:g}", f"{RUNNER_LATE_S:g}"]
    return f"{shlex.join(argv)}; {STOP_EXO_LINE}"


def exo_stop_from(stdout: str) -> ExoStop:
    """The node program's JSON line; a reply that is not one is said so, never taken for a clean stop."""
    lines = [x for x in stdout.splitlines() if x.startswith("{")]
    try:
        data = json.loads(lines[-1])
        return ExoStop(pid=data["pid"], took_s=float(data.get("took_s", 0.0)), asked=list(data.get("asked", [])),
                       late=list(data.get("late", [])), ignored_term=list(data["ignored_term"]),
                       survived_kill=list(data["survived_kill"]), error=data.get("error"))
    except (IndexError, ValueError, KeyError, TypeError):
        return ExoStop(error=f"the stop program gave no report: {stdout.strip()[-200:]!r}")


def stop_exo_on(sessions: NodeSessions, nodes: list[str], grace_s: float = EXO_STOP_GRACE_S) -> dict[str, ExoStop]:
    """Stop exo on every node at once, asking first; node -> how it went."""
    if not nodes:
        return {}
    got = on_sessions(sessions, nodes, stop_exo_line(grace_s), timeout_s=grace_s + 60)
    return {n: exo_stop_from(r.stdout) for n, r in got.items()}


def start_exo_on(sessions: NodeSessions, nodes: list[str]) -> None:
    if nodes:
        on_sessions(sessions, nodes, START_EXO_LINE)


# ----------------------------------------------------------------------------------------------- reboot


def _send_reboot(kept: KeptSession, command: str, stdin: str | None, timeout_s: float = 60) -> str | None:
    """Run the reboot command over the node's session; None once issued (its exit 0, or the connection
    dropping under it: the node is going down), else why not. The secret only ever goes to the channel.
    `timeout_s`: how long the command may run before it says (an update's install runs for minutes)."""
    try:
        transport = kept.get().client.get_transport()
        if transport is None:
            raise Unreachable("no connection")
        channel = transport.open_session(timeout=10)
    except (Unreachable, paramiko.SSHException, OSError, EOFError) as exc:
        return f"could not reach it to reboot it: {exc}"
    try:
        channel.exec_command(command)
        if stdin is not None:
            channel.sendall(stdin.encode())
        channel.shutdown_write()
        if not channel.status_event.wait(timeout_s):
            return f"`{command}` gave no answer within {timeout_s:g} s"
        rc = channel.recv_exit_status()
        err = channel.recv_stderr(4096).decode("utf-8", errors="replace") if channel.recv_stderr_ready() else ""
    except (paramiko.SSHException, OSError, EOFError):
        return None  # the connection dropped under the command: the node is going down
    finally:
        channel.close()
    if rc == -1:  # the session closed without an exit status: the node went down under it
        return None
    return None if rc == 0 else f"`{command}` exited {rc}: {err.strip()[-300:]}"


def issue_reboots(sessions: NodeSessions, methods: dict[str, str], credential_file: Path | None
                  ) -> dict[str, str | None]:
    """Send every node its reboot command at once. node -> None when issued, else why not."""
    secret = authrestart_input(credential_file) if credential_file and "authrestart" in methods.values() else None

    def one(node: str) -> str | None:
        if methods[node] == "authrestart":
            return _send_reboot(sessions.sessions[node], "sudo -n fdesetup authrestart -inputplist", secret)
        return _send_reboot(sessions.sessions[node], "sudo -n shutdown -r now", None)

    with ThreadPoolExecutor(max_workers=max(1, len(methods))) as pool:
        return dict(zip(methods, pool.map(one, methods), strict=True))


def run_with_secret(sessions: NodeSessions, node: str, command: str, stdin: str, timeout_s: float) -> str | None:
    """A command with its secret on stdin, which may end with the node going down (an update installed with
    --restart): None once it exited 0 or the node went down under it, else why not (its exit and the end of its
    stderr, never the secret)."""
    return _send_reboot(sessions.sessions[node], command, stdin, timeout_s)


# What a node that is not back looks like, by its last look (NodeWait.state):
SHUTTING_DOWN = "still shutting down"  # it still answers SSH with its old boot time
STACK_ONLY = "down, its network answers"  # the SSH port refuses: the Mac's network stack runs, sshd does not
SILENT = "answers nothing"  # no SSH, no refusal: hung, or switched off
NO_COMMANDS = "answers SSH but not commands"
AT_UNLOCK = "waiting at the FileVault unlock screen"


@dataclass
class NodeWait:
    back: bool = False
    took_s: float | None = None
    last_seen: str = "not looked at yet"
    state: str = ""  # one of the states above while not back ("" once back)
    went_down: bool = False  # seen down at least once since the reboot was issued

    def verdict(self, node: str) -> str:
        """For a node that did not come back in time: what it is doing, and what a person does about it."""
        cycle = (f"power-cycle {node}: hold its power button until it switches off (about 10 s), press it again, "
                 "then run `macfleet reboot` again to finish")
        if self.state == AT_UNLOCK:
            return (f"{node} is {AT_UNLOCK}: `macfleet unlock {node} --password-file FILE`, or type the password "
                    "at the Mac")
        if self.state == SHUTTING_DOWN:
            return (f"{node} is {SHUTTING_DOWN} (it never went down: a process stuck holding the RDMA device can "
                    f"stall a Mac's shutdown); {cycle}")
        if self.state == SILENT:
            return f"{node} {'went down and ' if self.went_down else ''}{SILENT} (still booting, hung, or off); {cycle}"
        return f"{node}: {self.state or self.last_seen}; {cycle}"


def _state_of(look: bool | str, seen: str) -> str:
    if look == UNLOCK_SCREEN:
        return AT_UNLOCK
    if seen.startswith("still up"):
        return SHUTTING_DOWN
    if seen.startswith("answers SSH"):
        return NO_COMMANDS
    if seen.startswith("down: Connection refused"):
        return STACK_ONLY
    if seen.startswith("down"):
        return SILENT
    return seen


# A look at a node coming back: its SSH port first (a refused or unanswered connect costs nothing), then the
# full login and its boot time. Looks start close together and spread out to POLL_MAX_S.
POLL_FIRST_S = 0.05
POLL_MAX_S = 0.25
PORT_TIMEOUT_S = 0.5
LOOK_TIMEOUT_S = 5.0


def _port_answers(host: str, port: int) -> str | None:
    """None when an SSH server greets on host:port, else what happened."""
    try:
        with socket.create_connection((host, port), timeout=PORT_TIMEOUT_S) as s:
            s.settimeout(2.0)
            return None if s.recv(64).startswith(b"SSH-") else "the SSH port answers but not with SSH"
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


UNLOCK_SCREEN = "unlock-screen"  # what _look says of a node waiting at its FileVault unlock screen


def _look(kept: KeptSession, before: str | None) -> tuple[bool | str, str]:
    """(back from its reboot, or UNLOCK_SCREEN; what the node looks like now). The session that sees it back
    stays open. A node showing its recorded unlock-screen key is up, waiting for its FileVault password
    (apple_ssh_and_filevault(7)): neither down nor an intruder."""
    t = kept.target
    if not kept.alive() and not t.jumps and not t.proxy_command:
        why = _port_answers(t.host, t.port)
        if why is not None:
            return False, f"down: {why}"
    try:
        raw = kept.get(now=True).run(BOOTTIME, timeout_s=LOOK_TIMEOUT_S)
    except AtUnlockScreen as exc:
        kept.drop()
        return UNLOCK_SCREEN, str(exc)
    except Unreachable as exc:
        kept.drop()
        return False, f"down: {exc}"
    except CommandTimeout as exc:
        kept.drop()
        return False, f"answers SSH but not commands: {exc}"
    except (EOFError, OSError, paramiko.SSHException) as exc:  # a node going down or coming up mid-handshake
        kept.drop()
        return False, f"down: {type(exc).__name__}: {exc}"
    now = raw.stdout.strip()
    if raw.rc != 0 or not now:
        return False, f"up, but `sysctl -n kern.boottime` failed: {raw.stderr.strip()[-200:]}"
    if before is not None and now == before:
        return False, "still up: has not gone down yet"
    return True, f"back (booted {now})"


def wait_for_nodes(sessions: NodeSessions, nodes: list[str], boottime: dict[str, str], timeout_s: float,
                   progress: Progress, cancel: threading.Event | None = None,
                   on_back: Callable[[str], None] | None = None,
                   unlock: Callable[[str], tuple[bool, str]] | None = None) -> dict[str, NodeWait]:
    """Poll every node until each one answers with a new boot time, or the timeout. `on_back(node)` runs as
    soon as that node is back (the next step may start on it while the others still boot). `unlock(node)`:
    called once for a node found waiting at its FileVault unlock screen ((sent, what happened)); without it, or
    once it failed, the node is left there and waited for (someone may unlock it at the console)."""
    started = time.monotonic()
    state = {n: NodeWait() for n in nodes}

    def poll(node: str) -> None:
        pause = POLL_FIRST_S
        tried = False
        while time.monotonic() - started < timeout_s and not (cancel and cancel.is_set()):
            look, seen = _look(sessions.sessions[node], boottime.get(node))
            back = look is True
            if look == UNLOCK_SCREEN and unlock is not None and not tried:
                tried = True
                _, what = unlock(node)
                seen = f"{seen}; unlocking with the stored password: {what}"
            if seen != state[node].last_seen:
                progress(node, "back" if back else "waiting", seen)
            state[node].last_seen = seen
            state[node].state = "" if back else _state_of(look, seen)
            state[node].went_down |= seen.startswith("down")
            if back:
                state[node].back = True
                state[node].took_s = round(time.monotonic() - started, 1)
                if on_back is not None:
                    on_back(node)
                return
            time.sleep(pause)
            pause = min(POLL_MAX_S, pause * 1.5)

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        list(pool.map(poll, nodes))
    return state
