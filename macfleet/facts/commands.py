"""The command specs the collector runs, built from the one table of KIND commands (`facts/kinds.py`), and the
commands of the probes that are not KINDs (exo's API, the clock, the disk...). Plain data, no parser behind it:
the collector runs them, and the check catalogue (judge/checks) names each probe's command from here.

Each spec's `kind` is a facts KIND: the same string names the parser, the fixture folder of real captures
(tests/fixtures/captures/<kind>/), the lab's stand-in and the --json key. The command line, timeout and
sudo flag come from the KIND's entry; nothing here repeats them. A test fails if any spec has no real
capture to prove its parser on.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from macfleet.constants import EXO_INSTALL_ROOT, EXO_MODELS_DIR, EXO_PORT
from macfleet.facts.kinds import (
    AUTO_UPDATE_DOMAINS,
    DEFAULT_TIMEOUT_S,
    EXO_JOB_PLIST,
    KIND_COMMANDS,
    NETWORKSETUP_LABEL,
    NETWORKSETUP_PLIST,
)


@dataclass(frozen=True)
class CommandSpec:
    kind: str
    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
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
    k = KIND_COMMANDS[kind]
    extra = k.variants[variant] if variant is not None else ()
    return CommandSpec(kind, (*k.argv, *extra), timeout_s=k.timeout_s, needs_sudo=k.needs_sudo, variant=variant)


def specs_for(kinds: Iterable[str]) -> tuple[CommandSpec, ...]:
    """The specs that read `kinds`, each once, in the order given."""
    return tuple(spec_for(k) for k in dict.fromkeys(kinds))


# Every command macfleet may run to read a node, variants included.
ALL_SPECS: tuple[CommandSpec, ...] = tuple(
    s
    for k in KIND_COMMANDS.values()
    if k.collected
    for s in (spec_for(k.kind), *(spec_for(k.kind, v) for v in k.variants))
)


# exo's HTTP API and log, read on the node itself (exo listens on every IPv4 interface, loopback included).
# Not macOS commands: their shapes are exo's (facts/exo.py), so they stay out of ALL_SPECS.
# exo's API does not say its version (no header, no field): the version is what is installed. `$1` is the
# install root (`root ROOT`); the release `current` points at (`current TARGET`, or `no-current`), then the
# `Version:` header of package exo's dist-info METADATA in any environment directly inside that release
# (`package VERSION`, e.g. the build's .venv; exo's own version, facts/exo.py ExoRelease). One cheap read: a
# link, a glob and the METADATA's head.
EXO_RELEASE_SCRIPT = (
    'echo "root $1"; r=$(readlink "$1/current") || { echo no-current; exit 0; }; echo "current $r"; '
    'for m in "$1"/current/.*/lib/python*/site-packages/exo-*.dist-info/METADATA '
    '"$1"/current/*/lib/python*/site-packages/exo-*.dist-info/METADATA; do '
    "[ -f \"$m\" ] && sed -n '/^$/q;s/^Version: /package /p' \"$m\"; done; exit 0"
)


EXO_LOG_LINES = 2000  # the end of exo's log doctor reads
# `{ sec = N, usec = N } <local ctime>`: when the node booted (reboot's wait compares it; doctor's RDMA ledger
# counts exo's failed runner starts since then, facts/ledger.py)
BOOTTIME = CommandSpec("boottime", ("sysctl", "-n", "kern.boottime"), timeout_s=10)
# The kernel's count of the Thunderbolt RDMA driver's protection domains and queue pairs in use, all devices
# together (doctor's RDMA ledger, facts/ledger.py). The class names: dryvist/nix-ai
# docs/runbooks/cluster-link-truths.md at af5aedae5636f2d473b2fed3bea2843ee203aa14 ("The only direct kernel read
# is `ioclasscount AppleThunderboltRDMAProtectionDomain` (and `AppleThunderboltRDMAQueuePair` for mesh state)").
# No root needed: ioclasscount reads the IORegistry root's IOKitDiagnostics property (Apple's
# IOKitTools/ioclasscount.tproj/ioclasscount.c at 04b1b654a84a3c15e1420ab7913cbf701fa74cbc, `main`). No real
# capture of its output on an RDMA Mac is known: the format is Apple's source's, so it stays out of ALL_SPECS.
RDMA_PD_CLASS = "AppleThunderboltRDMAProtectionDomain"
RDMA_QP_CLASS = "AppleThunderboltRDMAQueuePair"
IOCLASSCOUNT = CommandSpec("ioclasscount", ("ioclasscount", RDMA_PD_CLASS, RDMA_QP_CLASS), timeout_s=10)


def exo_specs(port: int = EXO_PORT, install_root: str = EXO_INSTALL_ROOT) -> tuple[CommandSpec, ...]:
    base = f"http://127.0.0.1:{int(port)}"
    return (
        # -i: the status line and headers, then the JSON string
        CommandSpec("exo-node-id", ("curl", "-s", "-i", "--max-time", "3", f"{base}/node_id"), timeout_s=6),
        CommandSpec("exo-state", ("curl", "-s", "--max-time", "3", "--max-filesize", "8388608", f"{base}/state"),
                    timeout_s=6),
        # relative to the login directory (sshd starts there): `~` would not expand once quoted
        CommandSpec("exo-log", ("tail", "-n", str(EXO_LOG_LINES), ".exo/exo_log/exo.log"), timeout_s=6),
        CommandSpec("exo-release", ("sh", "-c", EXO_RELEASE_SCRIPT, "sh", home_relative(install_root)), timeout_s=6),
    )


# Doctor's small probes. No real capture of their output from a Mac is in the repository yet (facts/probes.py
# reads only their stable lines; docs/lab.md lists the lab's stand-ins as guesses), so they stay out of
# ALL_SPECS, whose every command is proven on a capture.
PF_ANCHOR = "com.apple/macfleet"  # where bootstrap's pf role loads exo's rules (macOS's pf.conf reads com.apple/*)


def home_relative(path: str) -> str:
    """A `~/…` path as the remote shell would see it from the login directory (sshd starts there): `~` would
    not expand once quoted."""
    if path == "~":
        return "."
    return path[2:] if path.startswith("~/") else path


def probe_specs(models_dir: str = EXO_MODELS_DIR) -> tuple[CommandSpec, ...]:
    return (
        # the controller notes when the answer came and how long the round trip took (collect.ssh.Raw)
        CommandSpec("date", ("date", "-u", "+%s"), timeout_s=5),
        CommandSpec("df", ("df", "-k", home_relative(models_dir)), timeout_s=10),
        # asks Apple's catalogue over the network: slow on a real Mac, bounded like the rest
        CommandSpec("softwareupdate", ("softwareupdate", "--list"), timeout_s=45),
        # the Software Update preferences bootstrap switches off (judge/autoupdate.py), world-readable files
        *(CommandSpec("auto-updates", ("defaults", "read", d), timeout_s=10, variant=d) for d in AUTO_UPDATE_DOMAINS),
        # the two pfctl reads bootstrap's sudoers drop-in allows, word for word
        CommandSpec("pf-info", ("pfctl", "-s", "info"), timeout_s=5, needs_sudo=True),
        CommandSpec("pf-rules", ("pfctl", "-a", PF_ANCHOR, "-s", "rules"), timeout_s=5, needs_sudo=True),
    )


# The LaunchDaemons doctor reads (facts/daemons.py; their paths in facts/kinds.py): macfleet's exo job for the
# environment exo runs with, and exo's app's network daemon. Both plists are world-readable (0644).
_EXO_DAEMONS = (
    f"echo '--- exo-plist'; head -c 262144 {EXO_JOB_PLIST} 2>/dev/null || echo '(unreadable: {EXO_JOB_PLIST}: no "
    f"such file or not readable)'; echo; echo '--- networksetup-plist'; if [ -e {NETWORKSETUP_PLIST} ]; then "
    f"echo present; else echo absent; fi; echo '--- networksetup-job'; launchctl print system/{NETWORKSETUP_LABEL} "
    "2>&1; echo \"exit $?\"; echo '--- disabled'; launchctl print-disabled system 2>&1; echo \"exit $?\""
)


def exo_daemons_spec() -> CommandSpec:
    return CommandSpec("exo-daemons", ("/bin/sh", "-c", _EXO_DAEMONS), timeout_s=10)


def ping_spec(address: str) -> CommandSpec:
    """One short ping to a peer's planned address on a Thunderbolt link (BSD ping: -t is the whole wait, s)."""
    return CommandSpec("tb-ping", ("ping", "-c", "1", "-t", "2", address), timeout_s=5, variant=address)
