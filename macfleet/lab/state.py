"""A lab's state on the controller: its name, directories, plan, and power requests (a leaf: imports no other
lab module but the node-side file helpers, so control.py, faults.py and the supervisor can all use it).

Every path comes from a checked lab name and is resolved under the state root: a name can never reach a
directory that is not one of our labs.
"""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

from macfleet.errors import LabError, UsageError

from .macos import common as userland

STATE_ROOT = Path(os.environ.get("MACFLEET_LAB_STATE", "/run/macfleet-lab"))
NODE_PYTHON = "/usr/bin/python3"
# A lab name is also an inventory directory, a host-label part of namespace names and a word in hints: the
# node-name rule of the inventory narrowed to what all of those accept (no dot, slash, space or capital).
LAB_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
STATE_NAMES = {"on": "up", "off": "off", "booting": "booting", "shutting-down": "shutting-down", "locked": "locked"}


def check_name(name: object) -> str:
    """The one check every lab command runs on --name before it touches anything."""
    if not isinstance(name, str) or not LAB_NAME.fullmatch(name) or name.endswith("-"):
        raise UsageError(f"bad lab name {name!r}",
                         hint="1-32 lowercase letters, digits and '-', starting with a letter, e.g. demo or lab-2")
    return name


def require_root_linux() -> None:
    if platform.system() != "Linux":
        raise UsageError("the lab runs on Linux only", hint="it uses network namespaces, veth pairs and tc")
    if os.geteuid() != 0:
        raise UsageError("the lab needs root", hint="run it with sudo (it creates network namespaces)")


def lab_dir(name: str) -> Path:
    """<state root>/NAME, refused unless it is a direct child of the state root once resolved."""
    check_name(name)
    root = STATE_ROOT.resolve()
    d = (STATE_ROOT / name).resolve()
    if d.parent != root or d.name != name:
        raise UsageError(f"lab {name!r} resolves to {d}, outside the lab state directory {root}",
                         hint="remove the link that points it elsewhere")
    return d


def node_dir(name: str, node: str) -> Path:
    return lab_dir(name) / "nodes" / node


def load(name: str) -> dict:
    data = userland.read_json(lab_dir(name) / "lab.json")
    if data is None:
        raise UsageError(f"no lab named {name!r} is up", hint="start one with `macfleet lab up`")
    return data


def check_node(lab: dict, node: str) -> dict:
    if node not in lab["nodes"]:
        raise UsageError(f"no node {node!r} in lab {lab['name']!r}", hint="nodes: " + ", ".join(lab["nodes"]))
    return lab["nodes"][node]


def ssh_argv(name: str, node: str, command: str | None) -> list[str]:
    """`ssh` to a node with the lab's key and strict host keys (a login shell without COMMAND)."""
    lab = load(name)
    n = check_node(lab, node)
    d = lab_dir(name)
    argv = ["ssh", "-i", str(d / "id_ed25519"), "-o", f"UserKnownHostsFile={d / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=10", f"{lab['user']}@{n['address']}"]
    if command is None:
        argv.insert(1, "-t")
    else:
        argv.append(command)
    return argv


# ---------------------------------------------------------------------------------------------
# Processes and power requests (carried out by the supervisor)
# ---------------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, IndexError):
        return False


def supervisor_alive(name: str) -> bool:
    try:
        pid = int((lab_dir(name) / "supervisor.pid").read_text())
    except (OSError, ValueError):
        return False
    if not alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"macfleet.lab.supervisor" in f.read()
    except OSError:
        return False


def power_state(name: str, node: str) -> str:
    return userland.read_json(node_dir(name, node) / "boot.json", {}).get("power", "off")


def request_power(name: str, node: str, action: str) -> None:
    """Ask the supervisor to reboot, halt, cycle or boot NODE (it polls for this file)."""
    userland.write_json(node_dir(name, node) / "request", {"action": action, "at": time.time(),
                                                           "pid": os.getpid()})


def wait_power(name: str, node: str, ok: set[str], timeout: float) -> str:
    """Poll until NODE's power state is in OK and its request has been taken; LabError after TIMEOUT."""
    deadline = time.time() + timeout
    while True:
        power = power_state(name, node)
        pending = (node_dir(name, node) / "request").exists()
        if power in ok and not pending:
            return power
        if time.time() > deadline:
            raise LabError(f"{node}: still {power} after {timeout:.0f}s", hint="is the lab supervisor running?")
        time.sleep(0.05)


def power(name: str, node: str, action: str) -> str:
    """Press NODE's power button: on, off (hard) or cycle. Returns the state it reached."""
    require_root_linux()
    lab = load(name)
    check_node(lab, node)
    if action not in ("on", "off", "cycle"):
        raise UsageError(f"bad power action {action!r}", hint="on, off or cycle")
    if not supervisor_alive(name):
        raise LabError(f"the supervisor of lab {name!r} is not running", hint="`macfleet lab down` and up again")
    cur = power_state(name, node)
    if action == "on" and cur in ("on", "booting"):
        return STATE_NAMES[cur]
    if action == "off" and cur == "off":
        return "off"
    request_power(name, node, action)
    if action == "off":
        return STATE_NAMES[wait_power(name, node, {"off"}, 30)]
    return STATE_NAMES[wait_power(name, node, {"booting", "on", "locked"}, 30)]
