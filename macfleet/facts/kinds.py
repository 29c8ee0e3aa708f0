"""Each KIND's command, defined once: what macfleet runs to read it, its timeout, sudo and variants.

Plain data with no parser behind it, so the collector can build its command specs (and start a pass) without
importing a single parser; `facts/registry.py` pairs every KIND here with its parser, model and detector.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from macfleet.constants import EXO_PLIST

DEFAULT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class KindCommand:
    kind: str
    argv: tuple[str, ...]  # the command line macfleet runs (and names in parse errors)
    timeout_s: float = DEFAULT_TIMEOUT_S
    needs_sudo: bool = False  # run as `sudo -n`: scoped, non-interactive, never a password prompt
    # False: parsed from saved captures only (it needs an argument per service, or no real capture proves it)
    collected: bool = True
    variants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> extra arguments

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


_COMMANDS = (
    KindCommand("thunderbolt", ("system_profiler", "SPThunderboltDataType", "-json"), timeout_s=30),
    KindCommand("hardware", ("system_profiler", "SPHardwareDataType", "-json"), timeout_s=30),
    KindCommand("hardware-ports", ("networksetup", "-listallhardwareports")),
    KindCommand("service-order", ("networksetup", "-listnetworkserviceorder")),
    KindCommand("services", ("networksetup", "-listallnetworkservices")),
    # Needs a service name; the IP plan reads the same from ifconfig and the service order instead.
    KindCommand("getinfo", ("networksetup", "-getinfo"), collected=False),
    # ibv_devices/ibv_devinfo hang on a wedged RDMA stack: a short timeout is itself a finding.
    KindCommand("ibv-devices", ("ibv_devices",), timeout_s=10),
    KindCommand("ibv-devinfo", ("ibv_devinfo",), timeout_s=10, variants={"verbose": ("-v",)}),
    KindCommand("ifconfig", ("ifconfig",)),
    KindCommand("rdma-ctl", ("rdma_ctl", "status"), timeout_s=10),
    # No real capture of `nvram rdma-enable` exists yet; `rdma_ctl status` answers the same question.
    KindCommand("nvram", ("nvram", "rdma-enable"), timeout_s=10, collected=False),
    KindCommand("sw-vers", ("sw_vers",), timeout_s=10),
    KindCommand("pmset", ("pmset", "-g"), timeout_s=10),
    KindCommand("fdesetup", ("fdesetup", "status"), timeout_s=10),
    KindCommand("csrutil", ("csrutil", "status"), timeout_s=10),
    KindCommand("remote-login", ("systemsetup", "-getremotelogin"), timeout_s=10, needs_sudo=True),
    # The IPv4 routing table: the IP plan must not take addresses a node already routes elsewhere (a VPN).
    KindCommand("netstat-routes", ("netstat", "-rn", "-f", "inet"), timeout_s=10),
    # Every TCP socket: doctor's llama-rpc check reads where rpc-server listens.
    KindCommand("netstat-listen", ("netstat", "-an", "-p", "tcp"), timeout_s=10),
    KindCommand("sysctl", ("sysctl", "hw.memsize", "hw.ncpu", "hw.model", "iogpu.wired_limit_mb"), timeout_s=10),
)
KIND_COMMANDS: dict[str, KindCommand] = {c.kind: c for c in _COMMANDS}


# The LaunchDaemons doctor reads in one command (collect/commands.py `exo_daemons_spec`, parsed by
# facts/daemons.py): macfleet's exo job (bootstrap's playbooks/roles/exo) and exo's app's network daemon (exo
# app/EXO/EXO/Services/NetworkSetupHelper.swift at b5375f8: label io.exo.networksetup, plist in
# /Library/LaunchDaemons). Here, not in facts/daemons.py, so the collector imports no parser.
# The Software Update preferences bootstrap sets (playbooks/roles/autoupdate) and doctor reads back with
# `defaults read` (facts/defaults.py, judge/autoupdate.py).
SOFTWARE_UPDATE = "/Library/Preferences/com.apple.SoftwareUpdate"
COMMERCE = "/Library/Preferences/com.apple.commerce"
AUTO_UPDATE_DOMAINS = (SOFTWARE_UPDATE, COMMERCE)
EXO_JOB_PLIST = EXO_PLIST
NETWORKSETUP_LABEL = "io.exo.networksetup"
NETWORKSETUP_PLIST = f"/Library/LaunchDaemons/{NETWORKSETUP_LABEL}.plist"
