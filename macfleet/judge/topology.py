"""Cabling: is the mesh the inventory implies really there, and the cabling sheet that builds it.

`check_cabling` takes one collection pass of facts (cable ends are matched by `facts.links`, by domain UUID
both ways) and judges it against the full mesh: every pair linked exactly once, directly, at 80 Gb/s, on
RDMA-capable ports at both ends, both ends agreeing. Every finding carries a concrete fix naming ports.

`plan_cabling` is the sheet an operator cables from: which port of which Mac into which port of which,
using only each model's RDMA-capable ports. The rule is one an operator can remember: on every Mac, the
k-th other Mac (in inventory order) is on its k-th RDMA-capable port. Appending a Mac to the inventory
therefore never moves an existing cable.

Pure: facts + inventory in, decisions out. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macfleet.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_UNREACHABLE
from macfleet.facts.links import Link as FactLink
from macfleet.facts.links import LinkObservation, match_links
from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts
from macfleet.facts.portmap import PortMap, build_port_map
from macfleet.facts.rdma import IbvDevicesFacts, IbvDevinfoFacts
from macfleet.facts.thunderbolt import ThunderboltFacts
from macfleet.inventory.model import MacModelSpec, Mesh
from macfleet.judge.model import Finding, Severity, sort_findings
from macfleet.judge.reach import unreachable_fix

RDMA_SPEED_GBPS = 80.0

LinkState = Literal["ok", "slow", "wrong-port", "doubled", "hub", "disagree"]
# When a cable has several problems, the one drawn is the worst (first here).
STATE_ORDER: tuple[str, ...] = ("hub", "wrong-port", "doubled", "slow", "disagree", "ok")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ------------------------------------------------------------------------------------------------ inputs


class NodeTopologyFacts(_Model):
    """What one node told us in one pass. Any fact may be missing (None); `problems` says why."""

    thunderbolt: ThunderboltFacts | None = None
    hardware_ports: HardwarePortsFacts | None = None
    ibv_devices: IbvDevicesFacts | None = None
    ibv_devinfo: IbvDevinfoFacts | None = None
    ifconfig: IfconfigFacts | None = None
    problems: list[str] = Field(default_factory=list)  # "ibv_devinfo: timed out after 10 s"...

    def port_map(self) -> PortMap | None:
        if self.thunderbolt is None:
            return None
        return build_port_map(self.thunderbolt, self.hardware_ports, self.ifconfig, self.ibv_devices,
                              self.ibv_devinfo)


# ----------------------------------------------------------------------------------------------- outputs


class End(_Model):
    node: str
    receptacle: int
    device: str | None = None  # enX read from -listallhardwareports; None when it was not collected


class TopologyLink(_Model):
    """A cable seen from both ends. `a` is the end whose node comes first in the inventory."""

    a: End
    b: End
    speed_gbps: float | None
    state: LinkState = "ok"
    problems: list[str] = Field(default_factory=list)  # finding codes about this cable
    via: list[str] = Field(default_factory=list)  # hubs/docks in the path


class HalfLink(_Model):
    """A cable only one end reports (or a hub hides from one side)."""

    seen_from: End
    far: End | None  # the far end when it is one of the collected nodes
    via: list[str] = Field(default_factory=list)


class MissingPair(_Model):
    a: str
    b: str
    a_receptacle: int | None = None  # the port the fix suggests; None when the node has no free one
    b_receptacle: int | None = None


class TopologyReport(_Model):
    mesh: str
    nodes: list[str]
    links: list[TopologyLink]
    findings: list[Finding]
    missing: list[MissingPair] = Field(default_factory=list)
    half_links: list[HalfLink] = Field(default_factory=list)
    unreachable: dict[str, str] = Field(default_factory=dict)
    ports: dict[str, list[int]] = Field(default_factory=dict)  # each node's RDMA-capable receptacles

    @property
    def clean(self) -> bool:
        return not self.findings

    def pair_links(self, x: str, y: str) -> list[TopologyLink]:
        return [lk for lk in self.links if {lk.a.node, lk.b.node} == {x, y}]

    def json_payload(self) -> dict:
        """The documented `topology check --json` shape, nothing more."""

        def end(e: End) -> dict:
            return {"node": e.node, "receptacle": e.receptacle, "device": e.device}

        return {
            "nodes": list(self.nodes),
            "links": [{"a": end(lk.a), "b": end(lk.b), "speed_gbps": lk.speed_gbps} for lk in self.links],
            "findings": [
                {"severity": f.severity, "code": f.code, "nodes": list(f.nodes), "message": f.message, "fix": f.fix}
                for f in self.findings
            ],
        }


# -------------------------------------------------------------------------------------------- the plan


class PlannedEnd(_Model):
    node: str
    receptacle: int
    where: str | None = None  # "rear, third from Ethernet"
    label: str | None = None  # the operator's own label (macfleet_port_labels)


class PlannedCable(_Model):
    a: PlannedEnd
    b: PlannedEnd


class PlannedNode(_Model):
    name: str
    model: str  # catalogue slug
    marketing_name: str
    rdma_receptacles: list[int]
    all_receptacles: list[int]
    not_rdma: dict[int, str] = Field(default_factory=dict)  # receptacle -> where (ports never to use)


class CablingPlan(_Model):
    nodes: list[PlannedNode]
    cables: list[PlannedCable]
    feasible: bool
    problems: list[str] = Field(default_factory=list)

    def port_for(self, node: str, peer: str) -> int | None:
        for c in self.cables:
            if (c.a.node, c.b.node) == (node, peer):
                return c.a.receptacle
            if (c.b.node, c.a.node) == (node, peer):
                return c.b.receptacle
        return None


def _where(spec: MacModelSpec, receptacle: int) -> str | None:
    return next((p.where for p in spec.thunderbolt_ports if p.receptacle == receptacle), None)


def plan_cabling(nodes: Sequence[tuple[str, MacModelSpec]], labels: Mapping[str, Mapping[int, str]] | None = None
                 ) -> CablingPlan:
    """The full-mesh cabling sheet for `nodes` (in inventory order), on RDMA-capable ports only.

    Mac i's k-th other Mac (in order) goes on Mac i's k-th RDMA-capable port (ascending receptacle).
    When a model has too few RDMA-capable ports for the mesh, the plan says so and holds no cables.
    """
    labels = labels or {}
    planned_nodes = [
        PlannedNode(
            name=name,
            model=spec.slug,
            marketing_name=spec.marketing_name,
            rdma_receptacles=[p.receptacle for p in spec.rdma_ports],
            all_receptacles=[p.receptacle for p in spec.thunderbolt_ports],
            not_rdma={p.receptacle: p.where for p in spec.thunderbolt_ports if not p.rdma_capable},
        )
        for name, spec in nodes
    ]
    names = [n for n, _ in nodes]
    problems: list[str] = []
    if len(set(names)) != len(names):
        problems.append("node names repeat: " + ", ".join(sorted({n for n in names if names.count(n) > 1})))
    n = len(nodes)
    by_model: dict[str, list[str]] = {}
    specs = {spec.slug: spec for _, spec in nodes}
    for name, spec in nodes:
        by_model.setdefault(spec.slug, []).append(name)
    for slug, members in by_model.items():
        spec = specs[slug]
        have = len(spec.rdma_ports)
        if n - 1 > have:
            excluded = "".join(
                f"; port {p.receptacle} ({p.where}) cannot do RDMA" for p in spec.thunderbolt_ports
                if not p.rdma_capable
            )
            who = members[0] if len(members) == 1 else f"{', '.join(members[:-1])} and {members[-1]}"
            has = "has" if len(members) == 1 else "have"
            problems.append(
                f"a full mesh of {n} Macs needs {n - 1} RDMA-capable Thunderbolt ports on each; "
                f"{who} ({spec.marketing_name} {spec.chip}) {has} {have}{excluded}: "
                f"at most {spec.max_full_mesh_nodes} such Macs in one mesh"
            )
    if problems:
        return CablingPlan(nodes=planned_nodes, cables=[], feasible=False, problems=problems)

    def end(i: int, peer: int) -> PlannedEnd:
        name, spec = nodes[i]
        rank = peer if peer < i else peer - 1
        receptacle = spec.rdma_ports[rank].receptacle
        return PlannedEnd(node=name, receptacle=receptacle, where=_where(spec, receptacle),
                          label=labels.get(name, {}).get(receptacle))

    cables = [PlannedCable(a=end(i, j), b=end(j, i)) for j in range(n) for i in range(j)]
    return CablingPlan(nodes=planned_nodes, cables=cables, feasible=True)


def plan_for_mesh(mesh: Mesh) -> CablingPlan | None:
    """The mesh's own cabling sheet, or None when a node's model is not in the catalogue."""
    specs = [(n.name, n.model_spec) for n in mesh.nodes]
    if any(s is None for _, s in specs):
        return None
    return plan_cabling([(n, s) for n, s in specs if s is not None], {n.name: n.port_labels for n in mesh.nodes})


# ------------------------------------------------------------------------------------------- the check


def _port(receptacle: int | None) -> str:
    return f"port {receptacle}" if receptacle is not None else "a free RDMA-capable port"


def _gbps(v: float | None) -> str:
    return "unknown speed" if v is None else f"{v:g} Gb/s"


class PortPool:
    """Which ports of each node can carry a mesh cable, which are taken, and the fixes' picks.

    The rules that suggest a port share one pool and pick in a fixed order (wrong-port moves, then the
    ports half-links hold, then missing pairs), so two fixes never send two cables into one port."""

    def __init__(self, mesh: Mesh, maps: Mapping[str, PortMap | None], plan: CablingPlan | None):
        self.nodes = {n.name: n for n in mesh.nodes}
        self.maps = maps
        self.plan = plan
        self.taken: dict[str, set[int]] = {}
        for name in self.nodes:
            pm = maps.get(name)
            self.taken[name] = {e.receptacle for e in pm.entries if e.connected} if pm else set()

    def capable(self, node: str) -> list[int]:
        spec = self.nodes[node].model_spec
        if spec is not None:
            return [p.receptacle for p in spec.rdma_ports]
        pm = self.maps.get(node)
        if pm is None:
            return []
        with_rdma = [e.receptacle for e in pm.entries if e.rdma_device]
        if with_rdma:
            return with_rdma
        return [e.receptacle for e in pm.entries if e.capability == "tb5"]

    def rdma_ok(self, node: str, receptacle: int) -> bool | None:
        """Can this port do RDMA? None when it cannot be told (unknown model and no RDMA facts)."""
        spec = self.nodes[node].model_spec
        if spec is not None:
            port = next((p for p in spec.thunderbolt_ports if p.receptacle == receptacle), None)
            return port.rdma_capable if port else False
        pm = self.maps.get(node)
        entry = pm.entry(receptacle) if pm else None
        if pm is None or entry is None or entry.device is None:
            return None
        if any(e.rdma_device for e in pm.entries):  # RDMA devices were listed: this port has none
            return entry.rdma_device is not None
        return None

    def where(self, node: str, receptacle: int) -> str | None:
        spec = self.nodes[node].model_spec
        return _where(spec, receptacle) if spec else None

    def device(self, node: str, receptacle: int) -> str | None:
        pm = self.maps.get(node)
        entry = pm.entry(receptacle) if pm else None
        return entry.device if entry else None

    def end(self, node: str, receptacle: int) -> End:
        return End(node=node, receptacle=receptacle, device=self.device(node, receptacle))

    def take(self, node: str, receptacle: int) -> None:
        self.taken[node].add(receptacle)

    def pick(self, node: str, peer: str) -> int | None:
        """A free RDMA-capable port on `node` for the cable to `peer`: the plan's port when free, else the
        lowest free one. Marks it taken."""
        free = [r for r in self.capable(node) if r not in self.taken[node]]
        preferred = self.plan.port_for(node, peer) if self.plan else None
        choice = preferred if preferred in free else (free[0] if free else None)
        if choice is not None:
            self.take(node, choice)
        return choice


class _Cable:
    """A confirmed cable, ends in inventory order, with the finding codes raised about it."""

    def __init__(self, a: End, b: End, link: FactLink):
        self.a, self.b, self.link = a, b, link
        self.codes: list[str] = []

    @property
    def text(self) -> str:
        return f"{self.a.node} port {self.a.receptacle} ↔ {self.b.node} port {self.b.receptacle}"

    @property
    def between(self) -> str:
        return f"{self.a.node} port {self.a.receptacle} and {self.b.node} port {self.b.receptacle}"

    def finding(self, code: str, severity: Severity, message: str, fix: str) -> Finding:
        self.codes.append(code)
        return Finding(severity=severity, code=code, nodes=[self.a.node, self.b.node], message=message, fix=fix)


def _unreachable_findings(mesh: Mesh, unreachable: Mapping[str, str]) -> list[Finding]:
    return [
        Finding(severity="error", code="unreachable", nodes=[name],
                message=f"{name} could not be reached: {unreachable[name]}; its cables are not judged",
                fix=unreachable_fix(name, unreachable[name], then=", then run the check again"))
        for name in mesh.node_names if name in unreachable
    ]


def _readable_thunderbolt(mesh: Mesh, facts_by_node: Mapping[str, NodeTopologyFacts],
                          unreachable: Mapping[str, str]) -> tuple[dict[str, ThunderboltFacts], list[Finding]]:
    """Each reached node's Thunderbolt facts; a node whose ports could not be read gets a finding instead."""
    tb: dict[str, ThunderboltFacts] = {}
    findings: list[Finding] = []
    for name in mesh.node_names:
        if name in unreachable:
            continue
        f = facts_by_node.get(name)
        if f is None or f.thunderbolt is None:
            why = "; ".join(f.problems) if f and f.problems else "no Thunderbolt facts were collected"
            findings.append(Finding(
                severity="error", code="no-facts", nodes=[name],
                message=f"{name}: cannot read its Thunderbolt ports ({why}); its cables are not judged",
                fix=f"run `system_profiler SPThunderboltDataType -json` on {name} by hand and fix what it reports",
            ))
            continue
        tb[name] = f.thunderbolt
    return tb, findings


def _confirmed_cables(links: list[FactLink], mesh: Mesh, pool: PortPool) -> list[_Cable]:
    """The cables both ends confirm, each with its ends in inventory order, sorted by inventory order."""
    order = {n: i for i, n in enumerate(mesh.node_names)}
    cables = []
    for lk in links:
        ea, eb = pool.end(lk.a.node, lk.a.receptacle), pool.end(lk.b.node, lk.b.receptacle)
        if order.get(ea.node, 1 << 30) > order.get(eb.node, 1 << 30):
            ea, eb = eb, ea
        cables.append(_Cable(ea, eb, lk))
    cables.sort(key=lambda c: (order.get(c.a.node, 99), order.get(c.b.node, 99), c.a.receptacle, c.b.receptacle))
    return cables


def _check_doubled(cables: list[_Cable], mesh: Mesh, pool: PortPool) -> tuple[set[int], list[Finding]]:
    """Pairs cabled more than once: keep the best cable, unplug the others. Returns the extras' indices."""
    by_pair: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(cables):
        by_pair.setdefault((c.a.node, c.b.node), []).append(i)

    def goodness(i: int) -> tuple:
        c = cables[i]
        ports_ok = (pool.rdma_ok(c.a.node, c.a.receptacle) is not False
                    and pool.rdma_ok(c.b.node, c.b.receptacle) is not False)
        fast = (c.link.speed_gbps or 0) >= RDMA_SPEED_GBPS
        return (not ports_ok, not fast, bool(c.link.via), c.a.receptacle, c.b.receptacle)

    extra: set[int] = set()
    findings: list[Finding] = []
    members = set(mesh.node_names)
    for (x, y), idx in by_pair.items():
        if x not in members or y not in members or len(idx) < 2:
            continue
        keep = min(idx, key=goodness)
        listed = ", ".join(cables[j].text for j in sorted(idx))
        for i in sorted(idx):
            if i == keep:
                continue
            extra.add(i)
            findings.append(cables[i].finding(
                "doubled-pair", "error",
                f"{x} and {y} are cabled {len(idx)} times ({listed}); "
                "a pair must have exactly one cable (extra cables mismatch RDMA interface pairing)",
                f"unplug the cable between {cables[i].between}"))
    return extra, findings


def _check_hub(c: _Cable) -> list[Finding]:
    if not c.link.via:
        return []
    hubs = ", ".join(c.link.via)
    return [c.finding("hub-in-path", "error", f"{c.text} goes through {hubs}; RDMA needs a direct Mac-to-Mac cable",
                      f"take out {hubs} and plug a Thunderbolt 5 cable from {c.a.node} port {c.a.receptacle} "
                      f"into {c.b.node} port {c.b.receptacle}")]


def _check_rdma_ports(c: _Cable, pool: PortPool) -> list[Finding]:
    """Ends on ports that cannot do RDMA: move each to a free capable port (picked from the pool)."""
    bad_ends = [e for e in (c.a, c.b) if pool.rdma_ok(e.node, e.receptacle) is False]
    if not bad_ends:
        return []
    moves = [(e, pool.pick(e.node, c.b.node if e is c.a else c.a.node)) for e in bad_ends]
    what = "; ".join(
        f"{e.node} port {e.receptacle}" + (f" ({w})" if (w := pool.where(e.node, e.receptacle)) else "")
        + " cannot do RDMA" for e, _ in moves)
    fix = " and ".join(f"move the {e.node} end from port {e.receptacle} to {_port(to)}" for e, to in moves)
    return [c.finding("wrong-port", "error", f"{c.text}: {what}", fix)]


def _check_speed(c: _Cable) -> list[Finding]:
    lk = c.link
    if lk.speed_gbps is not None and lk.speed_gbps < RDMA_SPEED_GBPS:
        return [c.finding(
            "slow-link", "error",
            f"{c.text} links at {_gbps(lk.speed_gbps)}; RDMA needs an 80 Gb/s Thunderbolt 5 link "
            "(a Thunderbolt 4 or USB cable, or a Thunderbolt 4 port, gives 40 Gb/s)",
            f"replace the cable between {c.between} with an 80 Gb/s Thunderbolt 5 cable")]
    ends = [s for s in (lk.a.speed_gbps, lk.b.speed_gbps) if s is not None]
    if len(ends) == 2 and ends[0] != ends[1]:
        return [c.finding(
            "ends-disagree", "warning",
            f"{c.text}: the two ends report different speeds ({_gbps(lk.a.speed_gbps)} and "
            f"{_gbps(lk.b.speed_gbps)})",
            f"reseat the cable between {c.between}, then run the check again")]
    return []


def _half_link_finding(here: End, far: End, via: tuple[str, ...]) -> Finding:
    nodes = [here.node, far.node]
    if via:
        hubs = ", ".join(via)
        return Finding(
            severity="error", code="hub-in-path", nodes=nodes,
            message=(f"{here.node} port {here.receptacle} reaches {far.node} port {far.receptacle} through "
                     f"{hubs}; RDMA needs a direct Mac-to-Mac cable"),
            fix=(f"take out {hubs} and plug a Thunderbolt 5 cable from {here.node} port {here.receptacle} "
                 f"into {far.node} port {far.receptacle}"))
    return Finding(
        severity="error", code="one-sided", nodes=nodes,
        message=(f"{here.node} port {here.receptacle} sees {far.node} port {far.receptacle}, but {far.node} "
                 f"does not see {here.node} there"),
        fix=(f"reseat the cable between {here.node} port {here.receptacle} and {far.node} port "
             f"{far.receptacle}; if it stays one-sided, replace the cable"))


def _unknown_mac_finding(mesh: Mesh, here: End, peer: str | None, via: list[str]) -> Finding:
    path = f" through {', '.join(via)}" if via else ""
    return Finding(
        severity="error", code="unknown-mac", nodes=[here.node],
        message=(f"{here.node} port {here.receptacle} is cabled{path} to a Mac ({peer}) that is "
                 f"not in mesh {mesh.name} of the inventory"),
        fix=(f"unplug the cable from {here.node} port {here.receptacle}, or add that Mac to mesh {mesh.name} in "
             "the inventory and run the check again"))


_HALF_SEEN = ("one_sided", "peer_not_collected", "peer_unidentified")


def _check_half_links(mesh: Mesh, observations: list[LinkObservation], covered: set[tuple[str, int]],
                      pool: PortPool, all_read: bool) -> tuple[list[HalfLink], list[Finding]]:
    """What only one side sees (a hub hiding a Mac, a cable seen one way), and Macs outside the mesh, from
    the cable match's observations: the first Mac each port not on a confirmed cable sees (one Mac per
    port is all a direct cable can carry). The far end of a half link is marked taken in the pool: a fix
    must not send another cable there."""
    order = {n: i for i, n in enumerate(mesh.node_names)}
    seen = sorted((o for o in observations if o.code in _HALF_SEEN and o.node in order and o.receptacle is not None),
                  key=lambda o: order[o.node or ""])  # stable: each node's ports stay in their order
    done = set(covered)
    reported: set[frozenset] = set()
    half: list[HalfLink] = []
    findings: list[Finding] = []
    for o in seen:
        assert o.node is not None and o.receptacle is not None
        if (o.node, o.receptacle) in done:
            continue
        done.add((o.node, o.receptacle))
        here = pool.end(o.node, o.receptacle)
        if o.far_node is not None and o.far_receptacle is not None:
            key = frozenset({(o.node, o.receptacle), (o.far_node, o.far_receptacle)})
            if key in reported:
                continue
            reported.add(key)
            far = pool.end(o.far_node, o.far_receptacle)
            half.append(HalfLink(seen_from=here, far=far, via=list(o.via)))
            pool.take(o.far_node, o.far_receptacle)
            findings.append(_half_link_finding(here, far, tuple(o.via)))
        else:
            # While a node could not be read, an unknown peer is most likely that node: its own
            # finding says so, and calling it a stranger would send the operator the wrong way.
            if all_read:
                findings.append(_unknown_mac_finding(mesh, here, o.peer, list(o.via)))
            half.append(HalfLink(seen_from=here, far=None, via=list(o.via)))
    return half, findings


def _check_missing(mesh: Mesh, read: set[str], linked: set[frozenset], pool: PortPool
                   ) -> tuple[list[MissingPair], list[Finding]]:
    """Pairs of read nodes with no cable at all, each with the ports to use (picked from the pool)."""
    missing: list[MissingPair] = []
    findings: list[Finding] = []
    for x, y in mesh.pairs:
        if x not in read or y not in read or frozenset((x, y)) in linked:
            continue
        px, py = pool.pick(x, y), pool.pick(y, x)
        missing.append(MissingPair(a=x, b=y, a_receptacle=px, b_receptacle=py))
        if px is not None and py is not None:
            fix = f"plug a Thunderbolt 5 cable from {x} {_port(px)} into {y} {_port(py)}"
        else:
            full = [n for n, pr in ((x, px), (y, py)) if pr is None]
            fix = (f"free an RDMA-capable port on {' and '.join(full)} (every one is in use), then plug a "
                   f"Thunderbolt 5 cable from {x} {_port(px)} into {y} {_port(py)}")
        where = [f"{n} port {pr}: {w}" for n, pr in ((x, px), (y, py)) if pr is not None and (w := pool.where(n, pr))]
        findings.append(Finding(severity="error", code="missing-pair", nodes=[x, y],
                                message=f"{x} and {y} have no cable between them", fix=fix, evidence=where))
    return missing, findings


_STATE_OF_CODE: dict[str, LinkState] = {"hub-in-path": "hub", "wrong-port": "wrong-port", "doubled-pair": "doubled",
                                        "slow-link": "slow", "ends-disagree": "disagree"}


def _topology_link(c: _Cable) -> TopologyLink:
    states: list[LinkState] = [_STATE_OF_CODE[code] for code in c.codes if code in _STATE_OF_CODE] or ["ok"]
    state = min(states, key=STATE_ORDER.index)
    return TopologyLink(a=c.a, b=c.b, speed_gbps=c.link.speed_gbps, state=state, problems=list(c.codes),
                        via=list(c.link.via))


def check_cabling(
    mesh: Mesh,
    facts_by_node: Mapping[str, NodeTopologyFacts],
    unreachable: Mapping[str, str] | None = None,
) -> TopologyReport:
    """Judge one pass of facts against the full mesh `mesh` implies: every rule below adds its findings,
    and the rules that suggest ports pick them from one pool, in this order."""
    unreachable = dict(unreachable or {})
    findings = _unreachable_findings(mesh, unreachable)
    tb, unread = _readable_thunderbolt(mesh, facts_by_node, unreachable)
    findings += unread
    maps = {name: facts_by_node[name].port_map() for name in tb}
    pool = PortPool(mesh, maps, plan_for_mesh(mesh))
    hw = {n: p for n in tb if (p := facts_by_node[n].hardware_ports) is not None}

    matched = match_links(tb, hw)
    cables = _confirmed_cables(matched.links, mesh, pool)
    extra, doubled = _check_doubled(cables, mesh, pool)
    findings += doubled
    for i, c in enumerate(cables):
        if i not in extra:
            findings += _check_hub(c) + _check_rdma_ports(c, pool) + _check_speed(c)

    covered = {(e.node, e.receptacle) for c in cables for e in (c.a, c.b)}
    all_read = not unreachable and len(tb) == len(mesh.nodes)
    half, one_sided = _check_half_links(mesh, matched.observations, covered, pool, all_read)
    findings += one_sided

    linked = {frozenset((c.a.node, c.b.node)) for c in cables}
    linked |= {frozenset((h.seen_from.node, h.far.node)) for h in half if h.far is not None}
    missing, unplugged = _check_missing(mesh, set(tb), linked, pool)
    findings += unplugged

    return TopologyReport(
        mesh=mesh.name,
        nodes=list(mesh.node_names),
        links=[_topology_link(c) for c in cables],
        findings=sort_findings(findings),
        missing=missing,
        half_links=half,
        unreachable=unreachable,
        ports={n: pool.capable(n) for n in mesh.node_names},
    )


def judge_exit_code(report: TopologyReport) -> int:
    """Unreachable when a node could not be reached (the verdict is incomplete), problems for any finding,
    ok when clean."""
    if report.unreachable:
        return EXIT_UNREACHABLE
    return EXIT_PROBLEMS if report.findings else EXIT_OK


# ---------------------------------------------------------------------------------------------- watching


class WatchEvent(_Model):
    """One change between two looks: a cable plugged or pulled, or a new finding to act on (with the cable it
    is about, when there is one). Render words it."""

    kind: Literal["plugged", "pulled", "finding", "unreachable"]
    link: TopologyLink | None = None
    finding: Finding | None = None
    node: str | None = None  # for "unreachable"
    reason: str | None = None


def _cable_key(lk: TopologyLink) -> tuple[str, int, str, int]:
    return (lk.a.node, lk.a.receptacle, lk.b.node, lk.b.receptacle)


def diff_reports(old: TopologyReport | None, new: TopologyReport) -> list[WatchEvent]:
    """What changed between two checks, in the order an operator cabling the mesh wants to hear it."""
    before = {_cable_key(lk): lk for lk in (old.links if old else [])}
    after = {_cable_key(lk): lk for lk in new.links}
    events = [WatchEvent(kind="pulled", link=before[k]) for k in sorted(before.keys() - after.keys())]
    events += [WatchEvent(kind="plugged", link=after[k]) for k in sorted(after.keys() - before.keys())]
    old_findings = {(f.code, f.message) for f in (old.findings if old else [])}
    for f in new.findings:
        if f.code == "missing-pair" or (f.code, f.message) in old_findings:
            continue
        about = None
        if f.code == "slow-link":
            about = next((x for x in new.links if "slow-link" in x.problems and x.a.node in f.nodes
                          and x.b.node in f.nodes and x.speed_gbps is not None), None)
        events.append(WatchEvent(kind="finding", finding=f, link=about))
    for node, why in new.unreachable.items():
        if old is None or node not in old.unreachable:
            events.append(WatchEvent(kind="unreachable", node=node, reason=why))
    return events
