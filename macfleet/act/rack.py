"""What macfleet does on a node to help the person at the rack: shut it down, make it ping.

Each returns None when it worked, else what went wrong in one line (the walkthrough then asks the
operator to do it by hand); none raises for the node's sake.
"""

from __future__ import annotations

import shlex

from macfleet.collect.ssh import CommandTimeout, SshSession, SshTarget, Unreachable
from macfleet.inventory.model import Fleet, Node

SHUTDOWN = ("sudo", "-n", "shutdown", "-h", "now")
PING_SOUND = ("afplay", "/System/Library/Sounds/Ping.aiff")


def _run(fleet: Fleet, node: Node, argv: tuple[str, ...], timeout_s: float, *, drops: bool = False) -> str | None:
    try:
        with SshSession(SshTarget.for_node(fleet, node)) as session:
            raw = session.run_line(shlex.join(argv), timeout_s=timeout_s)
    except Unreachable as exc:
        return str(exc)
    except CommandTimeout:
        # A shutdown may take the connection with it before the exit status arrives: that is success.
        return None if drops else f"`{shlex.join(argv)}` gave no answer within {timeout_s:g} s"
    if raw.rc in (0, -1) if drops else raw.rc == 0:
        return None
    tail = (raw.stderr.strip() or raw.stdout.strip() or "no output").splitlines()[-1][:200]
    return f"`{shlex.join(argv)}` exited {raw.rc}: {tail}"


def shut_down(fleet: Fleet, node: Node) -> str | None:
    """`sudo -n shutdown -h now` (never a password prompt: the bootstrap's scoped sudo allows it)."""
    return _run(fleet, node, SHUTDOWN, 20, drops=True)


def play_sound(fleet: Fleet, node: Node) -> str | None:
    """Play the Ping sound on the node, so the operator finds the right box by ear."""
    return _run(fleet, node, PING_SOUND, 15)
