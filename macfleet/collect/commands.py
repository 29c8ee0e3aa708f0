"""The command specs the collector runs, built from the one table of KINDs (`facts/registry.py`).

Each spec's `kind` is a facts KIND: the same string names the parser, the fixture folder of real captures
(tests/fixtures/captures/<kind>/), the lab's stand-in and the --json key. The command line, timeout and
sudo flag come from the KIND's entry; nothing here repeats them. A test fails if any spec has no real
capture to prove its parser on.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from macfleet.facts.registry import KINDS


@dataclass(frozen=True)
class CommandSpec:
    kind: str
    argv: tuple[str, ...]
    timeout_s: float = 15.0
    needs_sudo: bool = False  # run as `sudo -n`: scoped, non-interactive, never a password prompt
    variant: str | None = None  # when one kind is read with other arguments (`ibv_devinfo -v`)

    @property
    def key(self) -> str:
        """Where this command's output is filed in a gather result."""
        return f"{self.kind}:{self.variant}" if self.variant else self.kind

    @property
    def command_line(self) -> str:
        argv = ("sudo", "-n", *self.argv) if self.needs_sudo else self.argv
        return shlex.join(argv)


def spec_for(kind: str, variant: str | None = None) -> CommandSpec:
    """KIND's command as the collector runs it (KeyError for a KIND that is not in the table)."""
    k = KINDS[kind]
    extra = k.variants[variant] if variant is not None else ()
    return CommandSpec(kind, (*k.argv, *extra), timeout_s=k.timeout_s, needs_sudo=k.needs_sudo, variant=variant)


def specs_for(kinds: Iterable[str]) -> tuple[CommandSpec, ...]:
    """The specs that read `kinds`, each once, in the order given."""
    return tuple(spec_for(k) for k in dict.fromkeys(kinds))


# Every command macfleet may run to read a node, variants included.
ALL_SPECS: tuple[CommandSpec, ...] = tuple(
    s
    for k in KINDS.values()
    if k.collected
    for s in (spec_for(k.kind), *(spec_for(k.kind, v) for v in k.variants))
)


# exo's HTTP API and log, read on the node itself (exo listens on every IPv4 interface, loopback included).
# Not macOS commands: their shapes are exo's (facts/exo.py), so they stay out of ALL_SPECS.
def exo_specs(port: int = 52415) -> tuple[CommandSpec, ...]:
    base = f"http://127.0.0.1:{int(port)}"
    return (
        # -i: the status line and headers (a build's version header), then the JSON string
        CommandSpec("exo-node-id", ("curl", "-s", "-i", "--max-time", "3", f"{base}/node_id"), timeout_s=6),
        CommandSpec("exo-state", ("curl", "-s", "--max-time", "3", "--max-filesize", "8388608", f"{base}/state"),
                    timeout_s=6),
        # relative to the login directory (sshd starts there): `~` would not expand once quoted
        CommandSpec("exo-log", ("tail", "-n", "2000", ".exo/exo_log/exo.log"), timeout_s=6),
    )


# What `doctor` reads besides exo: one command each, the verbose ibv_devinfo (states and GID tables) only.
DOCTOR_SPECS: tuple[CommandSpec, ...] = (
    *specs_for(("thunderbolt", "hardware-ports", "service-order", "ifconfig", "ibv-devices")),
    spec_for("ibv-devinfo", "verbose"),
    *specs_for(("rdma-ctl", "sw-vers", "sysctl", "pmset", "fdesetup")),
)
