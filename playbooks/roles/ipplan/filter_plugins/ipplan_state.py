"""The ipplan role's reading of what the probe read: each rule in one place, used per item by the role's
tasks and for the whole Mac by `ipplan_pending` (the playbook skips a Mac where no role has anything to do).

A read is the probe's record of one command: {"rc": int, "stdout": str, "stderr": str}.
"""

from __future__ import annotations

import re

BRIDGE0_BLOCK = re.compile(r"(?ms)^bridge0: .*?(?=^\S|\Z)")


def _lines(read: dict) -> list[str]:
    return str(read.get("stdout", "")).splitlines()


def ipplan_service_enabled(order: dict, service: str) -> bool:
    """`networksetup -listnetworkserviceorder` numbers enabled services "(1) Name", disabled ones "(*) Name"."""
    return re.search(r"(?m)^\([0-9]+\) " + re.escape(service) + r"\s*$", str(order.get("stdout", ""))) is not None


def ipplan_bridge0(ifconfig: dict) -> str:
    """bridge0's block of `ifconfig` (absent when macOS removed the bridge): it lists the bridge's members."""
    found = BRIDGE0_BLOCK.search(str(ifconfig.get("stdout", "")))
    return found.group(0) if found else ""


def ipplan_bridge_member(bridge0: str, device: str) -> bool:
    return f"member: {device} " in bridge0


def ipplan_port_needs(port: dict, info: dict, order: dict, ifconfig: dict, mtu: int | str) -> dict[str, bool]:
    """What is still to do on one cabled port, from `networksetup -getinfo SERVICE` (rc != 0: no such service),
    the service order and `ifconfig`."""
    lines = _lines(info)
    exists = info.get("rc") == 0
    mtu_line = "^" + re.escape(str(port["device"])) + r": flags=[^ ]+ mtu " + re.escape(str(mtu)) + "$"
    return {
        "create": not exists,
        "enable": exists and f"(*) {port['service']}" in _lines(order),
        "address": (not exists or "Manual Configuration" not in lines
                    or f"IP address: {port['address']}" not in lines or f"Subnet mask: {port['netmask']}" not in lines),
        "mtu": re.search(mtu_line, str(ifconfig.get("stdout", "")), re.MULTILINE) is None,
    }


# What networksetup prints when configd will not let it write the network preferences: reported on macOS 26 for
# `-createnetworkservice` run as root, even on a port outside bridge0 (dryvist/nix-darwin docs/TB5-RDMA-CLUSTER.md,
# "verified 2026-07-18, dryvist/nix-darwin#1750"; exo's RCA notes; SQCU/mesh: such writes "need Full Disk Access
# and fail headlessly"). Its exit status is not reported, so the text is what tells it.
SC_REFUSED = "Unable to access the System Configuration database"


def ipplan_sc_refused(read: dict) -> bool:
    """Whether a networksetup run was refused access to the System Configuration database."""
    return SC_REFUSED.lower() in (str(read.get("stdout", "")) + str(read.get("stderr", ""))).lower()


def ipplan_refused_ports(results: list) -> list:
    """The ports (loop items `ipplan_port`) whose `-createnetworkservice` was refused that way this run."""
    return [r["ipplan_port"] for r in results or [] if "rc" in r and r["rc"] != 0 and ipplan_sc_refused(r)]


def ipplan_device_addressed(ifconfig: dict, device: str, address: str) -> bool:
    """Whether `ifconfig`'s block of `device` carries `address` (a port without a network service, addressed by
    ifconfig)."""
    block = re.search(r"(?ms)^" + re.escape(device) + r": .*?(?=^\S|\Z)", str(ifconfig.get("stdout", "")))
    return block is not None and re.search(r"(?m)^\s+inet " + re.escape(address) + r" ", block.group(0)) is not None


def ipplan_release_manual(info: dict) -> bool:
    """A released port's service still has its manual address (the role sets it back to DHCP)."""
    return "Manual Configuration" in _lines(info)


def ipplan_pending(commands: dict, networksetup: str, ifconfig_cmd: str, interfaces: list, mtu: int | str,
                   bridge_services: list, thunderbolt_devices: list, release_services: list) -> bool:
    """Whether the role has anything to do or to report on this Mac, from the probe's commands (keyed by their
    argv joined with spaces, as the role reads them). A read that failed counts as something to do, so the role
    runs and says so."""
    order = commands[f"{networksetup} -listnetworkserviceorder"]
    ifconfig = commands[ifconfig_cmd]
    if order.get("rc") != 0 or ifconfig.get("rc") != 0:
        return True
    if any(ipplan_service_enabled(order, s) for s in bridge_services):
        return True
    bridge0 = ipplan_bridge0(ifconfig)
    if any(ipplan_bridge_member(bridge0, d) for d in thunderbolt_devices):
        return True
    for port in interfaces:
        info = commands[f"{networksetup} -getinfo {port['service']}"]
        if any(ipplan_port_needs(port, info, order, ifconfig, mtu).values()):
            return True
    return any(ipplan_release_manual(commands[f"{networksetup} -getinfo {r['service']}"]) for r in release_services)


class FilterModule:
    def filters(self) -> dict:
        return {f.__name__: f for f in (ipplan_service_enabled, ipplan_bridge0, ipplan_bridge_member,
                                        ipplan_port_needs, ipplan_release_manual, ipplan_pending,
                                        ipplan_sc_refused, ipplan_refused_ports, ipplan_device_addressed)}
