"""exo releases on the nodes: read what each runs, stop and start exo through launchd, flip `current`.

Layout under the install root (`macfleet_exo.install_root`, default /opt/exo, owned by the admin user, so
no sudo is needed): `releases/<version>-<hash>/` (immutable once landed), `releases/<name>.manifest.json`,
`current -> releases/<name>` (replaced by rename, never edited), and staging in `releases/.staging-<name>/`.
exo runs as the LaunchDaemon bootstrap installs (label EXO_LABEL, macfleet/constants.py; UserName: the admin
user), whose program is `<root>/current/bin/exo`; bootstrap's scoped sudoers drop-in lets the admin stop and
start it without a password.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from macfleet.act.transfer import REMOTE_PYTHON, SshTarget, on_nodes, run_remote, ssh_target
from macfleet.constants import EXO_LABEL
from macfleet.errors import RemoteCommandError
from macfleet.inventory.model import Fleet
from macfleet.judge.rollout import check_release_name
from macfleet.node import program

LABEL = EXO_LABEL

# Node programs (files in macfleet/node): what `current` points at, the releases present and whether the job
# runs (argv: ROOT LABEL); point `current` at releases/NAME (argv: ROOT NAME).
_READ_PROGRAM = program("exo_read")
_FLIP_PROGRAM = program("exo_flip")


@dataclass
class NodeRelease:
    current: str | None
    releases: list[str]
    running: bool


def read_nodes(fleet: Fleet, nodes: list[str], root: str) -> dict[str, NodeRelease]:
    cmd = shlex.join([REMOTE_PYTHON, "-c", _READ_PROGRAM, root, LABEL])

    def one(a: SshTarget) -> NodeRelease:
        out = run_remote(a, cmd, timeout_s=30)
        try:
            d = json.loads(out.strip().splitlines()[-1])
            return NodeRelease(current=d["current"], releases=[str(r) for r in d["releases"]],
                               running=bool(d["running"]))
        except (ValueError, KeyError, IndexError):
            raise RemoteCommandError(a.node, "read releases", 0, f"unexpected answer {out[-200:]!r}") from None

    return on_nodes(fleet, nodes, one)  # type: ignore[return-value]


def _agent_target() -> str:
    return f"system/{LABEL}"


# launchctl bootout: launchd ends the process and forgets the job (KeepAlive cannot restart it).
STOP_EXO_LINE = (f"sudo -n launchctl bootout {_agent_target()} 2>/dev/null; launchctl print {_agent_target()} "
                 ">/dev/null 2>&1 && { echo still loaded >&2; exit 1; }; exit 0")
START_EXO_LINE = (f"if launchctl print {_agent_target()} >/dev/null 2>&1; then sudo -n launchctl kickstart "
                  f"{_agent_target()}; else sudo -n launchctl bootstrap system "
                  f"/Library/LaunchDaemons/{LABEL}.plist; fi")


def stop_exo(fleet: Fleet, nodes: list[str]) -> None:
    on_nodes(fleet, nodes, lambda a: run_remote(a, STOP_EXO_LINE, timeout_s=60))


def start_exo(fleet: Fleet, nodes: list[str]) -> None:
    on_nodes(fleet, nodes, lambda a: run_remote(a, START_EXO_LINE, timeout_s=60))


def flip_command(root: str, name: str) -> str:
    """The shell command that points `current` at releases/NAME on a node (for a caller's own command line)."""
    check_release_name(name)
    return shlex.join([REMOTE_PYTHON, "-c", _FLIP_PROGRAM, root, name])


def flip_current(fleet: Fleet, nodes: list[str], root: str, name: str) -> None:
    cmd = flip_command(root, name)
    on_nodes(fleet, nodes, lambda a: run_remote(a, cmd, timeout_s=30))


def remove_releases(fleet: Fleet, node: str, root: str, names: list[str]) -> None:
    if not names:
        return
    paths = []
    for n in names:
        check_release_name(n)
        paths += [f"{root}/releases/{n}", f"{root}/releases/{n}.manifest.json"]
    a = ssh_target(fleet, node)
    run_remote(a, shlex.join(["rm", "-rf", "--", *paths]), timeout_s=120)
