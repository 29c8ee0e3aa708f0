"""exo's discovery across one mesh: one master followed by every node, and rank-0 addresses a peer can reach.

Splits are reported by exo's users: every node electing itself master (exo PR #2192, issues #2257, #2271), a
restarted master left out of the election (exo#2197); master and worker choosing different addresses for the
master, one of them on the Thunderbolt Bridge (exo#2309, #2310). exo puts JACCL's coordinator on a non-
Thunderbolt interface on purpose (en0 first: exo PR #1059), so an Ethernet address is not a finding here; an
address rank 0 does not hold, or holds on the Thunderbolt Bridge, is.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from macfleet.facts.discovery import ANY_ADDRESS, SELF, Coordinators
from macfleet.judge.ipplan import BRIDGE_DEVICE


@dataclass
class NodeDiscovery:
    """What one node's exo says: its id, the master it follows (None: not in its log), whom its /state shows,
    its instances' rank-0 addresses; and the IPv4 addresses of each of the node's interfaces."""

    node_id: str | None
    master: str | None  # a node id, or SELF
    sees: set[str] = field(default_factory=set)  # node ids in its /state topology
    coordinators: list[Coordinators] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)  # ipv4 -> interface


@dataclass(frozen=True)
class DiscoveryFinding:
    kind: str  # "split-master", "coordinator"
    nodes: tuple[str, ...]
    message: str
    fix: str
    evidence: str


RESTART_TOGETHER = ("stop exo on every node of the mesh, then start it on all of them together so they hold one "
                    "election (`macfleet reboot` does both; `exo -m` on one node makes it win); if it splits again, "
                    "check the Thunderbolt addresses (`macfleet topology ipplan`) and that every node runs one exo "
                    "version")


def _name(ids: dict[str, str], node_id: str) -> str:
    return ids.get(node_id, f"an exo node not in this mesh ({node_id[:12]})")


def masters(mesh: dict[str, NodeDiscovery]) -> list[DiscoveryFinding]:
    """More than one master followed among the mesh's nodes."""
    ids = {d.node_id: n for n, d in mesh.items() if d.node_id}
    followed: dict[str, list[str]] = {}
    for n, d in sorted(mesh.items()):
        if d.master is not None and d.node_id is not None:
            followed.setdefault(d.node_id if d.master == SELF else d.master, []).append(n)
    if len(followed) <= 1:
        return []
    groups = "; ".join(f"{', '.join(ns)} follow{'s' if len(ns) == 1 else ''} {_name(ids, m)}"
                       for m, ns in followed.items())
    smallest = min(followed.values(), key=lambda ns: (len(ns), ns))  # named first: most likely the odd one out
    rest = sorted(n for ns in followed.values() for n in ns if n not in smallest)
    return [DiscoveryFinding("split-master", (*smallest, *rest),
                             f"exo's cluster is split: {len(followed)} masters ({groups})", RESTART_TOGETHER,
                             "the last election outcome in each node's exo log")]


def coordinators(mesh: dict[str, NodeDiscovery]) -> list[DiscoveryFinding]:
    """Each rank-0 address a node was given must be one rank 0 holds, and not on its Thunderbolt Bridge."""
    ids = {d.node_id: n for n, d in mesh.items() if d.node_id}
    out = []
    seen: set[tuple[str, str, str]] = set()
    for d in mesh.values():
        for inst in d.coordinators:
            rank0 = [i for i, a in inst.addresses.items() if ANY_ADDRESS in a]
            if len(rank0) != 1 or rank0[0] not in ids:
                continue
            owner = mesh[ids[rank0[0]]]
            if not owner.addresses:
                continue  # its addresses could not be read: said by the checks that read them
            for nid, addrs in inst.addresses.items():
                for ip in addrs:
                    if nid == rank0[0] or nid not in ids or (inst.instance_id, nid, ip) in seen:
                        continue
                    seen.add((inst.instance_id, nid, ip))
                    iface = owner.addresses.get(ip)
                    if iface is not None and iface != BRIDGE_DEVICE:
                        continue
                    out.append(_coordinator_finding(inst, ids[nid], ids[rank0[0]], ip, iface))
    return out


def _coordinator_finding(inst: Coordinators, node: str, rank0: str, ip: str, iface: str | None) -> DiscoveryFinding:
    where = f"on its Thunderbolt Bridge ({BRIDGE_DEVICE})" if iface == BRIDGE_DEVICE else "which it does not hold"
    fix = ("switch the Thunderbolt Bridge off (`macfleet doctor --fix`), then restart exo on the mesh so the "
           "instance is placed again" if iface == BRIDGE_DEVICE else
           "restart exo on the mesh so the instance is placed again with rank 0's current addresses; check the IP "
           "plan (`macfleet topology ipplan`)")
    return DiscoveryFinding("coordinator", (node, rank0),
                            f"exo told {node} to reach rank 0 of instance {inst.instance_id[:12]} ({rank0}) at {ip}, "
                            f"{where}: {node}'s runner cannot connect",
                            fix, f"{inst.backend} on {node}: {ip}; {rank0}'s addresses checked")
