"""The IP plan: one /30 (or /31) per cable, keyed by the pair of Macs, never by the port.

Allocation (the same rule the inventory loader uses to check pool capacity): mesh k, in inventory order,
owns subnets [32k, 32k+32) of its pool; within a mesh the pair (i < j) of nodes in inventory order gets
index j*(j-1)/2 + i, so appending a Mac never moves an existing link. /30: .1 to the node that comes first,
.2 to the other; /31: .0 and .1. The interface each address goes on is read from the live cable to that
peer, so moving a cable to another port keeps its subnet and only changes the interface.

Pure: inventory + facts in, plan / changes / findings out.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts, RoutesFacts, ServiceOrderFacts
from macfleet.facts.registry import KINDS
from macfleet.inventory.model import SUBNETS_PER_MESH, Fleet, Mesh
from macfleet.judge.model import Change, Finding, Noop, Refusal
from macfleet.judge.topology import TopologyReport

BRIDGE_DEVICE = "bridge0"
BRIDGE_HARDWARE_PORT = "Thunderbolt Bridge"
# A service name reaches networksetup as one argv word, never through a shell; still, refuse anything
# that could not have come from System Settings (control characters, leading dashes).
SAFE_NAME = re.compile(r"^[^\x00-\x1f\x7f-][^\x00-\x1f\x7f]{0,62}$")
SAFE_DEVICE = re.compile(r"^[a-z]+[0-9]+$")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IpEnd(_Model):
    node: str
    address: str
    port: str | None = None  # enX carrying the cable to the peer, read from the live link; None: not cabled
    receptacle: int | None = None
    hardware_port: str | None = None  # "Thunderbolt N"


class IpLink(_Model):
    mesh: str
    index: int  # the pair's index within its mesh
    a: IpEnd  # the node that comes first in the inventory
    b: IpEnd
    subnet: str
    prefix: int

    @property
    def netmask(self) -> str:
        return str(ipaddress.IPv4Network(self.subnet).netmask)

    def end(self, node: str) -> IpEnd | None:
        return self.a if self.a.node == node else self.b if self.b.node == node else None

    def other(self, node: str) -> IpEnd:
        return self.b if self.a.node == node else self.a


class Drift(_Model):
    node: str
    port: str
    expected: str  # "10.213.0.1/30"
    found: list[str]  # what the interface has now


class IpPlan(_Model):
    links: list[IpLink]
    mtu: dict[str, int] = Field(default_factory=dict)  # node -> MTU for its Thunderbolt interfaces
    drift: list[Drift] = Field(default_factory=list)

    def for_node(self, node: str) -> list[IpLink]:
        return [lk for lk in self.links if node in (lk.a.node, lk.b.node)]

    def json_payload(self) -> dict:
        def end(e: IpEnd) -> dict:
            return {"node": e.node, "port": e.port, "address": e.address}

        return {
            "links": [{"a": end(lk.a), "b": end(lk.b), "subnet": lk.subnet} for lk in self.links],
            "drift": [d.model_dump() for d in self.drift],
        }


# --------------------------------------------------------------------------------------------- planning


def pair_index(i: int, j: int) -> int:
    """The index of the pair of nodes at positions i < j: j*(j-1)/2 + i (stable when nodes are appended)."""
    if not 0 <= i < j:
        raise ValueError(f"pair ({i}, {j}) is not i < j")
    return j * (j - 1) // 2 + i


def link_subnet(pool: ipaddress.IPv4Network, prefix: int, mesh_ordinal: int, index: int) -> ipaddress.IPv4Network:
    if index >= SUBNETS_PER_MESH:
        raise ValueError(f"pair index {index} is beyond the {SUBNETS_PER_MESH} subnets reserved per mesh")
    n = mesh_ordinal * SUBNETS_PER_MESH + index
    size = 2 ** (32 - prefix)
    first = int(pool.network_address) + n * size
    net = ipaddress.IPv4Network((first, prefix))
    if not net.subnet_of(pool):
        raise ValueError(f"subnet #{n} of {pool} does not fit in the pool")
    return net


def _addresses(net: ipaddress.IPv4Network) -> tuple[str, str]:
    base = int(net.network_address)
    if net.prefixlen == 31:
        return str(ipaddress.IPv4Address(base)), str(ipaddress.IPv4Address(base + 1))
    return str(ipaddress.IPv4Address(base + 1)), str(ipaddress.IPv4Address(base + 2))


def _mesh_ordinals(fleet: Fleet) -> dict[str, int]:
    """Each mesh's ordinal among the meshes sharing its pool (and prefix), in inventory order."""
    seen: dict[tuple[str, int], int] = {}
    out: dict[str, int] = {}
    for m in fleet.meshes:
        key = (str(m.settings.ipplan.pool), m.settings.ipplan.prefix)
        out[m.name] = seen.get(key, 0)
        seen[key] = out[m.name] + 1
    return out


def plan_mesh(mesh: Mesh, mesh_ordinal: int) -> list[IpLink]:
    settings = mesh.settings.ipplan
    names = mesh.node_names
    out = []
    for j in range(len(names)):
        for i in range(j):
            idx = pair_index(i, j)
            net = link_subnet(settings.pool, settings.prefix, mesh_ordinal, idx)
            a_addr, b_addr = _addresses(net)
            out.append(IpLink(mesh=mesh.name, index=idx, a=IpEnd(node=names[i], address=a_addr),
                              b=IpEnd(node=names[j], address=b_addr), subnet=str(net), prefix=settings.prefix))
    return sorted(out, key=lambda lk: lk.index)


def plan_ip(fleet: Fleet, mesh: str | None = None) -> IpPlan:
    """The plan from the inventory alone (no ports yet): every pair of every mesh, or of `mesh`."""
    ordinals = _mesh_ordinals(fleet)
    links: list[IpLink] = []
    mtu: dict[str, int] = {}
    for m in fleet.meshes:
        if mesh is not None and m.name != mesh:
            continue
        links += plan_mesh(m, ordinals[m.name])
        mtu.update({n: m.settings.ipplan.mtu for n in m.node_names})
    return IpPlan(links=links, mtu=mtu)


def bind_ports(plan: IpPlan, reports: Mapping[str, TopologyReport]) -> IpPlan:
    """Put each planned address on the interface that carries the live cable to that peer.

    With several cables between a pair, the one the cabling check keeps (not flagged "doubled-pair") wins.
    """
    out = []
    for lk in plan.links:
        report = reports.get(lk.mesh)
        cables = report.pair_links(lk.a.node, lk.b.node) if report else []
        live = [c for c in cables if "doubled-pair" not in c.problems]
        if not live:
            out.append(lk)
            continue
        cable = live[0]
        ends = {cable.a.node: cable.a, cable.b.node: cable.b}

        def bound(e: IpEnd, ends: dict = ends) -> IpEnd:
            c = ends[e.node]
            return e.model_copy(update={"port": c.device, "receptacle": c.receptacle,
                                        "hardware_port": f"Thunderbolt {c.receptacle}"})

        out.append(lk.model_copy(update={"a": bound(lk.a), "b": bound(lk.b)}))
    return plan.model_copy(update={"links": out})


# ------------------------------------------------------------------------------------------ live state


class NodeNetworkFacts(_Model):
    """What the IP plan reads from one node before changing anything."""

    hardware_ports: HardwarePortsFacts | None = None
    service_order: ServiceOrderFacts | None = None
    ifconfig: IfconfigFacts | None = None
    netstat_routes: RoutesFacts | None = None
    problems: list[str] = Field(default_factory=list)  # why a fact above is None: "ifconfig: timed out..."


def _iface_addrs(ifconfig: IfconfigFacts | None, device: str) -> list[str]:
    iface = ifconfig.get(device) if ifconfig else None
    if iface is None:
        return []
    return [f"{a.address}/{a.prefixlen}" if a.prefixlen is not None else a.address for a in iface.inet]


def find_drift(plan: IpPlan, facts: Mapping[str, NodeNetworkFacts]) -> list[Drift]:
    """Cabled ends whose interface does not carry (only) the planned address."""
    out = []
    for lk in plan.links:
        for e in (lk.a, lk.b):
            f = facts.get(e.node)
            if e.port is None or f is None or f.ifconfig is None:
                continue
            found = _iface_addrs(f.ifconfig, e.port)
            want = f"{e.address}/{lk.prefix}"
            if found != [want]:
                out.append(Drift(node=e.node, port=e.port, expected=want, found=found))
    return out


def with_drift(plan: IpPlan, facts: Mapping[str, NodeNetworkFacts]) -> IpPlan:
    return plan.model_copy(update={"drift": find_drift(plan, facts)})


def _thunderbolt_devices(f: NodeNetworkFacts) -> set[str]:
    if f.hardware_ports is None:
        return set()
    return {p.device for p in f.hardware_ports.ports if p.thunderbolt is not None}


def find_collisions(plan: IpPlan, facts: Mapping[str, NodeNetworkFacts],
                    management: Mapping[str, str] | None = None) -> list[Finding]:
    """Planned subnets that overlap a network a node already uses on a non-Thunderbolt interface (its LAN,
    Wi-Fi, a VPN...), a route of its own to such a network, or a node's management address. Thunderbolt
    ports are the plan's own: an address there is drift, not a collision. A node whose addresses or routes
    could not be read gets an `unread` finding: the check cannot say it is clear."""
    nets = [(lk, ipaddress.IPv4Network(lk.subnet)) for lk in plan.links]
    found: list[Finding] = []
    for node in sorted(facts):
        f = facts[node]
        found += _unread_findings(node, f)
        found += _route_collisions(node, f, nets)
        found += _interface_collisions(node, f, nets)
    for node, addr in sorted((management or {}).items()):
        try:
            ip = ipaddress.IPv4Address(addr)
        except ValueError:
            continue  # a host name: its address is on an interface checked above
        for lk, net in nets:
            if ip in net:
                found.append(Finding(
                    severity="error", code="pool-collision", nodes=[node],
                    message=f"{node}'s management address {addr} is inside the planned subnet {lk.subnet}",
                    fix="choose another pool (macfleet_ipplan.pool in group_vars)",
                ))
    return found


# What the collision check reads from each node: its addresses, its routes, and which interfaces are
# Thunderbolt ports (the plan's own, never a collision).
_COLLISION_INPUTS = ("ifconfig", "netstat-routes", "hardware-ports")


def _unread_findings(node: str, f: NodeNetworkFacts) -> list[Finding]:
    unread = [(kind, KINDS[kind].command) for kind in _COLLISION_INPUTS if getattr(f, kind.replace("-", "_")) is None]
    out = []
    for kind, command in unread:
        why = "; ".join(p.removeprefix(f"{kind}: ") for p in f.problems if p.startswith(f"{kind}:")) or "not read"
        out.append(Finding(
            severity="error", code="unread", nodes=[node],
            message=f"{node}: could not read `{command}` ({why}), so whether the plan collides with its "
                    "networks is unknown",
            fix=f"make `{command}` answer on {node} (run it there by hand), then run the command again",
        ))
    return out


def _interface_collisions(node: str, f: NodeNetworkFacts, nets: list[tuple[Any, ipaddress.IPv4Network]]
                          ) -> list[Finding]:
    if f.ifconfig is None:
        return []
    tb = _thunderbolt_devices(f)
    found = []
    for iface in f.ifconfig.interfaces:
        if iface.name is None or iface.name in tb:
            continue
        for a in iface.inet:
            prefix = a.prefixlen if a.prefixlen is not None else 32
            theirs = ipaddress.IPv4Network(f"{a.address}/{prefix}", strict=False)
            hits = [lk for lk, net in nets if net.overlaps(theirs)]
            if hits:
                found.append(_pool_collision(node, hits, f"{node} {iface.name} has {a.address}/{prefix}",
                                             f"{iface.name} inet {a.address}/{prefix}"))
    return found


CATCH_ALL_PREFIX = 16


def _route_collisions(node: str, f: NodeNetworkFacts,
                      nets: list[tuple[Any, ipaddress.IPv4Network]]) -> list[Finding]:
    """Routes through a gateway into a planned subnet (a VPN pushing 10.213.0.0/24, a static route): the
    network behind that gateway uses those addresses, so the pool is taken. Catch-all routes broader than
    /16 (a VPN's 10.0.0.0/8, the default route) say nothing about which addresses are in use and lose to the
    cables' own /30s anyway. Connected routes (`link#N`) and ARP entries (a MAC as gateway) are the
    interfaces' own networks, which the ifconfig check already judges."""
    if f.netstat_routes is None:
        return []
    tb = _thunderbolt_devices(f) | {"lo0", BRIDGE_DEVICE}
    found: list[Finding] = []
    for r in f.netstat_routes.routes:
        if r.network is None or r.netif in tb or r.gateway.startswith("link#") or ":" in r.gateway:
            continue
        route = ipaddress.IPv4Network(r.network)
        if route.prefixlen < CATCH_ALL_PREFIX:
            continue
        hits = [lk for lk, net in nets if net.overlaps(route)]
        if hits:
            found.append(_pool_collision(node, hits, f"{node} routes {r.destination} via {r.gateway} on {r.netif}",
                                         f"{r.netif} route {r.destination} {r.gateway} {r.flags}"))
    return found


def _pool_collision(node: str, hits: list[Any], what: str, evidence: str) -> Finding:
    subnets = ", ".join(lk.subnet for lk in hits[:4]) + (" …" if len(hits) > 4 else "")
    return Finding(
        severity="error", code="pool-collision", nodes=[node],
        message=f"{what}, which overlaps the planned Thunderbolt subnet(s) {subnets}",
        fix="choose another pool (macfleet_ipplan.pool in group_vars) that no node uses or routes elsewhere, "
            "then run `macfleet topology ipplan` again",
        evidence=[evidence],
    )


def refuse_on_collision(collisions: list[Finding]) -> Refusal | None:
    if not collisions:
        return None
    nodes = sorted({n for f in collisions for n in f.nodes})
    if all(f.code == "unread" for f in collisions):
        head = "the IP plan cannot be checked against every node's networks"
    elif any(f.code == "unread" for f in collisions):
        head = "the IP plan collides with networks already in use, and some could not be read"
    else:
        head = "the IP plan collides with networks already in use"
    return Refusal(reason=f"{head}; nothing was changed: " + "; ".join(f.message for f in collisions), nodes=nodes)


# -------------------------------------------------------------------------------------- what to change


def _services_by_device(f: NodeNetworkFacts) -> dict[str, list[tuple[str, bool]]]:
    out: dict[str, list[tuple[str, bool]]] = {}
    if f.service_order is None:
        return out
    for s in f.service_order.services:
        if s.device:
            out.setdefault(s.device, []).append((s.name, s.enabled))
    return out


def _service_name(f: NodeNetworkFacts, device: str, hardware_port: str) -> str:
    """The service to configure for `device`: the one already on it, else one named like its port."""
    existing = _services_by_device(f).get(device, [])
    if existing:
        return existing[0][0]
    taken = {s.name for s in f.service_order.services} if f.service_order else set()
    return hardware_port if hardware_port not in taken else f"macfleet {hardware_port}"


def network_vars(plan: IpPlan, node: str, f: NodeNetworkFacts) -> dict[str, Any]:
    """The decisions for one node, as the generated host_vars `playbooks/network.yml` applies."""
    interfaces = []
    planned_devices = set()
    for lk in plan.for_node(node):
        e, peer = lk.end(node), lk.other(node)
        assert e is not None
        if e.port is None or e.hardware_port is None:
            continue
        if not SAFE_DEVICE.match(e.port):
            raise ValueError(f"{node}: interface name {e.port!r} is not a BSD interface name")
        name = _service_name(f, e.port, e.hardware_port)
        if not SAFE_NAME.match(name):
            raise ValueError(f"{node}: service name {name!r} cannot be passed to networksetup safely")
        planned_devices.add(e.port)
        interfaces.append({
            "device": e.port,
            "hardware_port": e.hardware_port,
            "service": name,
            "address": e.address,
            "netmask": lk.netmask,
            "subnet": lk.subnet,
            "peer": peer.node,
            "peer_address": peer.address,
        })
    tb = sorted(_thunderbolt_devices(f), key=lambda d: (len(d), d))
    bridges = [s.name for s in (f.service_order.services if f.service_order else [])
               if s.device == BRIDGE_DEVICE or s.hardware_port == BRIDGE_HARDWARE_PORT]
    pool_nets = [ipaddress.IPv4Network(lk.subnet) for lk in plan.links]
    release = []
    by_dev = _services_by_device(f)
    for dev in tb:
        if dev in planned_devices:
            continue
        stale = [a for a in (f.ifconfig.get(dev).inet if f.ifconfig and f.ifconfig.get(dev) else [])
                 if any(ipaddress.IPv4Address(a.address) in n for n in pool_nets)]
        if stale:
            for svc, _enabled in by_dev.get(dev, []):
                release.append({"device": dev, "service": svc})
    return {
        "ipplan_interfaces": sorted(interfaces, key=lambda i: (len(i["device"]), i["device"])),
        "ipplan_mtu": plan.mtu.get(node, 1500),
        "ipplan_bridge_services": bridges or [BRIDGE_HARDWARE_PORT],
        "ipplan_thunderbolt_devices": tb,
        "ipplan_release_services": release,
    }


def diff_ip(plan: IpPlan, node: str, f: NodeNetworkFacts) -> list[Change | Noop]:
    """What applying the plan would change on `node`, or a Noop saying why nothing."""
    changes: list[Change | Noop] = []
    services = f.service_order.services if f.service_order else []
    for s in services:
        if (s.device == BRIDGE_DEVICE or s.hardware_port == BRIDGE_HARDWARE_PORT) and s.enabled:
            changes.append(Change(node=node, what=f"disable the {s.name!r} service", before="enabled",
                                  after="disabled"))
    bridge = f.ifconfig.get(BRIDGE_DEVICE) if f.ifconfig else None
    tb = _thunderbolt_devices(f)
    for m in (bridge.members if bridge else []):
        if m in tb:
            changes.append(Change(node=node, what=f"take {m} out of {BRIDGE_DEVICE}", before="member", after=None))
    data = network_vars(plan, node, f)
    by_dev = _services_by_device(f)
    for i in data["ipplan_interfaces"]:
        if not by_dev.get(i["device"]):
            changes.append(Change(node=node, what=f"create the service {i['service']!r} on {i['hardware_port']}",
                                  before=None, after=i["service"]))
        elif not by_dev[i["device"]][0][1]:
            changes.append(Change(node=node, what=f"enable the service {i['service']!r}", before="disabled",
                                  after="enabled"))
        prefix = ipaddress.IPv4Network(i["subnet"]).prefixlen
        want = f"{i['address']}/{prefix}"
        have = _iface_addrs(f.ifconfig, i["device"])
        if have != [want]:
            changes.append(Change(node=node, what=f"set {i['device']} to {want} (link to {i['peer']})",
                                  before=", ".join(have) or None, after=want))
        iface = f.ifconfig.get(i["device"]) if f.ifconfig else None
        if iface is not None and iface.mtu is not None and iface.mtu != data["ipplan_mtu"]:
            changes.append(Change(node=node, what=f"set the MTU of {i['device']} to {data['ipplan_mtu']}",
                                  before=str(iface.mtu), after=str(data["ipplan_mtu"])))
    for r in data["ipplan_release_services"]:
        changes.append(Change(node=node, what=f"clear the old address of {r['device']} ({r['service']!r})",
                              before="manual", after="DHCP"))
    if not changes:
        n = len(data["ipplan_interfaces"])
        changes.append(Noop(node=node, reason=f"bridge off and {n} Thunderbolt interface(s) already as planned"))
    return changes
