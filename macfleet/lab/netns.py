"""Network plumbing with iproute2: namespaces, the management bridge, veth "cables", tc shaping.

Every command is batched (`ip -batch`, `tc -batch`) so a 32-node lab costs a handful of processes.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess

from macfleet.errors import LabError

from . import spec as specmod

IP = "ip"
TC = "tc"


def run(argv: list[str], *, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {p.stderr.strip()[-500:]}")
    return p


def batch(lines: list[str], *, ns: str | None = None, tool: str = IP, check: bool = True) -> None:
    if not lines:
        return
    argv = [tool, *(["-n", ns] if ns else []), "-force", "-batch", "-"]
    run(argv, input="\n".join(lines) + "\n", check=check)


def netns_list() -> list[str]:
    p = run([IP, "-j", "netns", "list"], check=False)
    try:
        return [x["name"] for x in json.loads(p.stdout or "[]")]
    except json.JSONDecodeError:
        return []


def links_root() -> list[str]:
    p = run([IP, "-j", "link", "show"], check=False)
    try:
        return [x["ifname"] for x in json.loads(p.stdout or "[]")]
    except json.JSONDecodeError:
        return []


def netns_pids(ns: str) -> list[int]:
    p = run([IP, "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def burst_bytes(bits: int) -> int:
    return max(32 * 1024, bits // 8 // 100)


def tbf(dev: str, rate: str) -> str:
    return f"qdisc replace dev {dev} root tbf rate {rate} burst {burst_bytes(specmod.rate_bits(rate))} latency 50ms"


def create(lab: dict) -> None:
    """Namespaces, management bridge and links, Thunderbolt cables, shaping. Links stay down until boot."""
    nodes = lab["nodes"].values()
    br = lab["bridge"]
    ctrl = lab["controller_address"]
    batch([f"netns add {n['ns']}" for n in nodes])
    # IPv6 off inside nodes: the stand-ins derive fe80 addresses themselves, and no ND/MLD chatter.
    for n in nodes:
        off = "echo 1 > /proc/sys/net/ipv6/conf/{}/disable_ipv6"
        run([IP, "netns", "exec", n["ns"], "sh", "-c", off.format("default") + "; " + off.format("all")], check=False)
    subnet = ipaddress.ip_interface(f"{ctrl}/24").network
    # The lab owns its /24: a host route that a killed run left there (a test's blackhole) would hide a node.
    root = [f"route flush root {subnet} type {kind}" for kind in ("blackhole", "unreachable", "prohibit")]
    root += [f"link add {br} type bridge", f"addr add {ctrl}/24 dev {br}", f"link set {br} up"]
    for n in nodes:
        root += [
            f"link add {n['host_veth']} address {n['mgmt_mac'][:-2]}fe type veth peer name en0 netns {n['ns']} "
            f"address {n['mgmt_mac']}",
            f"link set {n['host_veth']} master {br}",
            f"link set {n['host_veth']} up",
        ]
    for cable in lab["cables"]:
        root.append(cable_add_line(lab, cable))
    batch(root)
    for n in nodes:  # unplugged ports still exist on a Mac, with no carrier: a veth whose peer stays down
        cabled = cabled_devices(lab, n["name"])
        batch([dangling_add_line(lab, n["name"], d) for d in specmod.tb_devices(lab, n["name"]) if d not in cabled],
              ns=n["ns"])
    with open(f"/proc/sys/net/ipv6/conf/{br}/disable_ipv6", "w") as f:
        f.write("1")
    batch([tbf(n["host_veth"], lab["mgmt_rate"]) for n in nodes], tool=TC)
    for n in nodes:
        lines = [tbf("en0", lab["mgmt_rate"])]
        lines += [tbf(d, lab["tb_rate"]) for d in specmod.tb_devices(lab, n["name"])
                  if any(_end_is(c, n["name"], d, lab) for c in lab["cables"])]
        batch(lines, ns=n["ns"], tool=TC)


def _end_is(cable: dict, node: str, dev: str, lab: dict) -> bool:
    for end in (cable["a"], cable["b"]):
        if end["node"] == node and specmod.device_of(lab, node, end["receptacle"]) == dev:
            return True
    return False


def cabled_devices(lab: dict, node: str) -> set[str]:
    out = set()
    for c in lab["cables"]:
        for end in (c["a"], c["b"]):
            if end["node"] == node:
                out.add(specmod.device_of(lab, node, end["receptacle"]))
    return out


def dangling_add_line(lab: dict, node: str, dev: str) -> str:
    """An empty Thunderbolt port: enX paired with `tbp-enX` (always down) in the same namespace."""
    n = lab["nodes"][node]
    model = lab["models"][n["model"]]
    r = next(p["receptacle"] for p in model["ports"] if p["device"] == dev)
    return f"link add name {dev} address {n['mac_base']}:{0x80 + (r - 1) * 4:02x} type veth peer name tbp-{dev}"


def plug(lab: dict, cable: dict) -> None:
    """Plug a cable (for faults): both ports lose their dangling veth and get the real pair, shaped and up
    when the node is on. The caller updates lab["cables"] (lab.json) itself."""
    lines_a = []
    for end in (cable["a"], cable["b"]):
        n = lab["nodes"][end["node"]]
        dev = specmod.device_of(lab, end["node"], end["receptacle"])
        if dev in _ns_links(n["ns"]):
            batch([f"link del {dev}"], ns=n["ns"], check=False)
    batch([cable_add_line(lab, cable)])
    for end in (cable["a"], cable["b"]):
        n = lab["nodes"][end["node"]]
        dev = specmod.device_of(lab, end["node"], end["receptacle"])
        lines_a = [f"link set {dev} up"] if _node_on(lab, end["node"]) else []
        batch([tbf(dev, lab["tb_rate"])], ns=n["ns"], tool=TC)
        batch(lines_a, ns=n["ns"])
        if lines_a:  # as on a Mac: the port's persisted network service re-applies its address on link-up
            reapply_services(lab, end["node"], [dev])


def reapply_services(lab: dict, node: str, devices: list[str] | None = None) -> None:
    """Run the node's own network-service apply (macos/network.apply) in its namespace, for `devices` or all
    Thunderbolt ports and the bridge, as configd does when a link comes back."""
    import os

    state = os.environ.get("MACFLEET_LAB_STATE", "/run/macfleet-lab")
    d = f"{state}/{lab['name']}"
    run([IP, "netns", "exec", lab["nodes"][node]["ns"], "/usr/bin/python3", "-S", "-E", f"{d}/userland/run.py",
         f"{d}/nodes/{node}", "__netapply__", *(devices or [])])


def unplug(lab: dict, cable: dict) -> None:
    """Pull a cable out (for faults): the pair goes, each port gets a dangling veth again (no carrier)."""
    for end in (cable["a"], cable["b"]):
        n = lab["nodes"][end["node"]]
        dev = specmod.device_of(lab, end["node"], end["receptacle"])
        batch([f"link del {dev}"], ns=n["ns"], check=False)
        lines = [dangling_add_line(lab, end["node"], dev)]
        if _node_on(lab, end["node"]):
            lines.append(f"link set {dev} up")
        batch(lines, ns=n["ns"])


def _node_on(lab: dict, node: str) -> bool:
    import os

    from .macos.common import read_json

    state = os.environ.get("MACFLEET_LAB_STATE", "/run/macfleet-lab")
    return read_json(f"{state}/{lab['name']}/nodes/{node}/boot.json", {}).get("power") in ("on", "booting")


def cable_add_line(lab: dict, cable: dict) -> str:
    a, b = cable["a"], cable["b"]
    na, nb = lab["nodes"][a["node"]], lab["nodes"][b["node"]]
    da = specmod.device_of(lab, a["node"], a["receptacle"])
    db = specmod.device_of(lab, b["node"], b["receptacle"])
    ma = f"{na['mac_base']}:{0x80 + (a['receptacle'] - 1) * 4:02x}"
    mb = f"{nb['mac_base']}:{0x80 + (b['receptacle'] - 1) * 4:02x}"
    return (f"link add name {da} netns {na['ns']} address {ma} type veth "
            f"peer name {db} netns {nb['ns']} address {mb}")


def links_up(lab: dict, node: str) -> None:
    n = lab["nodes"][node]
    lines = ["link set lo up", f"addr replace {n['address']}/24 dev en0", "link set en0 up"]
    existing = set(_ns_links(n["ns"]))
    lines += [f"link set {d} up" for d in specmod.tb_devices(lab, node) if d in existing]
    batch(lines, ns=n["ns"])


def management_up(lab: dict, node: str) -> None:
    """Only the management port, with the node's address: a FileVault Mac at its unlock screen answers SSH there
    (apple_ssh_and_filevault(7)); its Thunderbolt Bridge and IP plan live on the locked Data volume."""
    n = lab["nodes"][node]
    batch(["link set lo up", f"addr replace {n['address']}/24 dev en0", "link set en0 up"], ns=n["ns"])


def links_down(lab: dict, node: str) -> None:
    """As a Mac going down: every interface down, addresses and the bridge gone (ifconfig state is lost)."""
    n = lab["nodes"][node]
    existing = set(_ns_links(n["ns"]))
    lines = []
    if "bridge0" in existing:
        lines.append("link del bridge0")
    for d in ["en0", *specmod.tb_devices(lab, node)]:
        if d in existing:
            lines += [f"addr flush dev {d}", f"link set {d} down"]
    batch(lines, ns=n["ns"], check=False)


def _ns_links(ns: str) -> list[str]:
    p = run([IP, "-n", ns, "-j", "link", "show"], check=False)
    try:
        return [x["ifname"] for x in json.loads(p.stdout or "[]")]
    except json.JSONDecodeError:
        return []


def destroy(ns_names: list[str], bridge: str | None, host_veths: list[str]) -> None:
    present = set(netns_list())
    batch([f"netns del {ns}" for ns in ns_names if ns in present], check=False)
    links = set(links_root())
    lines = [f"link del {v}" for v in host_veths if v in links]
    if bridge and bridge in links:
        lines.append(f"link del {bridge}")
    batch(lines, check=False)
