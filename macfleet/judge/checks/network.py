"""The Thunderbolt network: cabling, the Thunderbolt Bridge, the IP plan on each port, a ping over every good
link; and the packet filter's view of a port (read by the exo and llama-rpc checks)."""

from __future__ import annotations

import ipaddress
import re

from macfleet.facts.commands import CommandSpec, ping_spec, probe_specs
from macfleet.facts.network import HardwarePortsFacts
from macfleet.facts.probes import (
    parse_pf_info,
    parse_pf_rules,
    parse_ping,
)
from macfleet.inventory.model import Fleet
from macfleet.judge.checks.base import (
    Answers,
    Check,
    HealthContext,
    HealthFinding,
    NodeFacts,
    Probe,
    Scope,
    Unknown,
    Verdict,
    kind_probe,
    parsed,
    pick,
)
from macfleet.judge.ipplan import BRIDGE_DEVICE, IpPlan, NodeNetworkFacts, bind_ports, diff_ip, plan_ip
from macfleet.judge.model import Change
from macfleet.judge.pf import exposure
from macfleet.judge.topology import TopologyReport


def ok_cable_ends(report: TopologyReport, node: str) -> dict[str, str]:
    """This node's devices (enX) whose cable the cabling check found good, with the peer on the other end."""
    out = {}
    for lk in report.links:
        if lk.state != "ok" or lk.problems:
            continue
        for me, peer in ((lk.a, lk.b), (lk.b, lk.a)):
            if me.node == node and me.device:
                out[me.device] = peer.node
    return out


def check_cabling_node(ctx: HealthContext, node: str) -> Verdict:
    report = ctx.cabling.get(ctx.mesh_of(node).name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    mine = [f for f in report.findings if node in f.nodes and f.code != "unreachable"]
    if any(f.code == "no-facts" for f in mine):
        return Unknown(reason=next(f.message for f in mine if f.code == "no-facts"))
    return [HealthFinding(node=node, check="cabling", severity="error" if f.severity == "error" else "warning",
                          message=f.message, fix=f.fix, evidence="; ".join(f.evidence) or f.code)
            for f in mine]


def _network_facts(f: NodeFacts) -> NodeNetworkFacts:
    return NodeNetworkFacts(hardware_ports=f.hardware_ports, service_order=f.service_order, ifconfig=f.ifconfig,
                            netstat_routes=f.netstat_routes)


def _bridge_change(c: Change) -> bool:
    return BRIDGE_DEVICE in c.what or "Bridge" in c.what


def _ip_changes(ctx: HealthContext, node: str) -> list[Change] | Unknown:
    f = ctx.facts[node]
    if f.ifconfig is None or f.service_order is None or f.hardware_ports is None:
        return Unknown(reason=f.why("ifconfig", "service-order", "hardware-ports"))
    mesh = ctx.mesh_of(node)
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    plan = bind_ports(plan_ip(ctx.fleet, mesh.name), {mesh.name: report})
    # A port on a cable the cabling check flagged is reported there, not as address drift.
    bad = _bad_cable_devices(report, node, f.hardware_ports) | _resting_devices(plan, node, f)
    return [c for c in diff_ip(plan, node, _network_facts(f))
            if isinstance(c, Change) and not (set(re.findall(r"\ben\d+\b", c.what)) & bad)]


def _resting_devices(plan: IpPlan, node: str, f: NodeFacts) -> set[str]:
    """Ports that keep an address the plan gives this node, on a cable not seen now (its peer is dark or
    unreachable): that address is the plan's, not an old one to clear."""
    mine = {f"{e.address}/{lk.prefix}" for lk in plan.for_node(node) for e in (lk.a, lk.b) if e.node == node}
    out = set()
    for iface in f.ifconfig.interfaces if f.ifconfig else []:
        if iface.name and any(f"{a.address}/{a.prefixlen}" in mine for a in iface.inet):
            out.add(iface.name)
    return out


def _bad_cable_devices(report: TopologyReport, node: str, ports: HardwarePortsFacts | None) -> set[str]:
    """This node's devices on a cable the cabling check flagged (a bad link, or one seen from one end only)."""
    by_port = ports.by_thunderbolt() if ports else {}
    ends = [e for lk in report.links if lk.state != "ok" or lk.problems for e in (lk.a, lk.b)]
    ends += [e for h in report.half_links for e in (h.seen_from, h.far) if e is not None]
    out = set()
    for e in ends:
        if e.node != node:
            continue
        device = e.device or (by_port[e.receptacle].device if e.receptacle in by_port else None)
        if device:
            out.add(device)
    return out


def check_bridge(ctx: HealthContext, node: str) -> Verdict:
    changes = _ip_changes(ctx, node)
    if isinstance(changes, Unknown):
        return changes
    bridge = [c for c in changes if _bridge_change(c)]
    if not bridge:
        return []
    return [HealthFinding(
        node=node, check="bridge", severity="error",
        message=f"the Thunderbolt Bridge is on on {node}: its Thunderbolt ports are bridged, so they carry no "
                "address of their own and RDMA has no IPv4-mapped GID",
        fix="`macfleet doctor --fix` (or `macfleet topology apply`) switches it off and restores the IP plan",
        evidence="; ".join(c.what for c in bridge))]


def _foreign(ctx: HealthContext, before: str | None) -> list[str]:
    """Addresses on a Thunderbolt port that are not the IP plan's (put there by hand or by another tool)."""
    pools = {m.settings.ipplan.pool for m in ctx.meshes}
    out = []
    for a in (before or "").split(", "):
        try:
            ip = ipaddress.IPv4Interface(a).ip
        except ValueError:
            continue
        if not any(ip in p for p in pools):
            out.append(a)
    return out


def _foreign_routes(ctx: HealthContext, f: NodeFacts, devices: set[str], foreign: list[str]) -> list[str]:
    """Routes through these Thunderbolt ports to networks outside the IP plan's pools, other than a foreign
    address's own subnet (`route add|change … -interface enX` by another tool)."""
    if f.netstat_routes is None:
        return []
    pools = {m.settings.ipplan.pool for m in ctx.meshes}
    own = {str(ipaddress.IPv4Interface(a).network) for a in foreign}
    out = []
    for r in f.netstat_routes.routes:
        if r.netif not in devices or r.network is None or r.network in own or r.destination == "default":
            continue
        net = ipaddress.IPv4Network(r.network, strict=False)
        if not any(net.subnet_of(p) for p in pools) and not net.is_link_local:
            out.append(f"{r.network} on {r.netif}")
    return out


def _foreign_note(foreign: list[str], routes: list[str]) -> str:
    if not foreign and not routes:
        return ""
    apipa = [a for a in foreign if a.startswith("169.254.")]
    if apipa and len(apipa) == len(foreign) and not routes:
        return f"; {', '.join(apipa)} is self-assigned: the port's service is on DHCP, not the plan's manual address"
    what = ", ".join(foreign) + (" and " if foreign and routes else "") + (
        f"the route{'s' if len(routes) > 1 else ''} to {', '.join(routes)}" if routes else "")
    return (f"; {what} {'are' if len(foreign) + len(routes) > 1 else 'is'} not the plan's: put there by another "
            "tool (`ifconfig … inet`, `route add|change`), not saved, so gone at the next reboot, when the plan's "
            "address returns")


def check_ip_plan(ctx: HealthContext, node: str) -> Verdict:
    changes = _ip_changes(ctx, node)
    if isinstance(changes, Unknown):
        return changes
    out = []
    for c in changes:
        if _bridge_change(c):
            continue
        foreign = _foreign(ctx, c.before)
        routes = _foreign_routes(ctx, ctx.facts[node], set(re.findall(r"\ben\d+\b", c.what)), foreign)
        note = _foreign_note(foreign, routes)
        out.append(HealthFinding(
            node=node, check="ip-plan", severity="error",
            message=f"{node}: the IP plan wants to {c.what}; now: {c.before or 'nothing'}{note}",
            fix="`macfleet doctor --fix` (or `macfleet topology apply`) restores the plan now",
            evidence=f"{c.what}: {c.before!r} -> {c.after!r}" + (f"; routes: {', '.join(routes)}" if routes else "")))
    return out


# --------------------------------------------------------------------------------- the packet filter on a port

LOOPBACK = "lo0"


def _thunderbolt_devices(f: NodeFacts) -> set[str] | None:
    if f.hardware_ports is None:
        return None
    return {p.device for p in f.hardware_ports.by_thunderbolt().values() if p.device}


def pf_exposure(f: NodeFacts, port: int, *, sources_ok: bool) -> str | Unknown | None:
    """Why the packet filter leaves TCP `port` open to the LAN on this node (pf off, or the anchor), None when
    it does not, Unknown when pf or the ports could not be read."""
    if f.pf_info is None or f.pf_rules is None:
        return Unknown(reason=f.why("pf-info", "pf-rules"))
    if not f.pf_info.enabled:
        return f"pf is off ({f.pf_info.status_line})"
    tb = _thunderbolt_devices(f)
    if tb is None:
        return Unknown(reason=f.why("hardware-ports"))
    return exposure(f.pf_rules, port, tb | {LOOPBACK}, sources_ok=sources_ok)


# ------------------------------------------------------------------------------------- ping over each link


def ping_targets(fleet: Fleet, mesh: str, node: str) -> dict[str, str]:
    """The peers of `node` in the IP plan, by their address on the link between them (what doctor pings)."""
    out = {}
    for lk in plan_ip(fleet, mesh).for_node(node):
        peer = lk.b if lk.a.node == node else lk.a
        out[peer.address] = peer.node
    return out


# A peer whose own address or cable is already a finding: the ping to it would only repeat that.
PING_PEER_DEPENDS = ("cabling", "bridge", "ip-plan")


def _ping_clear(ctx: HealthContext, peer: str) -> bool:
    return ctx.up(peer) and not ctx.found_by(peer, PING_PEER_DEPENDS)


def check_tb_ping(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    mesh = ctx.mesh_of(node)
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    cabled = set(ok_cable_ends(report, node).values())
    out: list[HealthFinding] = []
    unknown = []
    for address, peer in sorted(ping_targets(ctx.fleet, mesh.name, node).items(), key=lambda t: t[1]):
        if peer not in cabled or not _ping_clear(ctx, peer):
            continue
        ping = f.pings.get(address)
        if ping is None:
            unknown.append(f"{peer}: {f.why(f'tb-ping:{address}')}")
        elif ping.received == 0:
            out.append(HealthFinding(
                node=node, check="tb-ping", severity="error",
                message=f"{node} gets no answer from {peer} at {address} over their Thunderbolt link, although "
                        "the cable and both ends' addresses are as planned",
                fix=f"check the packet filter on {peer} (`sudo pfctl -s info`) and the link (`macfleet topology "
                    "check`); if both are fine, reseat the cable, then reboot the mesh (`macfleet reboot`)",
                evidence=f"ping -c 1 {address}: {ping.transmitted} sent, 0 received"))
    if unknown and not out:
        return Unknown(reason="; ".join(unknown))
    return out


# ------------------------------------------------------------------------------------------- declarations

# What the cabling is judged from (judge/topology.py): every check that reads the cabling reads these.
CABLING = ("thunderbolt", "hardware-ports", "ibv-devices", "ibv-devinfo:verbose", "ifconfig")
# ... and the IP plan's view of a node's ports (judge/ipplan.py): its service order and routes besides.
ADDRESSES = (*CABLING, "service-order", "netstat-routes")


def _pings(scope: Scope) -> tuple[CommandSpec, ...]:
    """One short ping to every peer of the IP plan, at the peer's address on their link."""
    return tuple(ping_spec(a) for a in ping_targets(scope.fleet, scope.mesh.name, scope.node))


def _read_pings(answers: Answers) -> dict[str, object]:
    pings = {}
    for key in answers.keys("tb-ping"):
        ping = parsed(answers, key, parse_ping)
        if ping is not None:
            pings[key.split(":", 1)[1]] = ping
    return {"pings": pings}


PROBES = (
    kind_probe("thunderbolt", "thunderbolt"),
    kind_probe("hardware_ports", "hardware-ports"),
    kind_probe("service_order", "service-order"),
    kind_probe("ifconfig", "ifconfig"),
    kind_probe("netstat_routes", "netstat-routes"),  # routes another tool put on a Thunderbolt port
    Probe(key="tb-ping", command=_pings, read=_read_pings, fills=("pings",)),
    # the two pfctl reads bootstrap's sudoers drop-in allows
    Probe(key="pf-info", command=lambda s: pick(probe_specs(), "pf-info"), fact="pf_info", parse=parse_pf_info),
    Probe(key="pf-rules", command=lambda s: pick(probe_specs(), "pf-rules"), fact="pf_rules", parse=parse_pf_rules),
)
_R = ("reachable",)
CHECKS = (
    Check(code="cabling", title="every pair cabled once, directly, at 80 Gb/s, on RDMA-capable ports", order=30,
          judge=check_cabling_node, reads=CABLING, depends=_R, mesh_wide=True),
    Check(code="bridge", title="the Thunderbolt Bridge is off", order=40, judge=check_bridge, reads=ADDRESSES,
          depends=_R, fix="network"),
    Check(code="ip-plan", title="each Thunderbolt port carries its planned address and nothing else", order=50,
          judge=check_ip_plan, reads=ADDRESSES, depends=(*_R, "bridge"), fix="network", mesh_wide=True),
    Check(code="tb-ping", title="each end of every good Thunderbolt link answers a ping at its planned address",
          order=210, judge=check_tb_ping, reads=(*CABLING, "tb-ping"), depends=(*_R, *PING_PEER_DEPENDS),
          peers_depend=PING_PEER_DEPENDS, mesh_wide=True),
)
