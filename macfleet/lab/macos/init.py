"""The node's boot, run as root inside the node's network namespace and a fresh mount namespace.

It plays the part of macOS startup plus launchd: mounts the node's filesystem view (the macOS userland in
front of /usr/bin and /usr/sbin, per-node /Users, /Library, /opt/homebrew, /etc/sudoers.d), applies the
persisted network services, starts sshd, loads LaunchDaemons/LaunchAgents (RunAtLoad), marks the node "on",
then stays as the node's launchd: restarts KeepAlive jobs and sshd. A reboot ends it with every other
process of the node (the supervisor kills all pids of the namespace).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from . import launchd, network, pf
from .common import Node

# Sources (issue 31): lab plumbing, no behaviour of a Mac of its own; each command's sources are above its handler.
MOUNT = "/usr/bin/mount" if os.path.exists("/usr/bin/mount") else "/bin/mount"


def _mount(*args: str) -> None:
    subprocess.run([MOUNT, *args], check=True)


def setup_mounts(node: Node) -> None:
    standins = node.dir / "standins"
    fs = node.dir / "fs"
    _mount("--make-rprivate", "/")
    for lower, target in ((standins, "/usr/bin"), (node.dir / "standins-sbin", "/usr/sbin")):
        _mount("-t", "overlay", "-o", f"ro,lowerdir={lower}:{target}", "overlay", target)
    for src, target in (("Users", "/Users"), ("Library", "/Library"), ("homebrew", "/opt/homebrew"),
                        ("exo", "/opt/exo"), ("sudoers.d", "/etc/sudoers.d"), ("pf.anchors", "/etc/pf.anchors"),
                        ("pam.d", "/etc/pam.d"), ("tmp", "/tmp")):
        _mount("--bind", str(fs / src), target)


def main(node: Node) -> int:
    setup_mounts(node)
    with open("/proc/sys/net/ipv4/ping_group_range", "w") as f:
        f.write("0 2147483647")
    network.apply(node)
    log = open(node.dir / "sshd.log", "a")  # noqa: SIM115
    cfg = str(node.dir / "sshd" / "sshd_config")

    def start_sshd() -> subprocess.Popen:
        return subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", cfg], stdout=log, stderr=log)

    sshd = start_sshd()
    user = node.lab.spec["user"]
    try:
        pf.reset_at_boot()  # pf's rules are runtime state: none until a LaunchDaemon loads them again
    except Exception as e:
        log.write(f"pf: {e}\n")
    try:
        launchd.boot_jobs(node, user)
    except Exception as e:  # a broken plist must not stop the boot
        log.write(f"launchd: {e}\n")
        log.flush()
    node.update("boot", lambda d: d.__setitem__("power", "on"))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        time.sleep(1.0)
        if sshd.poll() is not None:
            sshd = start_sshd()
        try:
            launchd.keep_alive_tick(node)
        except Exception as e:
            log.write(f"launchd: {e}\n")
            log.flush()
