"""macfleet's one read of a Mac: every file and command the bootstrap roles compare against, in one run.

Reads a JSON request (its one argument, or stdin without one), {"files": [path, ...],
"commands": [[argv...], ...], "admin": name, "admin_commands": [[argv...], ...]}, and prints one JSON
object: {"files": {path: record or null}, "commands": {"argv joined by spaces": {"rc", "stdout", "stderr"}},
"admin_commands": {same}}. Admin commands
run as the named account (its uid, groups, home and a plain PATH): Homebrew refuses to run as root.
A file record has its type, mode ("0644"), uid, gid, owner and group names and, for a regular file, the
SHA-1 of its content (what Ansible's stat and template modules compare). It only reads; it runs with the
interpreter of the Command Line Tools (Python 3.9 on macOS 26), so it uses the standard library only.
"""

import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

COMMAND_TIMEOUT_S = 60
MAX_OUTPUT_CHARS = 1_000_000  # a read is data for a comparison, never unbounded
MAX_CHECKSUM_BYTES = 16 * 1024 * 1024


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return None


def read_file(path):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind = ("link" if stat.S_ISLNK(st.st_mode) else "directory" if stat.S_ISDIR(st.st_mode)
            else "file" if stat.S_ISREG(st.st_mode) else "other")
    record = {"type": kind, "mode": f"{stat.S_IMODE(st.st_mode):04o}", "uid": st.st_uid, "gid": st.st_gid,
              "owner": _name(pwd.getpwuid, st.st_uid), "group": _name(grp.getgrgid, st.st_gid), "checksum": None}
    if kind == "file" and st.st_size <= MAX_CHECKSUM_BYTES:
        digest = hashlib.sha1()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(65536), b""):
                digest.update(block)
        record["checksum"] = digest.hexdigest()
    return record


def run(argv, **account):
    """One command's rc and output. Whatever stops it (not found, not allowed, a timeout, or anything Python raises
    before it starts) is that command's failure, never the probe's: the others are still read and reported."""
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=COMMAND_TIMEOUT_S, **account)
    except FileNotFoundError as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": f"timed out after {COMMAND_TIMEOUT_S} s"}
    except Exception as exc:  # e.g. not root, so not allowed to switch user; a group list the OS refuses
        return {"rc": 126, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"[:MAX_OUTPUT_CHARS]}
    return {"rc": p.returncode, "stdout": p.stdout.decode("utf-8", "replace")[:MAX_OUTPUT_CHARS],
            "stderr": p.stderr.decode("utf-8", "replace")[:MAX_OUTPUT_CHARS]}


def groups_max():
    """How many supplementary groups this OS lets a process carry: 16 on macOS (<sys/syslimits.h> NGROUPS_MAX;
    sysconf answers the same), and CPython refuses a longer extra_groups list before it forks ("too many groups",
    Modules/_posixsubprocess.c). A stock macOS admin is in 18 (uutils/coreutils#2416)."""
    try:
        return max(1, int(os.sysconf("SC_NGROUPS_MAX")))
    except (ValueError, OSError):
        return 16


def run_as(name):
    """A runner for commands as the account `name`, or one that says why it cannot. Its groups are the account's
    first groups up to the OS's limit (the primary group first), as macOS's own initgroups keeps the first 16 in
    the process (apache/mesos stout os.hpp setgroups: "SYS_initgroups would send up to 16 of them")."""
    try:
        pw = pwd.getpwnam(name)
        groups = os.getgrouplist(name, pw.pw_gid)[:groups_max()]
    except Exception as exc:
        why = f"no account {name!r}" if isinstance(exc, KeyError) else f"groups of {name!r}: {exc}"
        return lambda argv: {"rc": 126, "stdout": "", "stderr": why}
    env = {"HOME": pw.pw_dir, "USER": name, "LOGNAME": name, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    account = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": groups,
               "env": env, "cwd": pw.pw_dir if os.path.isdir(pw.pw_dir) else "/"}
    return lambda argv: run(argv, **account)


def main():
    request = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.load(sys.stdin)
    commands = [[str(word) for word in argv] for argv in request.get("commands", [])]
    admin_commands = [[str(word) for word in argv] for argv in request.get("admin_commands", [])]
    as_admin = run_as(str(request.get("admin", "")))
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = pool.map(run, commands)
        admin_results = pool.map(as_admin, admin_commands)
        json.dump({"files": {str(p): read_file(str(p)) for p in request.get("files", [])},
                   "commands": dict(zip((" ".join(argv) for argv in commands), results)),
                   "admin_commands": dict(zip((" ".join(argv) for argv in admin_commands), admin_results))},
                  sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
