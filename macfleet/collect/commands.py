"""The catalogue: every macOS command macfleet runs to read a node, and nothing else.

Each spec's `kind` is a facts KIND (facts/registry.py): the same string names the parser, the fixture
folder of real captures (tests/fixtures/captures/<kind>/), the lab's stand-in and the --json key.
A test fails if any spec here has no real capture to prove its parser on.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


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


THUNDERBOLT = CommandSpec("thunderbolt", ("system_profiler", "SPThunderboltDataType", "-json"), timeout_s=30)
HARDWARE_PORTS = CommandSpec("hardware-ports", ("networksetup", "-listallhardwareports"))
SERVICE_ORDER = CommandSpec("service-order", ("networksetup", "-listnetworkserviceorder"))
SERVICES = CommandSpec("services", ("networksetup", "-listallnetworkservices"))
IFCONFIG = CommandSpec("ifconfig", ("ifconfig",))
# ibv_devinfo hangs on a wedged RDMA stack (exo.md §5): a short timeout is itself a finding.
IBV_DEVICES = CommandSpec("ibv-devices", ("ibv_devices",), timeout_s=10)
IBV_DEVINFO = CommandSpec("ibv-devinfo", ("ibv_devinfo",), timeout_s=10)
IBV_DEVINFO_VERBOSE = CommandSpec("ibv-devinfo", ("ibv_devinfo", "-v"), timeout_s=10, variant="verbose")
RDMA_CTL = CommandSpec("rdma-ctl", ("rdma_ctl", "status"), timeout_s=10)
# Not read: `nvram rdma-enable` (no real capture of its output exists yet; rdma_ctl status answers the same).
SW_VERS = CommandSpec("sw-vers", ("sw_vers",), timeout_s=10)
SYSCTL = CommandSpec("sysctl", ("sysctl", "hw.memsize", "hw.ncpu", "hw.model", "iogpu.wired_limit_mb"), timeout_s=10)
HARDWARE = CommandSpec("hardware", ("system_profiler", "SPHardwareDataType", "-json"), timeout_s=30)
PMSET = CommandSpec("pmset", ("pmset", "-g"), timeout_s=10)
FDESETUP = CommandSpec("fdesetup", ("fdesetup", "status"), timeout_s=10)
CSRUTIL = CommandSpec("csrutil", ("csrutil", "status"), timeout_s=10)
# The IPv4 routing table: the IP plan must not take addresses a node already routes elsewhere (a VPN).
NETSTAT_ROUTES = CommandSpec("netstat-routes", ("netstat", "-rn", "-f", "inet"), timeout_s=10)
REMOTE_LOGIN = CommandSpec("remote-login", ("systemsetup", "-getremotelogin"), timeout_s=10, needs_sudo=True)

ALL_SPECS: tuple[CommandSpec, ...] = (
    THUNDERBOLT,
    HARDWARE_PORTS,
    SERVICE_ORDER,
    SERVICES,
    IFCONFIG,
    IBV_DEVICES,
    IBV_DEVINFO,
    IBV_DEVINFO_VERBOSE,
    RDMA_CTL,
    SW_VERS,
    SYSCTL,
    HARDWARE,
    PMSET,
    FDESETUP,
    CSRUTIL,
    REMOTE_LOGIN,
    NETSTAT_ROUTES,
)

# What `topology check` reads: the cabling, the port names, the RDMA ports and the addresses.
TOPOLOGY_SPECS: tuple[CommandSpec, ...] = (THUNDERBOLT, HARDWARE_PORTS, IBV_DEVICES, IBV_DEVINFO, IFCONFIG)
# What the IP plan reads before changing anything: services, their order, and live addresses/routes.
NETWORK_SPECS: tuple[CommandSpec, ...] = (
    THUNDERBOLT, HARDWARE_PORTS, SERVICE_ORDER, SERVICES, IFCONFIG, NETSTAT_ROUTES,
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
    THUNDERBOLT, HARDWARE_PORTS, SERVICE_ORDER, IFCONFIG, IBV_DEVICES, IBV_DEVINFO_VERBOSE, RDMA_CTL, SW_VERS,
    SYSCTL, PMSET, FDESETUP,
)
