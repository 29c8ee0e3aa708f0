"""argv: LABEL GRACE_S LATE_S. Stops exo by asking first: SIGTERM to exo's daemon (launchd job LABEL), then waits
up to GRACE_S seconds for it and every process under it (its runners, which hold the RDMA device) to exit. Only
the ones still there then get SIGKILL. Prints one JSON line: the daemon's pid, how long the processes took to
exit, each one that exited only after LATE_S (it ignored the request: exo had to kill it), each one that did not
exit when asked (pid, command, ps state: `U` is an uninterruptible wait, ps(1)), and each one still there after
SIGKILL.

exo ends its runners itself on SIGTERM (exo b5375f8 src/exo/main.py:157-178; a runner gets 3 s, then SIGTERM
and retries, then SIGKILL: src/exo/utils/async_process.py:32-36,206-235), so GRACE_S should be longer than that.
launchd may start the daemon again meanwhile (KeepAlive): a new daemon is not in the tree that was asked, and the
caller boots the job out afterwards.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2
KILL_WAIT_S = 5.0
MAX_COMMAND = 200


def daemon_pid(label):
    """(the job's pid, None) from `launchctl print system/LABEL`'s `pid = N` line; (None, None) when the job is not
    loaded or not running; (None, why) when it runs but no pid could be read (launchctl(1) calls its output not
    stable: the pid line is not promised), which is never taken for "not running"."""
    p = subprocess.run(["launchctl", "print", "system/" + label], capture_output=True, text=True)
    if p.returncode != 0:
        return None, None
    running = False
    for line in p.stdout.splitlines():
        key, _, value = line.strip().partition(" = ")
        if key == "pid" and value.strip().isdigit():
            return int(value.strip()), None
        running = running or (key == "state" and value.strip() == "running")
    if running:
        return None, ("exo's job runs but `launchctl print` showed no `pid = N` line: exo was not asked to stop "
                      "first; launchd's bootout stopped it")
    return None, None


def processes():
    """pid -> (ppid, state, command) of every process (ps -A: every user's)."""
    p = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat=,args="], capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = (int(parts[1]), parts[2], (parts[3] if len(parts) > 3 else "")[:MAX_COMMAND])
    return out


def tree(root, table):
    """root and every process under it."""
    found = [root]
    for pid in found:
        found.extend(p for p, (ppid, _, _) in table.items() if ppid == pid and p not in found)
    return [p for p in found if p in table]


def described(pids, table):
    return [{"pid": p, "command": table[p][2], "state": table[p][1]} for p in pids if p in table]


def alive(pids):
    table = processes()
    # a zombie has exited: its parent has not collected it yet
    return [p for p in pids if p in table and not table[p][1].startswith("Z")], table


def wait_gone(pids, seconds, since, gone=None):
    """Wait until every pid exited or `seconds` passed; `gone` gets pid -> seconds after `since` it was gone."""
    deadline = time.monotonic() + seconds
    left, table = alive(pids)
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        before = left
        left, table = alive(pids)
        if gone is not None:
            gone.update((p, round(time.monotonic() - since, 1)) for p in before if p not in left)
    return left, table


def stop(label, grace_s, late_s):
    pid, unread = daemon_pid(label)
    if pid is None:
        report = {"pid": None, "asked": [], "took_s": 0.0, "late": [], "ignored_term": [], "survived_kill": []}
        return dict(report, error=unread) if unread else report
    started = time.monotonic()
    table = processes()
    asked = tree(pid, table)
    report = {"pid": pid, "asked": described(asked, table)}
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError as exc:  # not this user's process: launchd's bootout (run next) stops it instead
        report.update(error=f"could not ask exo's daemon (pid {pid}) to stop: {exc.strerror}; launchd stops it",
                      took_s=0.0, late=[], ignored_term=[], survived_kill=[])
        return report
    gone = {}
    left, table = wait_gone(asked, grace_s, started, gone)
    report["took_s"] = round(time.monotonic() - started, 1)
    report["late"] = [dict(p, exited_s=gone[p["pid"]]) for p in report["asked"]
                      if p["pid"] != pid and gone.get(p["pid"], 0) > late_s]
    report["ignored_term"] = described(left, table)
    for p in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    left, table = wait_gone(left, KILL_WAIT_S, started)
    report["survived_kill"] = described(left, table)
    return report


if __name__ == "__main__":
    print(json.dumps(stop(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))))
