"""The per-lab supervisor: `python -m macfleet.lab.supervisor NAME` (started by `lab up`, ended by `lab down`).

A node's own processes die when it goes down, so someone outside must bring it back. Every 0.1 s the
supervisor looks for `nodes/<node>/request` ({"action", "at"}), written by the node's shutdown/reboot/halt
stand-ins or by `lab power` / `lab recovery`, and carries it out in a thread per node:
  reboot / cycle   halt, wait --boot-seconds, boot (new domain UUIDs, persisted settings, RunAtLoad jobs)
  halt / off       halt and stay off
  on               wait --boot-seconds (if off), boot; at the FileVault unlock screen: unlocked at the console
  unlock           written by the unlock screen's sshd (preboot.py) once a password unlocked it: SSH drops
                   briefly, then the boot continues (apple_ssh_and_filevault(7))
It exits when the lab's state directory disappears.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback

from . import faults, preboot
from .control import boot_node, halt_node, kill_node_processes, preboot_node
from .macos.common import Lab, read_json
from .state import lab_dir


def main(name: str) -> int:
    d = lab_dir(name)
    busy: dict[str, threading.Thread] = {}
    children = []
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def handle(lab: dict, node: str, action: str) -> None:
        try:
            boot = read_json(d / "nodes" / node / "boot.json", {})
            if action != "reboot" and boot.get("authrestart"):  # authrestart covers a software restart only
                Lab(d).node(node).update("boot", lambda b: b.pop("authrestart", None))
            stall = faults.shutdown_seconds(lab, node) if action in ("reboot", "halt") else 0.0
            if stall and boot.get("power") == "on" and stop.wait(stall):  # slow-shutdown: a stalled shutdown
                return
            if action in ("reboot", "cycle", "halt", "off") and boot.get("power") != "off":
                halt_node(lab, node)
            if action in ("on", "unlock") and boot.get("power") == "locked":
                # the password was typed at the screen or over SSH: the pre-boot sshd goes, SSH drops briefly,
                # the boot continues (apple_ssh_and_filevault(7))
                kill_node_processes(lab["nodes"][node]["ns"])
                if stop.wait(preboot.UNLOCK_DROP_S):
                    return
                children.append(boot_node(lab, node, unlocked=True))
                return
            if action in ("reboot", "cycle", "on"):
                delay = faults.boot_seconds(lab, node, float(lab.get("boot_seconds", 0)))
                if delay:
                    Lab(d).node(node).update("boot", lambda b: b.__setitem__("power", "booting"))
                    if stop.wait(delay):
                        return
                if faults.locked_at_boot(lab, node):  # FileVault: waits at the unlock screen
                    children.append(preboot_node(lab, node))
                    return
                children.append(boot_node(lab, node))
        except Exception:
            traceback.print_exc()
            sys.stderr.flush()

    while not stop.is_set():
        lab = read_json(d / "lab.json")
        if lab is None:
            break
        now = time.time()
        for node in lab["nodes"]:
            req_path = d / "nodes" / node / "request"
            if node in busy and busy[node].is_alive():
                continue
            req = read_json(req_path)
            if not req or float(req.get("at", 0)) > now:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(req_path)
            t = threading.Thread(target=handle, args=(lab, node, req.get("action", "")), daemon=True)
            busy[node] = t
            t.start()
        for c in list(children):
            if c.poll() is not None:
                children.remove(c)
        stop.wait(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
