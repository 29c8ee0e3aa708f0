"""Host stand-ins: sw_vers, sysctl, pmset, fdesetup, csrutil, systemsetup, scutil, softwareupdate,
caffeinate, shutdown/reboot/halt. Shapes: shared/samples/macos__sw_vers_*, macos__sysctl_*, macos__pmset_*,
macos__fdesetup_*, macos__csrutil_*, macos__systemsetup_* (the parsers' copies: tests/fixtures/captures/).
"""

from __future__ import annotations

import os
import sys
import time

from .common import CORES, Node, err, is_root, write_json

# ---------------------------------------------------------------------------------------------
# sw_vers
# ---------------------------------------------------------------------------------------------


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - `ProductName:<TAB><TAB>macOS` … three lines: samples macos__sw_vers_macos26_6_2_runner_1.txt; one field per
#   `-productName|-productVersion|-buildVersion`: sw_vers(1); default 26.5.1 (25F80): the build in
#   exo__exo-issue-2186_ips_crash_backtrace_ibv_reg_mr.txt
def sw_vers(node: Node, args: list[str]) -> int:
    os_ = node.persist.get("os", {})
    fields = {
        "-productName": ("ProductName", "macOS"),
        "-productVersion": ("ProductVersion", os_.get("version", "26.5.1")),
        "-buildVersion": ("BuildVersion", os_.get("build", "25F80")),
    }
    if args and args[0] in fields:
        sys.stdout.write(fields[args[0]][1] + "\n")
        return 0
    sys.stdout.write("".join(f"{k}:\t\t{v}\n" for k, v in fields.values()))
    return 0


# ---------------------------------------------------------------------------------------------
# sysctl
# ---------------------------------------------------------------------------------------------


# - values: hw.* and machdep.cpu.brand_string as in samples macos__sysctl_hw_vm_macos26_1.txt and
#   macos__sysctl_n_memsize_ncpu_brand_studio_m2ultra_1.txt; iogpu.wired_limit_mb / iogpu.dynamic_lwm:
#   macos__sysctl_iogpu_get_1.txt; 0 again after a reboot: macos__sysctl_iogpu_wired_limit_log_1.txt
# - GUESS: kern.boottime's `{ sec = …, usec = … } date` text, kern.osrelease 25.5.0, hw.pagesize 16384
def kern_boottime(boot: dict) -> str:
    """`sysctl -n kern.boottime` of the boot described by boot.json's `boot`."""
    booted = float(boot.get("booted_at", time.time()))
    sec, usec = int(booted), int((booted % 1) * 1e6)
    return f"{{ sec = {sec}, usec = {usec} }} " + time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(sec))


def _sysctl_values(node: Node) -> dict[str, str]:
    total, perf, eff = CORES.get(node.model["chip"], (8, 4, 4))
    boot = node.boot
    os_ = node.persist.get("os", {})
    return {
        "hw.memsize": str(node.model["memory_bytes"]),
        "hw.model": node.model["model_identifier"],
        "hw.ncpu": str(total),
        "hw.physicalcpu": str(total),
        "hw.logicalcpu": str(total),
        "hw.pagesize": "16384",
        "hw.nperflevels": "2",
        "hw.perflevel0.name": "Performance",
        "hw.perflevel0.physicalcpu": str(perf),
        "hw.perflevel1.name": "Efficiency",
        "hw.perflevel1.physicalcpu": str(eff),
        "machdep.cpu.brand_string": node.model["chip"],
        "kern.hostname": node.persist.get("names", {}).get("HostName") or f"{node.name}.local",
        "kern.ostype": "Darwin",
        "kern.osrelease": "25.5.0",
        "kern.osproductversion": os_.get("version", "26.5.1"),
        "kern.osversion": os_.get("build", "25F80"),
        "kern.boottime": kern_boottime(boot),
        "iogpu.wired_limit_mb": str(boot.get("wired_limit_mb", 0)),
        "iogpu.dynamic_lwm": "1",
    }


WRITABLE = {"iogpu.wired_limit_mb"}


# - `name: value` per argument, `-n` bare values in argument order: samples macos__sysctl_hw_vm_macos26_1.txt,
#   macos__sysctl_n_memsize_ncpu_brand_studio_m2ultra_1.txt; setting prints `name: old -> new`:
#   macos__sysctl_iogpu_wired_limit_set_1.txt; `sysctl: unknown oid '…'`: research/macos-outputs.md section 9
# - GUESS: the read-only, not-root and invalid-integer messages; a prefix listing its subtree
def sysctl(node: Node, args: list[str]) -> int:
    values = _sysctl_values(node)
    bare = False
    names: list[str] = []
    show_all = False
    for a in args:
        if a.startswith("-") and "=" not in a:
            bare = bare or "n" in a
            show_all = show_all or "a" in a
        else:
            names.append(a)
    if show_all or not names:
        names = list(values)
    rc = 0
    for name in names:
        if "=" in name:
            key, val = name.split("=", 1)
            if key not in values:
                err(f"sysctl: unknown oid '{key}'")
                rc = 1
                continue
            if key not in WRITABLE:
                err(f"sysctl: oid '{key}' is read only")
                rc = 1
                continue
            if not is_root():
                err(f"sysctl: {key}={val}: Operation not permitted")
                rc = 1
                continue
            try:
                new = int(val)
            except ValueError:
                err(f"sysctl: invalid integer '{val}'")
                rc = 1
                continue
            old = values[key]
            node.update("boot", lambda d, k=key, v=new: d.__setitem__(k.split(".")[1], v))
            sys.stdout.write(f"{key}: {old} -> {new}\n")
            continue
        matched = [k for k in values if k == name or k.startswith(name + ".")]
        if not matched:
            err(f"sysctl: unknown oid '{name}'")
            rc = 1
            continue
        for k in matched:
            sys.stdout.write(f"{values[k]}\n" if bare else f"{k}: {values[k]}\n")
    return rc


# ---------------------------------------------------------------------------------------------
# pmset
# ---------------------------------------------------------------------------------------------

PMSET_FRESH: dict[str, str] = {
    "Sleep On Power Button": "1",
    "autorestart": "0",
    "hibernatefile": "/var/vm/sleepimage",
    "powernap": "1",
    "networkoversleep": "0",
    "disksleep": "10",
    "sleep": "1",
    "hibernatemode": "0",
    "ttyskeepawake": "1",
    "displaysleep": "10",
    "tcpkeepalive": "1",
    "lowpowermode": "0",
    "womp": "1",
}


# - `-g`: `System-wide power settings:`, `Currently in use:`, one-space-indented `key value` lines: samples
#   macos__pmset_g_desktop_fixture_1.txt; setting keys with `-a|-b|-c|-u`, `restoredefaults`: pmset(1)
# - GUESS: PMSET_FRESH's values (a desktop's defaults), `-g custom` and `-g assertions` output, the not-root
#   message
def pmset(node: Node, args: list[str]) -> int:
    settings: dict[str, str] = node.persist.get("pmset") or dict(PMSET_FRESH)
    if not args or args[0] == "-g":
        what = args[1] if len(args) > 1 else ""
        if what in ("", "live", "custom"):
            out = ["System-wide power settings:", "Currently in use:"] if what != "custom" else ["AC Power:"]
            for k, v in settings.items():
                out.append(f" {k:<20} {v}")
            sys.stdout.write("\n".join(out) + "\n")
            return 0
        if what == "assertions":
            sys.stdout.write("Assertion status system-wide:\n   PreventUserIdleSystemSleep     0\n")
            return 0
        sys.stdout.write("\n")
        return 0
    if not is_root():
        err("pmset must be run as root.")
        return 1
    words = list(args)
    if words and words[0] in ("-a", "-b", "-c", "-u"):
        words = words[1:]
    if words == ["restoredefaults"]:
        node.update("persist", lambda d: d.__setitem__("pmset", dict(PMSET_FRESH)))
        return 0
    if len(words) % 2:
        err(f"Usage: pmset <options>; bad argument {words[-1]!r}")
        return 1
    pairs = list(zip(words[::2], words[1::2], strict=True))

    def mutate(d: dict) -> None:
        cur = d.get("pmset") or dict(PMSET_FRESH)
        for k, v in pairs:
            cur[k] = v
        d["pmset"] = cur

    node.update("persist", mutate)
    return 0


# ---------------------------------------------------------------------------------------------
# fdesetup, csrutil, systemsetup, scutil, softwareupdate
# ---------------------------------------------------------------------------------------------


# - `status`: `FileVault is On.` / `FileVault is Off.`: samples macos__fdesetup_status_on_1.txt, _off_1.txt
# - `isactive` (true/false, exit 0/1), `supportsauthrestart`, `authrestart` restarting the Mac: fdesetup(8)
#   ("supportsauthrestart: Returns true if the system supports the authenticated restart option"); a Mac
#   without it (the `authrestart-unsupported` fault): `false`, and authrestart refused
# - GUESS: the error messages; authrestart does not check the password it is given (a Mac does: docs/lab.md)
def fdesetup(node: Node, args: list[str]) -> int:
    on = bool(node.persist.get("filevault"))
    sub = args[0] if args else ""
    if sub == "status":
        sys.stdout.write("FileVault is On.\n" if on else "FileVault is Off.\n")
        return 0
    if sub == "isactive":
        sys.stdout.write("true\n" if on else "false\n")
        return 0 if on else 1
    unsupported = bool(node.persist.get("lab_no_authrestart"))
    if sub == "supportsauthrestart":
        sys.stdout.write("false\n" if unsupported else "true\n")
        return 0
    if sub == "authrestart":
        if not is_root():
            err("Error: authrestart requires root.")
            return 1
        if not on:
            err("Error: FileVault is Off.")
            return 1
        if unsupported:
            err("Error: authrestart is not supported on this system.")
            return 1
        node.update("boot", lambda d: d.__setitem__("authrestart", True))
        return request(node, "reboot")
    err(f"fdesetup: {sub or 'no verb'}: not simulated by the macfleet lab")
    return 1


# - `status`: samples macos__csrutil_status_enabled_1.txt; the refusal of everything else outside Recovery: GUESS
def csrutil(node: Node, args: list[str]) -> int:
    if args[:1] == ["status"]:
        sys.stdout.write("System Integrity Protection status: enabled.\n")
        return 0
    err("csrutil: This tool needs to be executed from the Recovery OS.")
    return 1


# - without root: `You need administrator access to run this tool... exiting!` on stdout, exit 0: samples
#   macos__systemsetup_getremotelogin_noadmin_1.txt; `Remote Login: On`: macos__systemsetup_getremotelogin_on_1.txt
# - the other options: systemsetup(8); their output lines (`Computer Sleep: …`, `Restart After …: On|Off`) and
#   `-setremotelogin` changing nothing (a Mac also wants Full Disk Access): GUESS
def systemsetup(node: Node, args: list[str]) -> int:
    if not is_root():
        sys.stdout.write("You need administrator access to run this tool... exiting!\n")
        return 0
    sub = args[0].lower() if args else ""
    pm = node.persist.get("pmset") or dict(PMSET_FRESH)
    if sub == "-getremotelogin":
        sys.stdout.write("Remote Login: On\n")
    elif sub == "-setremotelogin":
        # systemsetup(8): "-setremotelogin [-f] on | off ... Requires Full Disk Access privileges." Without it macOS
        # 15+ prints this line and exits 1 (a published run: "setremotelogin: Turning Remote Login on or off
        # requires Full Disk Access privileges." / "exit code 1"); the lab grants nothing Full Disk Access. The
        # stream is a guess (docs/lab.md). What works without it: launchctl enable system/com.openssh.sshd.
        sys.stdout.write("setremotelogin: Turning Remote Login on or off requires Full Disk Access privileges.\n")
        return 1
    elif sub == "-getcomputersleep":
        s = pm.get("sleep", "0")
        sys.stdout.write("Computer Sleep: Never\n" if s == "0" else f"Computer Sleep: after {s} minutes\n")
    elif sub == "-setcomputersleep" and len(args) > 1:
        v = "0" if args[1].lower() in ("never", "off") else args[1]
        return pmset(node, ["-a", "sleep", v])
    elif sub == "-getrestartpowerfailure":
        sys.stdout.write(f"Restart After Power Failure: {'On' if pm.get('autorestart') == '1' else 'Off'}\n")
    elif sub == "-setrestartpowerfailure" and len(args) > 1:
        return pmset(node, ["-a", "autorestart", "1" if args[1].lower() == "on" else "0"])
    elif sub == "-getrestartfreeze":
        sys.stdout.write("Restart After Freeze: On\n")
    elif sub == "-setrestartfreeze":
        pass
    else:
        err(f"systemsetup: {sub}: not simulated by the macfleet lab")
        return 1
    return 0


# - `--get NAME` / `--set NAME VALUE`: scutil(8); `NAME: not set` (exit 1) and the permission message: GUESS
def scutil(node: Node, args: list[str]) -> int:
    names = node.persist.get("names", {})
    if len(args) >= 2 and args[0] == "--get":
        val = names.get(args[1])
        if val is None:
            sys.stdout.write(f"{args[1]}: not set\n")
            return 1
        sys.stdout.write(val + "\n")
        return 0
    if len(args) >= 3 and args[0] == "--set":
        if not is_root():
            err("SCPreferencesCommitChanges() failed: Permission denied")
            return 1
        node.update("persist", lambda d: d.setdefault("names", {}).__setitem__(args[1], args[2]))
        return 0
    err("usage: scutil --get|--set ComputerName|LocalHostName|HostName [value]")
    return 1


# - not dispatched (cli.COMMANDS names devtools.softwareupdate, whose sources are listed there)
def softwareupdate(node: Node, args: list[str]) -> int:
    if any(a in ("-l", "--list") for a in args):
        err("Software Update Tool\n\nFinding available software")
        sys.stdout.write("No new software available.\n")
        return 0
    err("softwareupdate: only --list is simulated by the macfleet lab")
    return 1


# - `-t SECONDS`, `-w PID`, a utility to run: caffeinate(8)
def caffeinate(node: Node, args: list[str]) -> int:
    timeout = None
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("-t", "-w") and i + 1 < len(args):
            if args[i] == "-t":
                timeout = float(args[i + 1])
            i += 1
        i += 1
    if i < len(args):
        import subprocess

        return subprocess.call(args[i:])
    try:
        time.sleep(timeout if timeout is not None else 10**9)
    except KeyboardInterrupt:
        return 0
    return 0


# ---------------------------------------------------------------------------------------------
# shutdown / reboot / halt: ask the lab supervisor to take the node down (it ends every process of
# the node, SSH included, exactly like a Mac going down).
# ---------------------------------------------------------------------------------------------


# - (the lab's own: a request file the lab's supervisor carries out; nothing a Mac shows)
def request(node: Node, action: str, at: float | None = None) -> int:
    write_json(node.dir / "request", {"action": action, "at": at or time.time(), "pid": os.getpid()})
    return 0


# - options and usage line, `NOT super-user`, `Shutdown NOW!`: shutdown(8) and BSD shutdown.c (FreeBSD's, from
#   which macOS's comes; Apple's copy not checked): GUESS for the exact texts on macOS 26
def shutdown(node: Node, args: list[str]) -> int:
    if not is_root():
        err("shutdown: NOT super-user")
        return 1
    usage = "usage: shutdown [-] [-h [-u] | -r | -s | -k] [-o [-n]] time [warning-message ...]"
    action = None
    when = None
    for a in args:
        if a.startswith("-") and len(a) > 1 and when is None:
            letters = a[1:]
            bad = [c for c in letters if c not in "hrskuon"]
            if bad:
                err(f"shutdown: illegal option -- {bad[0]}")
                err(usage)
                return 1
            if "r" in letters:
                action = "reboot"
            elif "h" in letters or "s" in letters:
                action = "halt"
            elif "k" in letters:
                action = "kick"
        elif when is None:
            when = a
    if action is None or when is None:
        err(usage)
        return 1
    if action == "kick":
        return 0
    delay = 0.0
    if when and when.startswith("+"):
        try:
            delay = float(when[1:]) * 60
        except ValueError:
            delay = 0.0
    elif when in (None, "now"):
        delay = 0.0
    if delay == 0:
        sys.stdout.write("Shutdown NOW!\n")
    else:
        sys.stdout.write(f"Shutdown at {time.ctime(time.time() + delay)}.\n")
    sys.stdout.flush()
    return request(node, action, time.time() + delay)


# - reboot(8) / halt(8); the not-root message: GUESS
def reboot(node: Node, args: list[str]) -> int:
    if not is_root():
        err("reboot: Operation not permitted")
        return 1
    return request(node, "reboot")


def halt(node: Node, args: list[str]) -> int:
    if not is_root():
        err("halt: Operation not permitted")
        return 1
    return request(node, "halt")
