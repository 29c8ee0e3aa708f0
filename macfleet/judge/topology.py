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

from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macfleet.facts.links import Link as FactLink
from macfleet.facts.links import match_links
from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts
from macfleet.facts.portmap import PortMap, build_port_map
from macfleet.facts.rdma import IbvDevicesFacts, IbvDevinfoFacts
from macfleet.facts.thunderbolt import ThunderboltAttached, ThunderboltFacts
from macfleet.inventory.model import MacModelSpec, Mesh
from macfleet.judge.model import Finding, sort_findings

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

    def touches(self, node: str, receptacle: int) -> bool:
        return (self.a.node, self.a.receptacle) == (node, receptacle) or (
            (self.b.node, self.b.receptacle) == (node, receptacle)
        )


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


def _macs(attached: list[ThunderboltAttached], via: tuple[str, ...] = ()) -> Iterator[tuple[ThunderboltAttached,
                                                                                            tuple[str, ...]]]:
    for a in attached:
        if a.kind == "mac":
            yield a, via
        yield from _macs(a.attached, (*via, a.name) if a.kind == "device" else via)


def _port(receptacle: int | None) -> str:
    return f"port {receptacle}" if receptacle is not None else "a free RDMA-capable port"


def _gbps(v: float | None) -> str:
    return "unknown speed" if v is None else f"{v:g} Gb/s"


class _Ports:
    """Which ports of each node can carry a mesh cable, which are taken, and the fixes' picks."""

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
        if entry is None or entry.device is None:
            return None
        if any(e.rdma_device for e in pm.entries):  # RDMA devices were listed: this port has none
            return entry.rdma_device is not None
        return None

    def where(self, node: str, receptacle: int) -> str | None:
        spec = self.nodes[node].model_spec
        return _where(spec, receptacle) if spec else None

    def pick(self, node: str, peer: str) -> int | None:
        """A free RDMA-capable port on `node` for the cable to `peer`: the plan's port when free, else the
        lowest free one. Marks it taken, so two fixes never send two cables into one port."""
        free = [r for r in self.capable(node) if r not in self.taken[node]]
        preferred = self.plan.port_for(node, peer) if self.plan else None
        choice = preferred if preferred in free else (free[0] if free else None)
        if choice is not None:
            self.taken[node].add(choice)
        return choice


def _device(maps: Mapping[str, PortMap | None], node: str, receptacle: int) -> str | None:
    pm = maps.get(node)
    entry = pm.entry(receptacle) if pm else None
    return entry.device if entry else None


def check_cabling(
    mesh: Mesh,
    facts_by_node: Mapping[str, NodeTopologyFacts],
    unreachable: Mapping[str, str] | None = None,
) -> TopologyReport:
    """Judge one pass of facts against the full mesh `mesh` implies."""
    unreachable = dict(unreachable or {})
    order = {n: i for i, n in enumerate(mesh.node_names)}
    findings: list[Finding] = []

    for name in mesh.node_names:
        if name in unreachable:
            findings.append(Finding(
                severity="error", code="unreachable", nodes=[name],
                message=f"{name} could not be reached: {unreachable[name]}; its cables are not judged",
                fix=f"check that {name} is powered on, on the network and accepts SSH, then run the check again",
            ))

    tb: dict[str, ThunderboltFacts] = {}
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
    seen = set(tb)
    maps = {name: facts_by_node[name].port_map() for name in tb}
    ports = _Ports(mesh, maps, plan_for_mesh(mesh))

    hw = {n: facts_by_node[n].hardware_ports for n in tb if facts_by_node[n].hardware_ports is not None}
    matched = match_links(tb, hw)  # type: ignore[arg-type]

    def end(node: str, receptacle: int) -> End:
        return End(node=node, receptacle=receptacle, device=_device(maps, node, receptacle))

    # --- confirmed cables, grouped by pair -----------------------------------------------------
    raw_links: list[FactLink] = matched.links
    cables: list[tuple[End, End, FactLink]] = []
    for lk in raw_links:
        ea, eb = end(lk.a.node, lk.a.receptacle), end(lk.b.node, lk.b.receptacle)
        if order.get(ea.node, 1 << 30) > order.get(eb.node, 1 << 30):
            ea, eb = eb, ea
        cables.append((ea, eb, lk))
    cables.sort(key=lambda c: (order.get(c[0].node, 99), order.get(c[1].node, 99), c[0].receptacle, c[1].receptacle))
    covered = {(e.node, e.receptacle) for a, b, _ in cables for e in (a, b)}

    problems: dict[int, list[str]] = {i: [] for i in range(len(cables))}

    def say(i: int, code: str, severity: str, message: str, fix: str, evidence: list[str] | None = None) -> None:
        a, b, _ = cables[i]
        problems[i].append(code)
        findings.append(Finding(severity=severity, code=code, nodes=[a.node, b.node], message=message, fix=fix,
                                evidence=evidence or []))  # type: ignore[arg-type]

    def desc(i: int) -> str:
        a, b, _ = cables[i]
        return f"{a.node} port {a.receptacle} ↔ {b.node} port {b.receptacle}"

    # Doubled pairs: keep the best cable, unplug the others.
    by_pair: dict[tuple[str, str], list[int]] = {}
    for i, (a, b, _) in enumerate(cables):
        by_pair.setdefault((a.node, b.node), []).append(i)

    def goodness(i: int) -> tuple:
        a, b, lk = cables[i]
        ok_ports = ports.rdma_ok(a.node, a.receptacle) is not False and ports.rdma_ok(b.node, b.receptacle) is not False
        fast = (lk.speed_gbps or 0) >= RDMA_SPEED_GBPS
        return (not ok_ports, not fast, bool(lk.via), a.receptacle, b.receptacle)

    extra: set[int] = set()
    for (x, y), idx in by_pair.items():
        if x not in order or y not in order or len(idx) < 2:
            continue
        keep = min(idx, key=goodness)
        for i in sorted(idx):
            if i == keep:
                continue
            extra.add(i)
            a, b, _ = cables[i]
            say(i, "doubled-pair", "error",
                f"{x} and {y} are cabled {len(idx)} times ({', '.join(desc(j) for j in sorted(idx))}); "
                "a pair must have exactly one cable (extra cables mismatch RDMA interface pairing)",
                f"unplug the cable between {a.node} port {a.receptacle} and {b.node} port {b.receptacle}")

    for i, (a, b, lk) in enumerate(cables):
        if i in extra:
            continue
        if lk.via:
            hubs = ", ".join(lk.via)
            say(i, "hub-in-path", "error",
                f"{desc(i)} goes through {hubs}; RDMA needs a direct Mac-to-Mac cable",
                f"take out {hubs} and plug a Thunderbolt 5 cable from {a.node} port {a.receptacle} "
                f"into {b.node} port {b.receptacle}")
        bad_ends = [e for e in (a, b) if ports.rdma_ok(e.node, e.receptacle) is False]
        if bad_ends:
            moves = []
            for e in bad_ends:
                other = b.node if e is a else a.node
                to = ports.pick(e.node, other)
                moves.append((e, to))
            what = "; ".join(
                f"{e.node} port {e.receptacle}" + (f" ({w})" if (w := ports.where(e.node, e.receptacle)) else "")
                + " cannot do RDMA" for e, _ in moves)
            fix = " and ".join(f"move the {e.node} end from port {e.receptacle} to {_port(to)}" for e, to in moves)
            say(i, "wrong-port", "error", f"{desc(i)}: {what}", fix)
        ends = [s for s in (lk.a.speed_gbps, lk.b.speed_gbps) if s is not None]
        if lk.speed_gbps is not None and lk.speed_gbps < RDMA_SPEED_GBPS:
            say(i, "slow-link", "error",
                f"{desc(i)} links at {_gbps(lk.speed_gbps)}; RDMA needs an 80 Gb/s Thunderbolt 5 link "
                "(a Thunderbolt 4 or USB cable, or a Thunderbolt 4 port, gives 40 Gb/s)",
                f"replace the cable between {a.node} port {a.receptacle} and {b.node} port {b.receptacle} "
                "with an 80 Gb/s Thunderbolt 5 cable")
        elif len(ends) == 2 and ends[0] != ends[1]:
            say(i, "ends-disagree", "warning",
                f"{desc(i)}: the two ends report different speeds ({_gbps(lk.a.speed_gbps)} and "
                f"{_gbps(lk.b.speed_gbps)})",
                f"reseat the cable between {a.node} port {a.receptacle} and {b.node} port {b.receptacle}, "
                "then run the check again")

    # --- what only one side sees, and Macs outside the mesh ------------------------------------
    uuid_owner: dict[str, tuple[str, int]] = {}
    for node, facts in tb.items():
        for p in facts.ports:
            if p.domain_uuid:
                uuid_owner.setdefault(p.domain_uuid, (node, p.receptacle))
    half: list[HalfLink] = []
    reported_half: set[frozenset] = set()
    for node in mesh.node_names:
        if node not in tb:
            continue
        for p in tb[node].ports:
            if (node, p.receptacle) in covered:
                continue
            for mac, via in _macs(p.attached):
                owner = uuid_owner.get(mac.domain_uuid or "")
                here = end(node, p.receptacle)
                if owner is not None and owner[0] != node:
                    far = end(*owner)
                    key = frozenset({(node, p.receptacle), owner})
                    if key in reported_half:
                        continue
                    reported_half.add(key)
                    half.append(HalfLink(seen_from=here, far=far, via=list(via)))
                    ports.taken[owner[0]].add(owner[1])
                    if via:
                        hubs = ", ".join(via)
                        findings.append(Finding(
                            severity="error", code="hub-in-path", nodes=[node, owner[0]],
                            message=(f"{node} port {p.receptacle} reaches {owner[0]} port {owner[1]} through "
                                     f"{hubs}; RDMA needs a direct Mac-to-Mac cable"),
                            fix=(f"take out {hubs} and plug a Thunderbolt 5 cable from {node} port {p.receptacle} "
                                 f"into {owner[0]} port {owner[1]}"),
                        ))
                    else:
                        findings.append(Finding(
                            severity="error", code="one-sided", nodes=[node, owner[0]],
                            message=(f"{node} port {p.receptacle} sees {owner[0]} port {owner[1]}, but {owner[0]} "
                                     f"does not see {node} there"),
                            fix=(f"reseat the cable between {node} port {p.receptacle} and {owner[0]} port "
                                 f"{owner[1]}; if it stays one-sided, replace the cable"),
                        ))
                elif owner is None:
                    model = mac.model or mac.name
                    path = f" through {', '.join(via)}" if via else ""
                    # While a node could not be read, an unknown peer is most likely that node: its own
                    # finding says so, and calling it a stranger would send the operator the wrong way.
                    if not unreachable and len(seen) == len(mesh.nodes):
                        findings.append(Finding(
                            severity="error", code="unknown-mac", nodes=[node],
                            message=(f"{node} port {p.receptacle} is cabled{path} to a Mac ({model}) that is not in "
                                     f"mesh {mesh.name} of the inventory"),
                            fix=(f"unplug the cable from {node} port {p.receptacle}, or add that Mac to mesh "
                                 f"{mesh.name} in the inventory and run the check again"),
                        ))
                    half.append(HalfLink(seen_from=here, far=None, via=list(via)))
                break  # one Mac per port is all a direct cable can carry

    # --- pairs with no cable at all ------------------------------------------------------------
    linked = {frozenset((a.node, b.node)) for a, b, _ in cables}
    linked |= {frozenset((h.seen_from.node, h.far.node)) for h in half if h.far is not None}
    missing: list[MissingPair] = []
    for x, y in mesh.pairs:
        if x not in seen or y not in seen or frozenset((x, y)) in linked:
            continue
        px, py = ports.pick(x, y), ports.pick(y, x)
        missing.append(MissingPair(a=x, b=y, a_receptacle=px, b_receptacle=py))
        if px is not None and py is not None:
            fix = f"plug a Thunderbolt 5 cable from {x} {_port(px)} into {y} {_port(py)}"
        else:
            full = [n for n, pr in ((x, px), (y, py)) if pr is None]
            fix = (f"free an RDMA-capable port on {' and '.join(full)} (every one is in use), then plug a "
                   f"Thunderbolt 5 cable from {x} {_port(px)} into {y} {_port(py)}")
        where = [f"{n} port {pr}: {w}" for n, pr in ((x, px), (y, py)) if pr is not None and (w := ports.where(n, pr))]
        findings.append(Finding(severity="error", code="missing-pair", nodes=[x, y],
                                message=f"{x} and {y} have no cable between them", fix=fix, evidence=where))

    links = []
    for i, (a, b, lk) in enumerate(cables):
        codes = problems[i]
        state_of = {"hub-in-path": "hub", "wrong-port": "wrong-port", "doubled-pair": "doubled",
                    "slow-link": "slow", "ends-disagree": "disagree"}
        states = [state_of[c] for c in codes if c in state_of] or ["ok"]
        state = min(states, key=STATE_ORDER.index)
        links.append(TopologyLink(a=a, b=b, speed_gbps=lk.speed_gbps, state=state, problems=codes,  # type: ignore[arg-type]
                                  via=list(lk.via)))

    return TopologyReport(
        mesh=mesh.name,
        nodes=list(mesh.node_names),
        links=links,
        findings=sort_findings(findings),
        missing=missing,
        half_links=half,
        unreachable=unreachable,
        ports={n: ports.capable(n) for n in mesh.node_names},
    )


def judge_exit_code(report: TopologyReport) -> int:
    """3 when a node could not be reached (the verdict is incomplete), 1 for any finding, 0 when clean."""
    if report.unreachable:
        return 3
    return 1 if report.findings else 0


# ---------------------------------------------------------------------------------------------- watching


class WatchEvent(_Model):
    sign: Literal["+", "-", "!"]  # cable plugged, cable gone, something to act on
    text: str


def _cable_key(lk: TopologyLink) -> tuple[str, int, str, int]:
    return (lk.a.node, lk.a.receptacle, lk.b.node, lk.b.receptacle)


def _cable_text(lk: TopologyLink) -> str:
    return f"{lk.a.node} port {lk.a.receptacle} ↔ {lk.b.node} port {lk.b.receptacle}"


def diff_reports(old: TopologyReport | None, new: TopologyReport) -> list[WatchEvent]:
    """What changed between two checks, as an operator cabling the mesh wants to hear it."""
    before = {_cable_key(lk): lk for lk in (old.links if old else [])}
    after = {_cable_key(lk): lk for lk in new.links}
    events: list[WatchEvent] = []
    for key in sorted(before.keys() - after.keys()):
        events.append(WatchEvent(sign="-", text=_cable_text(before[key])))
    for key in sorted(after.keys() - before.keys()):
        lk = after[key]
        speed = f"{lk.speed_gbps:g} Gb/s" if lk.speed_gbps is not None else "speed unknown"
        events.append(WatchEvent(sign="+", text=f"{_cable_text(lk)}, {speed}"))
    old_findings = {(f.code, f.message) for f in (old.findings if old else [])}
    for f in new.findings:
        if f.code == "missing-pair" or (f.code, f.message) in old_findings:
            continue
        if f.code == "slow-link":
            lk = next((x for x in new.links if "slow-link" in x.problems and x.a.node in f.nodes
                       and x.b.node in f.nodes), None)
            if lk is not None and lk.speed_gbps is not None:
                events.append(WatchEvent(sign="!", text=f"{lk.speed_gbps:g} Gb/s {_cable_text(lk)}: {f.fix}"))
                continue
        events.append(WatchEvent(sign="!", text=f"{f.message}: {f.fix}"))
    return events


def still_missing(report: TopologyReport) -> list[str]:
    """The pairs still to cable, each with the ports the check suggests."""
    out = []
    for m in report.missing:
        a = f"{m.a} port {m.a_receptacle}" if m.a_receptacle is not None else m.a
        b = f"{m.b} port {m.b_receptacle}" if m.b_receptacle is not None else m.b
        out.append(f"{a} ↔ {b}")
    return out
