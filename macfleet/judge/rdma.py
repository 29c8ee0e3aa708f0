"""RDMA over Thunderbolt readiness, node by node and port by port, from one collection pass.

A mesh is RDMA-ready when every node runs macOS 26.2 or later with the same build, is a Thunderbolt 5 Mac
with RDMA enabled and listed RDMA devices, answers `ibv_devinfo` in time, and every cabled port is
PORT_ACTIVE with an IPv4-mapped GID (JACCL picks its GID by that `::ffff:a.b.c.d` entry). A port is ACTIVE
only when both ends of a direct Thunderbolt 5 cable have RDMA on (Apple TN3205), so a port that is down is
explained by what its far end lacks. `None` everywhere means "could not tell", never "no".

Pure: facts + inventory in, decisions out. No I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macfleet.facts.links import macs_behind, match_links
from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts
from macfleet.facts.rdma import IbvDeviceInfo, IbvDevicesFacts, IbvDevinfoFacts, RdmaCtlFacts
from macfleet.facts.system import HardwareFacts, SwVersFacts
from macfleet.facts.thunderbolt import ThunderboltFacts, ThunderboltPort
from macfleet.inventory.model import MacModelSpec, Mesh, Node, model_spec
from macfleet.judge.reach import unreachable_fix

MIN_OS = (26, 2)
RDMA_SPEED_GBPS = 80.0
PortState = Literal["active", "down", "unknown"]
# The error JACCL gives when a port has no IPv4-mapped GID (mlx rdma.cpp; exo#1390).
RTR_ERRNO_22 = "Changing queue pair to RTR failed with errno 22"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeRdmaFacts(_Model):
    """What one node told us in one pass. Any fact may be missing (None); `problems` says why."""

    sw_vers: SwVersFacts | None = None
    hardware: HardwareFacts | None = None
    thunderbolt: ThunderboltFacts | None = None
    hardware_ports: HardwarePortsFacts | None = None
    ifconfig: IfconfigFacts | None = None
    rdma_ctl: RdmaCtlFacts | None = None
    ibv_devices: IbvDevicesFacts | None = None
    ibv_devinfo: IbvDevinfoFacts | None = None
    timed_out: list[str] = Field(default_factory=list)  # KINDs whose command gave no answer in time
    problems: list[str] = Field(default_factory=list)  # "ibv-devinfo: exit 255: ..." (KIND first)

    def problem_of(self, kind: str) -> str | None:
        return next((p.split(": ", 1)[1] for p in self.problems if p.startswith(kind + ": ")), None)


class Problem(_Model):
    code: str
    message: str
    fix: str
    evidence: str | None = None  # what was read that shows it (doctor prints it; `rdma status --json` does not)
    port: str | None = None  # the port (enX) a port's problem is about


class PortRdma(_Model):
    port: str  # enX (the Thunderbolt IP interface; its RDMA device is rdma_enX), or "Thunderbolt N"
    peer: str | None  # the mesh node at the far end; None when it cannot be told
    state: PortState
    gid_v4: str | None  # the IPv4 of the port's IPv4-mapped GID; None when absent or not read
    receptacle: int
    peer_port: str | None = None
    why: str | None = None  # a short reason for the matrix when not active


class NodeRdma(_Model):
    name: str
    mesh: str
    address: str
    os: str | None
    build: str | None
    rdma_enabled: bool | None
    ready: bool
    ports: list[PortRdma]
    problems: list[Problem]
    model: str | None = None  # "Mac Studio (Mac15,14, Apple M3 Ultra)"
    family: str | None = None  # marketing name, to pick the startup steps ("Mac Studio", "Mac mini"...)
    serial: str | None = None
    tb5: bool | None = None
    wedged: bool = False
    reachable: bool = True
    devices: int | None = None  # RDMA devices `ibv_devices` listed

    def has(self, code: str) -> bool:
        return any(p.code == code for p in self.problems)

    @property
    def can_do_rdma(self) -> bool | None:
        """False for a Mac that never can (Thunderbolt 4 only, or macOS too old to have rdma_ctl)."""
        if self.tb5 is False or self.has("os-too-old"):
            return False
        return self.tb5

    @property
    def needs_enable(self) -> bool:
        """RDMA is known to be off on a Mac that can do it: the Recovery step is what it needs."""
        return self.reachable and self.rdma_enabled is False and self.can_do_rdma is not False

    @property
    def enabled_ok(self) -> bool:
        """RDMA is on and its devices are there (the node's own part is done; its ports may wait on peers)."""
        return self.rdma_enabled is True and bool(self.devices) and not self.wedged


class RdmaReport(_Model):
    nodes: list[NodeRdma]

    @property
    def ready(self) -> bool:
        return bool(self.nodes) and all(n.ready for n in self.nodes)

    def node(self, name: str) -> NodeRdma | None:
        return next((n for n in self.nodes if n.name == name), None)

    def json_payload(self) -> dict:
        """The documented `rdma status --json` shape, nothing more."""
        return {
            "ready": self.ready,
            "nodes": [
                {
                    "name": n.name, "os": n.os, "build": n.build, "rdma_enabled": n.rdma_enabled, "ready": n.ready,
                    "ports": [{"port": p.port, "peer": p.peer, "state": p.state, "gid_v4": p.gid_v4} for p in n.ports],
                    "problems": [{"code": p.code, "message": p.message, "fix": p.fix} for p in n.problems],
                }
                for n in self.nodes
            ],
        }

    def exit_code(self) -> int:
        """3 when a node could not be reached (the verdict is incomplete), 0 when ready, else 1."""
        if any(not n.reachable for n in self.nodes):
            return 3
        return 0 if self.ready else 1


# ------------------------------------------------------------------------------------------------ helpers


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    parts = []
    for x in version.split("."):
        if not x.isdigit():
            return None
        parts.append(int(x))
    return tuple(parts)


def _spec(node: Node, facts: NodeRdmaFacts | None) -> MacModelSpec | None:
    spec = node.model_spec
    if spec is None and facts is not None and facts.hardware is not None:
        spec = model_spec(facts.hardware.model_identifier)
    return spec


def _tb5(spec: MacModelSpec | None, tb: ThunderboltFacts | None) -> bool | None:
    """Can this Mac do Thunderbolt 5 at all? The catalogue knows; else the idle ports' "Up to" speeds."""
    if spec is not None:
        return any(p.max_speed_gbps >= 80 for p in spec.thunderbolt_ports)
    if tb is None or not tb.ports:
        return None
    caps = [p.capability for p in tb.ports]
    if "tb5" in caps:
        return True
    return False if all(c is not None for c in caps) else None


def _model_text(node: Node, spec: MacModelSpec | None, hw: HardwareFacts | None) -> tuple[str | None, str | None]:
    name = (hw.model_name if hw else None) or (spec.marketing_name if spec else None)
    ident = (hw.model_identifier if hw else None) or (spec.model_identifier if spec else None) or node.model
    chip = (hw.chip if hw else None) or (spec.chip if spec else None)
    detail = ", ".join(x for x in (ident, chip) if x)
    if name is None and not detail:
        return None, None
    return (f"{name or 'Mac'} ({detail})" if detail else name), name


def _port_name(facts: NodeRdmaFacts, receptacle: int) -> str:
    hp = facts.hardware_ports.by_thunderbolt().get(receptacle) if facts.hardware_ports else None
    return hp.device if hp else f"Thunderbolt {receptacle}"


def _where(spec: MacModelSpec | None, receptacle: int) -> str:
    w = next((p.where for p in spec.thunderbolt_ports if p.receptacle == receptacle), None) if spec else None
    return f"port {receptacle}, {w}" if w else f"port {receptacle}"


def _rdma_capable(spec: MacModelSpec | None, facts: NodeRdmaFacts, receptacle: int) -> bool | None:
    if spec is not None:
        port = next((p for p in spec.thunderbolt_ports if p.receptacle == receptacle), None)
        return port.rdma_capable if port else None
    if facts.ibv_devices is None or not facts.ibv_devices.devices or facts.hardware_ports is None:
        return None
    hp = facts.hardware_ports.by_thunderbolt().get(receptacle)
    if hp is None:
        return None
    return f"rdma_{hp.device}" in {d.name for d in facts.ibv_devices.devices}


def _devinfo(facts: NodeRdmaFacts, device: str) -> IbvDeviceInfo | None:
    if facts.ibv_devinfo is None:
        return None
    return next((d for d in facts.ibv_devinfo.devices if d.name == f"rdma_{device}"), None)


def _listed(facts: NodeRdmaFacts, device: str) -> bool | None:
    if facts.ibv_devices is None:
        return None
    return f"rdma_{device}" in {d.name for d in facts.ibv_devices.devices}


def _bridged(facts: NodeRdmaFacts, device: str) -> bool:
    if facts.ifconfig is None:
        return False
    return any(device in i.members for i in facts.ifconfig.interfaces)


# ------------------------------------------------------------------------------------------------ the check


class _Node:
    """One node's basics, worked out once and read by its peers' port checks."""

    def __init__(self, node: Node, facts: NodeRdmaFacts | None, unreachable: str | None):
        self.node = node
        self.name = node.name
        self.facts = facts or NodeRdmaFacts()
        self.unreachable = unreachable
        self.spec = _spec(node, facts)
        self.tb5 = _tb5(self.spec, self.facts.thunderbolt) if unreachable is None else None
        sw = self.facts.sw_vers
        self.os = sw.product_version if sw else None
        self.build = sw.build_version if sw else None
        self.rdma = self.facts.rdma_ctl.enabled if self.facts.rdma_ctl else None
        self.wedged = "ibv-devinfo" in self.facts.timed_out and self.rdma is not False
        v = _version_tuple(self.os)
        self.has_too_old_os = v is not None and v < MIN_OS

    def capable(self, receptacle: int) -> bool | None:
        return _rdma_capable(self.spec, self.facts, receptacle)


def _end_index(nodes: Mapping[str, _Node]) -> dict[tuple[str, int], tuple[str, int, float | None, list[str]]]:
    """(node, receptacle) -> (peer node, peer receptacle, link speed, hubs between) for each matched cable."""
    tb = {n: b.facts.thunderbolt for n, b in nodes.items() if b.facts.thunderbolt is not None}
    hw = {n: b.facts.hardware_ports for n, b in nodes.items() if b.facts.hardware_ports is not None}
    out: dict[tuple[str, int], tuple[str, int, float | None, list[str]]] = {}
    for lk in match_links(tb, hw).links:  # type: ignore[arg-type]
        out[(lk.a.node, lk.a.receptacle)] = (lk.b.node, lk.b.receptacle, lk.speed_gbps, list(lk.via))
        out[(lk.b.node, lk.b.receptacle)] = (lk.a.node, lk.a.receptacle, lk.speed_gbps, list(lk.via))
    return out


def _down_reason(me: _Node, p: ThunderboltPort, port: str, peer: _Node | None, end: tuple | None,
                 attached_via: list[str]) -> tuple[str, Problem | None]:
    """Why a port is down: (short reason for the matrix, the problem to report on this node or None when
    another finding already says it once)."""
    where = f"{port} ({_where(me.spec, p.receptacle)})"
    if peer is None:
        if attached_via:
            hubs = ", ".join(attached_via)
            return "hub", Problem(code="hub-in-path", message=f"{where} reaches a Mac through {hubs}; RDMA needs a "
                                  "direct Mac-to-Mac cable", fix=f"take out {hubs} and cable the two Macs directly "
                                  "with a Thunderbolt 5 cable")
        return "far end unknown", Problem(
            code="peer-unknown", message=f"{where} is cabled to a Mac that is not a node of mesh {me.node.mesh} "
            "read in this pass", fix="see `macfleet topology check` for where that cable goes")
    _, peer_r, speed, via = end if end else (None, None, None, [])
    if peer.unreachable is not None:
        return f"{peer.name} unreachable", None
    if peer.tb5 is False:
        return f"{peer.name} is Thunderbolt 4", None
    if peer.rdma is False:
        return f"RDMA off on {peer.name}", Problem(
            code="peer-rdma-off", message=f"{where} to {peer.name} is down: {peer.name} has RDMA off",
            fix=f"enable RDMA on {peer.name}: `macfleet rdma enable {peer.name}` (a step at the Mac, in Recovery)")
    if peer.wedged:
        return f"RDMA wedged on {peer.name}", None
    if via:
        hubs = ", ".join(via)
        return "hub", Problem(code="hub-in-path", message=f"{where} reaches {peer.name} through {hubs}; RDMA needs "
                              "a direct Mac-to-Mac cable", fix=f"take out {hubs} and cable {me.name} "
                              f"port {p.receptacle} directly to {peer.name} port {peer_r} with a Thunderbolt 5 cable")
    if speed is not None and speed < RDMA_SPEED_GBPS:
        return f"{speed:g} Gb/s", Problem(
            code="slow-link", message=f"{where} to {peer.name} links at {speed:g} Gb/s; RDMA needs an 80 Gb/s "
            "Thunderbolt 5 link (a Thunderbolt 4 or USB cable gives 40 Gb/s)",
            fix=f"replace the cable between {me.name} port {p.receptacle} and {peer.name} port {peer_r} with a "
            "Thunderbolt 5 cable (80 Gb/s)")
    if me.capable(p.receptacle) is False:
        ok = [r.receptacle for r in me.spec.rdma_ports] if me.spec else []
        to = f" (RDMA-capable: {', '.join(f'port {r}' for r in ok)})" if ok else ""
        return "port cannot do RDMA", Problem(
            code="port-not-rdma", message=f"{where} cannot do RDMA", fix=f"move the cable from {me.name} port "
            f"{p.receptacle} to a free RDMA-capable port of {me.name}{to}")
    if peer_r is not None and peer.capable(peer_r) is False:
        return f"{peer.name} port {peer_r} cannot do RDMA", None
    if peer.rdma is None or me.rdma is None:
        return "RDMA state unknown", None
    return "down", Problem(
        code="port-down", message=f"{where} to {peer.name} is PORT_DOWN although both ends have RDMA on",
        fix=f"reseat the cable between {me.name} port {p.receptacle} and {peer.name} port {peer_r}; if it stays "
        "down, reboot both Macs")


def _ports(me: _Node, nodes: Mapping[str, _Node], ends: Mapping) -> tuple[list[PortRdma], list[Problem]]:
    tb = me.facts.thunderbolt
    if tb is None:
        return [], []
    ports: list[PortRdma] = []
    problems: list[Problem] = []
    for p in tb.ports:
        end = ends.get((me.name, p.receptacle))
        macs = macs_behind(p.attached)
        if end is None and not macs:
            continue  # nothing cabled, or a display/disk: not a mesh port
        port = _port_name(me.facts, p.receptacle)
        peer = nodes.get(end[0]) if end else None
        peer_port = _port_name(peer.facts, end[1]) if (end and peer) else None
        info = _devinfo(me.facts, port)
        gid = info.ipv4_gid_address if info else None
        state: PortState
        if info is not None and info.state:
            state = "active" if info.state == "PORT_ACTIVE" else "down"
        elif me.rdma is False or me.tb5 is False or _listed(me.facts, port) is False:
            state = "down"
        else:
            state = "unknown"
        why: str | None = None
        if state == "active":
            if info is not None and info.has_ipv4_gid is False:
                why = "no IPv4-mapped GID"
                bridge = (f"; {port} is a member of bridge0 (the Thunderbolt Bridge is on), so its address is on "
                          "the bridge, not on the port") if _bridged(me.facts, port) else ""
                problems.append(Problem(
                    code="no-ipv4-gid", message=f"{port} (to {peer.name if peer else 'its peer'}) is active but has "
                    f"no IPv4-mapped GID{bridge}: JACCL fails with \"{RTR_ERRNO_22}\"",
                    fix="apply the IP plan (Thunderbolt Bridge off, an address on every Thunderbolt port): "
                    "`macfleet topology apply`", evidence=f"ibv_devinfo -v: rdma_{port} has no ::ffff: GID",
                    port=port))
            elif info is None or info.has_ipv4_gid is None:
                why = "GID table not read"
        elif state == "down" and me.rdma is True and me.tb5 is not False and not me.wedged:
            via = [h for _, v in macs for h in v]
            why, problem = _down_reason(me, p, port, peer, end, via)
            if problem is not None:
                seen = info.state if info is not None and info.state else "not listed"
                problems.append(problem.model_copy(update={"evidence": f"ibv_devinfo -v: rdma_{port} {seen}",
                                                           "port": port}))
        elif state == "down":
            why = "RDMA off" if me.rdma is False else "no RDMA device"
        else:
            why = "RDMA wedged" if me.wedged else "not read"
        ports.append(PortRdma(port=port, peer=peer.name if peer else None, state=state, gid_v4=gid,
                              receptacle=p.receptacle, peer_port=peer_port, why=why))
    return ports, problems


def _os_problems(me: _Node, majority: str | None, mesh: Mesh, builds: Mapping[str, str]) -> list[Problem]:
    if me.facts.sw_vers is None:
        why = me.facts.problem_of("sw-vers") or "not collected"
        return [Problem(code="os-unknown", message=f"cannot read the macOS version of {me.name} ({why})",
                        fix=f"run `sw_vers` on {me.name} by hand and fix what it reports")]
    out = []
    v = _version_tuple(me.os)
    if v is not None and v < MIN_OS:
        out.append(Problem(code="os-too-old", message=f"{me.name} runs macOS {me.os}; RDMA over Thunderbolt needs "
                           "macOS 26.2 or later", fix=f"update {me.name} to the macOS build the rest of mesh "
                           f"{mesh.name} runs (26.2 or later)"))
    if majority is not None and me.build != majority:
        others = sorted({f"{b}" for n, b in builds.items() if b != me.build})
        out.append(Problem(code="os-mismatch", message=f"{me.name} runs build {me.build} (macOS {me.os}); the "
                           f"other nodes of mesh {mesh.name} run {', '.join(others)}: exo and JACCL need the same "
                           "build on every node", fix=f"update {me.name} to build {majority}, the build most nodes "
                           f"of mesh {mesh.name} run"))
    return out


def _rdma_problems(me: _Node, mesh: Mesh, peers: Sequence[str]) -> list[Problem]:
    name = me.name
    if me.tb5 is False:
        what = _model_text(me.node, me.spec, me.facts.hardware)[0] or "this Mac"
        cables = f"; its cables to {', '.join(peers)} can never carry RDMA" if peers else ""
        return [Problem(code="not-tb5", message=f"{name} ({what}) has only Thunderbolt 4 ports: it can never do RDMA "
                        f"over Thunderbolt, which needs a Mac with Thunderbolt 5{cables}",
                        fix=f"replace {name} with a Thunderbolt 5 Mac (e.g. Mac mini M4 Pro, Mac Studio M4 Max or "
                        f"M3 Ultra), or take it out of mesh {mesh.name}",
                        evidence=f"{what}: no Thunderbolt 5 port")]
    if me.has_too_old_os:
        return []
    if me.rdma is None:
        why = me.facts.problem_of("rdma-ctl") or "not collected"
        return [Problem(code="rdma-unknown", message=f"cannot tell whether RDMA is on on {name}: `rdma_ctl status` "
                        f"({why})", fix=f"run `rdma_ctl status` on {name} by hand")]
    if me.rdma is False:
        return [Problem(code="rdma-off", message=f"RDMA is off on {name} (`rdma_ctl status`: disabled)",
                        fix=f"`macfleet rdma enable {name}`: at the Mac, in Recovery, Utilities → Terminal, "
                        "`rdma_ctl enable`, restart (it cannot be switched on remotely)",
                        evidence=f"rdma_ctl status: {me.facts.rdma_ctl.status if me.facts.rdma_ctl else 'disabled'}")]
    out = []
    devices = me.facts.ibv_devices
    if devices is not None and not devices.devices:
        out.append(Problem(code="no-rdma-devices", message=f"RDMA is enabled on {name} but `ibv_devices` lists no "
                           "device: a Thunderbolt 5 Mac in a broken state (reported on macOS 26.5.1, 25F80)",
                           fix=f"restart {name}; if the list stays empty, run `macfleet rdma enable {name}` to "
                           "disable and enable RDMA again in Recovery", evidence="ibv_devices: no device listed"))
    if me.wedged:
        out.append(Problem(code="rdma-wedged", message=f"RDMA wedged on {name}: `ibv_devinfo` gave no answer in time",
                           fix=f"reboot every node of mesh {mesh.name} together: `macfleet reboot --mesh {mesh.name}` "
                           f"(stop exo first; rebooting {name} alone leaves it wedged)",
                           evidence=f"ibv_devinfo: {me.facts.problem_of('ibv-devinfo') or 'no answer in time'}"))
    if devices is None:  # not read is not "none": the ports are not judged without it
        why = me.facts.problem_of("ibv-devices") or "not collected"
        out.append(Problem(code="devices-unread", message=f"cannot list the RDMA devices of {name}: `ibv_devices` "
                           f"({why})", fix=f"run `ibv_devices` on {name} by hand"))
    if not me.wedged and me.facts.ibv_devinfo is None and (devices is None or devices.devices):
        why = me.facts.problem_of("ibv-devinfo") or "not collected"
        out.append(Problem(code="devinfo-unread", message=f"cannot read the RDMA ports of {name}: `ibv_devinfo -v` "
                           f"({why})", fix=f"run `ibv_devinfo -v` on {name} by hand"))
    return out


def check_rdma(mesh: Mesh, facts_by_node: Mapping[str, NodeRdmaFacts],
               unreachable: Mapping[str, str] | None = None) -> list[NodeRdma]:
    """Judge one pass of facts for every node of `mesh`."""
    unreachable = dict(unreachable or {})
    nodes = {n.name: _Node(n, facts_by_node.get(n.name), unreachable.get(n.name)) for n in mesh.nodes}
    builds = {n: b.build for n, b in nodes.items() if b.build and b.unreachable is None}
    counts = Counter(builds.values())
    majority = None
    if len(counts) > 1:
        top = max(counts.values())
        majority = next(b for b in builds.values() if counts[b] == top)
    ends = _end_index({n: b for n, b in nodes.items() if b.unreachable is None})
    out: list[NodeRdma] = []
    for name, me in nodes.items():
        model, family = _model_text(me.node, me.spec, me.facts.hardware)
        base = dict(name=name, mesh=mesh.name, address=me.node.address, model=model, family=family,
                    serial=me.facts.hardware.serial_number if me.facts.hardware else None)
        if me.unreachable is not None:
            out.append(NodeRdma(**base, os=None, build=None, rdma_enabled=None, ready=False, ports=[],
                                reachable=False, problems=[Problem(
                                    code="unreachable", message=f"{name} could not be reached: {me.unreachable}",
                                    fix=unreachable_fix(name, me.unreachable))]))
            continue
        ports, port_problems = _ports(me, nodes, ends)
        peers = [p.peer for p in ports if p.peer]
        problems = _os_problems(me, majority, mesh, builds) + _rdma_problems(me, mesh, peers)
        if me.tb5 is not False:
            problems += port_problems
        if me.facts.thunderbolt is None:
            why = me.facts.problem_of("thunderbolt") or "not collected"
            problems.append(Problem(code="ports-unknown", message=f"cannot read the Thunderbolt ports of {name} "
                                    f"({why})", fix=f"run `system_profiler SPThunderboltDataType` on {name} by hand"))
        elif not peers and len(mesh.nodes) > 1:
            problems.append(Problem(code="no-cable", message=f"{name} has no Thunderbolt cable to another node of "
                                    f"mesh {mesh.name}", fix="see `macfleet topology check` for the cables to plug"))
        devices = me.facts.ibv_devices
        ready = not problems and all(p.state == "active" and p.gid_v4 for p in ports)
        out.append(NodeRdma(**base, os=me.os, build=me.build, rdma_enabled=me.rdma, ready=ready, ports=ports,
                            problems=problems, tb5=me.tb5, wedged=me.wedged,
                            devices=len(devices.devices) if devices is not None else None))
    return out


def judge_rdma(meshes: Sequence[Mesh], facts_by_node: Mapping[str, NodeRdmaFacts],
               unreachable: Mapping[str, str] | None = None) -> RdmaReport:
    return RdmaReport(nodes=[n for m in meshes for n in check_rdma(m, facts_by_node, unreachable)])
