"""A launchd stand-in: `launchctl bootstrap/bootout/kickstart/print/list/load/unload/enable/disable/print-disabled`
over real plists in
the node's /Library/LaunchDaemons and ~/Library/LaunchAgents, running real processes in the node.

Loaded jobs live in run/jobs.json (label -> {domain, plist, pid, keep_alive, last_exit}); a reboot forgets
them, and the node's boot (init.py) loads every plist in those folders and starts the RunAtLoad ones.
Messages follow launchctl's ("Bootstrap failed: 5: Input/output error" for an already loaded job,
"Boot-out failed: 3: No such process", "Could not find service ... in domain for ...", exit 113).
"""

from __future__ import annotations

import os
import pwd
import sys
import time

from .common import Node, err, is_root

# plistlib, pathlib, signal and contextlib are imported where they are used: their imports cost more than a
# `launchctl print` or `list` does
DAEMONS = "/Library/LaunchDaemons"


def agents_dir(user: str):
    from pathlib import Path

    return Path(pwd.getpwnam(user).pw_dir) / "Library" / "LaunchAgents"


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, IndexError):
        return False


def load_plist(path: str) -> dict:
    import plistlib

    with open(path, "rb") as f:
        return plistlib.load(f)


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - a job's ProgramArguments, UserName, EnvironmentVariables, WorkingDirectory, StandardOutPath/ErrorPath:
#   launchd.plist(5)
def spawn(job: dict, domain: str) -> int:
    """Start the job's program detached (double fork), as its user; returns the pid."""
    argv = job.get("ProgramArguments") or [job["Program"]]
    program = job.get("Program") or argv[0]
    user = job.get("UserName")
    uid = None
    if domain.startswith(("gui/", "user/")):
        uid = int(domain.split("/", 1)[1])
    elif user:
        uid = pwd.getpwnam(user).pw_uid
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setsid()
            pid2 = os.fork()
            if pid2:
                os.write(w, str(pid2).encode())
                os._exit(0)
            os.close(w)
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:/opt/homebrew/bin"}
            if uid is not None and os.geteuid() == 0 and uid != 0:
                pw = pwd.getpwuid(uid)
                os.initgroups(pw.pw_name, pw.pw_gid)
                os.setgid(pw.pw_gid)
                os.setuid(uid)
            pw = pwd.getpwuid(os.geteuid())
            env.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name, SHELL=pw.pw_shell)
            env.update({str(k): str(v) for k, v in (job.get("EnvironmentVariables") or {}).items()})
            os.chdir(job.get("WorkingDirectory") or "/")
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            out = job.get("StandardOutPath")
            errp = job.get("StandardErrorPath")
            fo = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if out else devnull
            fe = os.open(errp, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if errp else devnull
            os.dup2(fo, 1)
            os.dup2(fe, 2)
            os.execvpe(program, argv, env)
        except BaseException:
            os._exit(127)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 64)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return int(data or b"0")


def load_job(node: Node, domain: str, path: str, *, start: bool | None = None) -> tuple[int, str]:
    """Bootstrap one plist into domain; returns (rc, message)."""
    try:
        job = load_plist(path)
        label = job["Label"]
    except (OSError, KeyError, ValueError):  # a plist that does not parse: plistlib.InvalidFileException(ValueError)
        return 5, "Bootstrap failed: 5: Input/output error"
    jobs = node.jobs
    if label in jobs:
        return 5, "Bootstrap failed: 5: Input/output error"
    if domain == "system" and label in disabled_labels(node):
        return 119, "Bootstrap failed: 119: Service is disabled"  # launchctl(1) disable; the text is a guess
    run_now = job.get("RunAtLoad", False) or job.get("KeepAlive", False) if start is None else start
    pid = spawn(job, domain) if run_now else None
    entry = {
        "domain": domain,
        "plist": str(path),
        "pid": pid,
        "keep_alive": bool(job.get("KeepAlive", False)),
        "last_exit": None,
        "started": time.time() if pid else None,
        "runs": 1 if pid else 0,
    }
    node.update("jobs", lambda d: d.__setitem__(label, entry))
    return 0, ""


# - when a job's process ends, what is left of its process group is killed (AbandonProcessGroup false, the
#   default): launchd.plist(5); the signal used: GUESS (SIGKILL)
def stop(pid: int | None, timeout: float = 3.0) -> None:
    import contextlib
    import signal

    if not alive(pid):
        return
    try:
        group = os.getpgid(pid)
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _target(spec: str) -> tuple[str, str]:
    domain, _, label = spec.rpartition("/")
    return domain, label


def _domain_ok(domain: str) -> bool:
    if domain == "system":
        return is_root()
    if domain.startswith(("gui/", "user/")):
        try:
            uid = int(domain.split("/", 1)[1])
        except ValueError:
            return False
        return is_root() or uid == os.geteuid()
    return False


def _state(entry: dict) -> str:
    return "running" if alive(entry.get("pid")) else "not running"


# - `bootstrap|load DOMAIN PLIST`, RunAtLoad starting it: launchctl(1), launchd.plist(5); the messages
#   (`Bootstrap failed: 5: Input/output error` for a loaded job): GUESS (widely quoted, no capture here)
def _bootstrap(node: Node, sub: str, rest: list[str]) -> int:
    if sub == "load":
        paths = [a for a in rest if not a.startswith("-")]
        domain = "system" if is_root() else f"gui/{os.geteuid()}"
    else:
        if len(rest) < 2:
            err("Usage: launchctl bootstrap <domain-target> [service-path, service-path2, ...]")
            return 64
        domain, paths = rest[0], rest[1:]
    if not _domain_ok(domain):
        err("Bootstrap failed: 1: Operation not permitted")
        return 1
    for p in paths:
        rc, msg = load_job(node, domain, p)
        if rc:
            err(msg)
            return rc
    return 0


# - `bootout DOMAIN/LABEL`: launchctl(1); `Boot-out failed: 3: No such process`: GUESS (widely quoted)
def _bootout(node: Node, sub: str, rest: list[str]) -> int:
    jobs: dict = node.jobs
    labels = []
    if sub == "bootout" and len(rest) == 1:
        labels = [_target(rest[0])[1]]
    else:
        for p in [a for a in rest if not a.startswith("-")]:
            if p.endswith(".plist") or ("/" in p and os.path.exists(p)):
                import plistlib
                from pathlib import Path

                try:
                    labels.append(load_plist(p)["Label"])
                except (OSError, KeyError, plistlib.InvalidFileException):
                    labels.append(Path(p).stem)
            else:
                labels.append(p)
    rc = 0
    for label in labels:
        entry = jobs.get(label)
        if entry is None:
            err("Boot-out failed: 3: No such process")
            rc = 3
            continue
        if not _domain_ok(entry["domain"]):
            err("Boot-out failed: 1: Operation not permitted")
            return 1
        node.update("jobs", lambda d, lb=label: d.pop(lb, None))  # first: no KeepAlive restart after this
        stop(entry.get("pid"))
    return rc


# - `kickstart [-k] DOMAIN/LABEL`: launchctl(1); `Could not find service "…" in domain for system`, exit 113:
#   reported from Macs for kickstart (DeterminateSystems/nix-installer#960) and for print, after "Bad request."
#   (TOSS-Soft/toss-agent-runtime#40)
def _kickstart(node: Node, sub: str, rest: list[str]) -> int:
    jobs: dict = node.jobs
    kill = "-k" in rest
    target = [a for a in rest if not a.startswith("-")]
    if not target:
        err("Usage: launchctl kickstart [-kp] <service-target>")
        return 64
    domain, label = _target(target[0]) if sub in ("kickstart", "kill") else ("", target[0])
    entry = jobs.get(label)
    if entry is None:
        err(f'Could not find service "{label}" in domain for {domain or "system"}')
        return 113
    if sub in ("stop", "kill"):
        stop(entry.get("pid"))
        return 0
    if alive(entry.get("pid")):
        if not kill:
            return 0
        # no pid while it restarts: the KeepAlive tick must not start a second instance of its own meanwhile
        node.update("jobs", lambda d: d[label].update(pid=None) if label in d else None)
        stop(entry.get("pid"))
    job = load_plist(entry["plist"])
    pid = spawn(job, entry["domain"])

    def mutate(d: dict) -> None:
        e = d.get(label)
        if e is not None:
            e.update(pid=pid, started=time.time(), runs=e.get("runs", 0) + 1)

    node.update("jobs", mutate)
    if "-p" in rest:
        sys.stdout.write(f"{pid}\n")
    return 0


# - `print DOMAIN/LABEL` with a `state = running` line: launchctl(1) (the output is documented as not stable);
#   the block's other lines: GUESS
def _print(node: Node, sub: str, rest: list[str]) -> int:
    jobs: dict = node.jobs
    if not rest:
        err("Usage: launchctl print <domain-target> | <service-target>")
        return 64
    domain, label = _target(rest[0])
    if not domain:  # a domain: list its services
        domain = rest[0]
        sys.stdout.write(f"{domain} = {{\n\tservices = {{\n")
        for lb, e in jobs.items():
            if e["domain"] == domain:
                sys.stdout.write(f"\t\t{e.get('pid') if alive(e.get('pid')) else 0}\t-\t{lb}\n")
        sys.stdout.write("\t}\n}\n")
        return 0
    entry = jobs.get(label)
    if entry is None or entry["domain"] != domain:
        err(f'Could not find service "{label}" in domain for {domain}')
        return 113
    job = load_plist(entry["plist"])
    argv = job.get("ProgramArguments") or [job.get("Program", "")]
    running = alive(entry.get("pid"))
    lines = [
        f"{domain}/{label} = {{",
        f"\tactive count = {1 if running else 0}",
        f"\tpath = {entry['plist']}",
        f"\ttype = {'LaunchDaemon' if domain == 'system' else 'LaunchAgent'}",
        f"\tstate = {'running' if running else 'not running'}",
        "",
        f"\tprogram = {job.get('Program') or argv[0]}",
        "\targuments = {",
        *[f"\t\t{a}" for a in argv],
        "\t}",
        "",
        f"\tstdout path = {job.get('StandardOutPath', '/dev/null')}",
        f"\tstderr path = {job.get('StandardErrorPath', '/dev/null')}",
        f"\truns = {entry.get('runs', 0)}",
    ]
    if running:
        lines.append(f"\tpid = {entry['pid']}")
    last = entry.get("last_exit")
    lines.append(f"\tlast exit code = {last if last is not None else '(never exited)'}")
    lines.append("}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


# - `list`: `PID<TAB>Status<TAB>Label` rows: launchctl(1); `list LABEL`'s dictionary: GUESS
def _list(node: Node, sub: str, rest: list[str]) -> int:
    jobs: dict = node.jobs
    if rest:
        entry = jobs.get(rest[0])
        if entry is None:
            err(f'Could not find service "{rest[0]}" in domain for port')
            return 113
        job = load_plist(entry["plist"])
        out = ["{", f'\t"Label" = "{rest[0]}";', f'\t"LastExitStatus" = {entry.get("last_exit") or 0};']
        if alive(entry.get("pid")):
            out.append(f'\t"PID" = {entry["pid"]};')
        out.append(f'\t"Program" = "{job.get("Program") or (job.get("ProgramArguments") or [""])[0]}";')
        out.append("};")
        sys.stdout.write("\n".join(out) + "\n")
        return 0
    out = ["PID\tStatus\tLabel"]
    for label, e in sorted(jobs.items()):
        pid = e.get("pid") if alive(e.get("pid")) else "-"
        out.append(f"{pid}\t{e.get('last_exit') or 0}\t{label}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def disabled_labels(node: Node) -> set[str]:
    return {k for k, v in (node.persist.get("launchd_disabled") or {}).items() if v}


def _enable(node: Node, sub: str, rest: list[str]) -> int:
    """launchctl(1) enable|disable service-target: a disabled service "cannot be loaded in the specified domain
    until it is once again enabled. This state persists across boots" (the node's persist survives a reboot).
    Root only for the system domain; what loads already keeps running."""
    if len(rest) != 1 or "/" not in rest[0]:
        err(f"Usage: launchctl {sub} <service-target>")
        return 64
    domain, label = _target(rest[0])
    if not _domain_ok(domain):
        err(f"Could not {sub} service: 1: Operation not permitted")  # a guess (docs/lab.md)
        return 1
    node.update("persist", lambda p: p.setdefault("launchd_disabled", {}).__setitem__(label, sub == "disable"))
    return 0


def _print_disabled(node: Node, sub: str, rest: list[str]) -> int:
    """`launchctl print-disabled system`: the services enabled or disabled by `launchctl enable|disable`, as
    `"LABEL" => disabled|enabled` lines (the shape is a guess: docs/lab.md)."""
    if rest != ["system"]:
        err("Usage: launchctl print-disabled <domain-target> (the macfleet lab simulates the system domain)")
        return 64
    states = node.persist.get("launchd_disabled") or {}
    lines = ["disabled services = {", *[f'\t"{k}" => {"disabled" if v else "enabled"}' for k, v in
                                        sorted(states.items())], "}"]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


SUBCOMMANDS = {"bootstrap": _bootstrap, "load": _bootstrap, "bootout": _bootout, "unload": _bootout,
               "remove": _bootout, "kickstart": _kickstart, "start": _kickstart, "stop": _kickstart,
               "kill": _kickstart, "print": _print, "list": _list, "enable": _enable, "disable": _enable,
               "print-disabled": _print_disabled}


def launchctl(node: Node, args: list[str]) -> int:
    if not args:
        err("Usage: launchctl <subcommand> ... | help [subcommand]")
        return 64
    handler = SUBCOMMANDS.get(args[0])
    if handler is None:
        err(f"Unrecognized subcommand: {args[0]}")
        return 64
    return handler(node, args[0], args[1:])


# - every LaunchDaemon loaded at boot, RunAtLoad ones started; LaunchAgents only for a user who logs in:
#   launchd(8), launchd.plist(5)
def boot_jobs(node: Node, user: str) -> None:
    """At boot: load every plist of /Library/LaunchDaemons (system), and the admin's LaunchAgents (gui/uid) when
    the admin logs in automatically."""
    uid = pwd.getpwnam(user).pw_uid
    persist = node.persist
    # A gui/<uid> domain exists only once the user logs in: at boot that is automatic login, set in
    # loginwindow's autoLoginUser, and impossible while FileVault is on. LaunchDaemons start at every boot.
    logged_in = persist.get("auto_login_user") == user and not persist.get("filevault")
    from pathlib import Path

    folders = [(Path(DAEMONS), "system")] + ([(agents_dir(user), f"gui/{uid}")] if logged_in else [])
    for folder, domain in folders:
        if folder.is_dir():
            for p in sorted(folder.glob("*.plist")):
                load_job(node, domain, str(p))  # a disabled one is refused, as at a Mac's boot


# - KeepAlive jobs restarted: launchd.plist(5); within a second here, where launchd waits ThrottleInterval
#   (default 10 s, launchd.plist(5)): the lab is quicker (docs/lab.md)
def keep_alive_tick(node: Node) -> None:
    """Restart KeepAlive jobs whose process ended (run by the node's init every second)."""
    for label, e in node.jobs.items():
        if e.get("keep_alive") and e.get("pid") and not alive(e["pid"]):
            try:
                pid = spawn(load_plist(e["plist"]), e["domain"])
            except OSError:
                continue

            booted_out: list[bool] = []

            def mutate(d: dict, lb: str = label, p: int = pid, dead: int = e["pid"],
                       gone: list[bool] = booted_out) -> None:
                x = d.get(lb)
                if x is not None and x.get("pid") == dead:
                    x.update(pid=p, started=time.time(), runs=x.get("runs", 0) + 1)
                else:
                    gone.append(True)

            node.update("jobs", mutate)
            if booted_out:  # booted out, or restarted by someone else, meanwhile: one instance, as launchd keeps
                stop(pid)
