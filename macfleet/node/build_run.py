"""argv: RELEASE_DIR LOG TIMEOUT_S PATH; stdin: one JSON line {"command": ...} (kept out of every argv), then nothing
until the controller is gone. Reads the checkout (checkout.py): where it builds MLX without the toolchain, prints
{"refused": {check: {rc, out}}, "checkout": ...} and builds nothing. Else runs the command with `sh -c` in
RELEASE_DIR (MACFLEET_UV_EXTRAS set to the `--extra` options the checkout calls for), its output in LOG, in a
process group of its own, killed at the timeout or when stdin closes. Prints {"rc", "timed_out", "cancelled",
"took_s", "tail", "checkout"}. Where the checkout names exo's peer ports, writes them to the release's
PORTS_FILE first."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

from macfleet.node.checkout import read_checkout, read_ports, toolchain
from macfleet.node.release_files import PORTS_FILE

TAIL_BYTES = 4000  # of the log, in the answer


def read_command():
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 65536)
        if not chunk:
            sys.exit("no build command on stdin")
        line += chunk
    return json.loads(line)["command"]


def build(command, release, log, timeout, env):
    with open(log, "wb") as out:
        p = subprocess.Popen(["/bin/sh", "-c", command], cwd=release, env=env, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        cancelled = []

        def watch():
            while os.read(0, 65536):
                pass
            cancelled.append(True)
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
        threading.Thread(target=watch, daemon=True).start()
        timed_out = False
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGKILL)
            rc = p.wait()
    return rc, timed_out, bool(cancelled)


def main():
    release, log, timeout, path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    command = read_command()
    env = dict(os.environ, PWD=release, MACFLEET_RELEASE_DIR=release, MACFLEET_RELEASE=os.path.basename(release))
    env["PATH"] = path.replace("$HOME", os.path.expanduser("~"))
    checkout = read_checkout(release)
    checkout["ports"] = read_ports(release)
    if checkout["ports"] is not None:  # the release says which peer ports it listens on (roles/pf reads it)
        with open(os.path.join(release, PORTS_FILE), "w") as f:
            json.dump(dict(checkout["ports"], source="src/exo/main.py"), f, sort_keys=True)
            f.write("\n")
    env["MACFLEET_UV_EXTRAS"] = " ".join("--extra " + e for e in checkout["extras"])
    if checkout["mlx_from_git"]:
        ok, checks = toolchain(env["PATH"])
        if not ok:
            print(json.dumps({"refused": checks, "checkout": checkout}))
            sys.stdout.flush()
            os._exit(0)
    t0 = time.monotonic()
    rc, timed_out, cancelled = build(command, release, log, timeout, env)
    with open(log, "rb") as f:
        f.seek(max(0, os.path.getsize(log) - TAIL_BYTES))
        tail = f.read().decode("utf-8", "replace")
    print(json.dumps({"rc": rc, "timed_out": timed_out, "cancelled": cancelled,
                      "took_s": round(time.monotonic() - t0, 2), "tail": tail, "checkout": checkout}))
    sys.stdout.flush()
    os._exit(0)  # the watcher thread still waits on stdin: leave without waiting for it


if __name__ == "__main__":
    main()
