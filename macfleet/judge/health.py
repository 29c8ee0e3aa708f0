"""Doctor's checks: one collection pass of facts + the inventory + now → findings and per-node results.

Each check is a named function with a stable code (`CHECKS`), called once per node with the whole pass
(`HealthContext`), so cross-node checks (one build across the mesh, exo's view of its peers) see every
node. A check returns findings, or `Unknown(reason)` when a fact it needs could not be read: "could not
tell" is never "ok". When a check on which another depends found a problem on a node (the node is
unreachable, the Thunderbolt Bridge is on...), the dependent check is not judged there and says so, so one
cause is reported once, by the check that names it. Pure: no I/O, no clock (`now` is passed in).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macfleet.constants import EXO_MODELS_DIR
from macfleet.errors import AT_UNLOCK_SCREEN
from macfleet.facts.daemons import EXO_JOB_PLIST, NETWORKSETUP_LABEL, NETWORKSETUP_PLIST, ExoDaemonsFacts
from macfleet.facts.defaults import DefaultsFacts
from macfleet.facts.discovery import Coordinators
from macfleet.facts.disk import DfFacts
from macfleet.facts.exo import ExoStateFacts
from macfleet.facts.ledger import BootTime, FailedStarts
from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts, RoutesFacts, ServiceOrderFacts
from macfleet.facts.probes import PfInfoFacts, PfRulesFacts, PingFacts, UpdatesFacts
from macfleet.facts.rdma import IbvDevicesFacts, IbvDevinfoFacts, RdmaCtlFacts
from macfleet.facts.sockets import TcpSocketsFacts
from macfleet.facts.system import FdesetupFacts, PmsetFacts, SwVersFacts, SysctlFacts
from macfleet.facts.thunderbolt import ThunderboltFacts
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.autoupdate import AUTO_UPDATE_PREFS, wrong_prefs
from macfleet.judge.discovery import NodeDiscovery, coordinators, masters
from macfleet.judge.exolog import UNRECOGNISED, Signature, match_signature, shown
from macfleet.judge.ipplan import IpPlan, NodeNetworkFacts, bind_ports, diff_ip, plan_ip
from macfleet.judge.links_bench import LinksBenchInput, links_bench_findings
from macfleet.judge.llama_rpc import LABEL_PREFIX, judge_listeners, rpc_bindings
from macfleet.judge.model import Change
from macfleet.judge.pf import exposure
from macfleet.judge.rdma import NodeRdma, NodeRdmaFacts, Problem
from macfleet.judge.rdma import check_rdma as check_rdma_mesh
from macfleet.judge.rdma_ledger import REBOOT_FIRST, ledger
from macfleet.judge.rdma_ledger import verdict as ledger_verdict
from macfleet.judge.topology import NodeTopologyFacts, TopologyReport, check_cabling

Result = Literal["ok", "finding", "unknown"]
MIN_MACOS = (26, 2)
BRIDGE = "bridge0"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HealthFinding(_Model):
    node: str
    check: str
    severity: Literal["error", "warning"]
    message: str
    fix: str
    evidence: str = ""


class CheckResult(_Model):
    check: str
    node: str
    result: Result
    reason: str | None = None  # why unknown (or which finding); None when ok


class Unknown(_Model):
    reason: str


class ClockReading(_Model):
    """`date -u +%s` on the node, and when its answer reached the controller after how long a round trip."""

    node_epoch_s: int
    controller_at_s: float  # the controller's clock (epoch s) when the answer was in
    round_trip_s: float

    @property
    def offset_s(self) -> float:
        """Node minus controller, taking the node's reading at the middle of the round trip."""
        return self.node_epoch_s - (self.controller_at_s - self.round_trip_s / 2)

    @property
    def slack_s(self) -> float:
        """How far off the offset may be: half the round trip, and `date`'s whole seconds."""
        return self.round_trip_s / 2 + 1.0


class NodeFacts(_Model):
    """Everything one node told us in one pass. A fact that is None could not be read: `problems` says why."""

    reachable: bool = True
    unreachable_reason: str | None = None
    thunderbolt: ThunderboltFacts | None = None
    hardware_ports: HardwarePortsFacts | None = None
    service_order: ServiceOrderFacts | None = None
    ifconfig: IfconfigFacts | None = None
    netstat_routes: RoutesFacts | None = None
    ibv_devices: IbvDevicesFacts | None = None
    ibv_devinfo: IbvDevinfoFacts | None = None  # `ibv_devinfo -v`: states and GID tables
    rdma_ctl: RdmaCtlFacts | None = None
    sw_vers: SwVersFacts | None = None
    sysctl: SysctlFacts | None = None
    pmset: PmsetFacts | None = None
    fdesetup: FdesetupFacts | None = None
    exo_api: Literal["up", "refused"] | None = None  # None: could not tell (see problems["exo"])
    exo_node_id: str | None = None
    exo_version: str | None = None  # the release `current` points at: its exo package's version (facts/exo.py)
    exo_state: ExoStateFacts | None = None
    exo_log: list[str] | None = None  # exo's log lines since its last start
    clock: ClockReading | None = None
    df: DfFacts | None = None  # `df -k` of the models directory
    updates: UpdatesFacts | None = None
    update_prefs: dict[str, DefaultsFacts] | None = None  # Software Update preferences domain -> `defaults read`
    pf_info: PfInfoFacts | None = None
    pf_rules: PfRulesFacts | None = None  # the macfleet anchor's rules
    pings: dict[str, PingFacts] = Field(default_factory=dict)  # peer's planned address -> one ping to it
    tcp_sockets: TcpSocketsFacts | None = None  # `netstat -an -p tcp` (read where llama-rpc is enabled)
    exo_daemons: ExoDaemonsFacts | None = None  # exo's job's plist, exo's app's network daemon (facts/daemons)
    boottime: BootTime | None = None  # `sysctl -n kern.boottime` (facts/ledger.py)
    exo_failed_starts: FailedStarts | None = None  # exo's failed runner starts since boot (facts/ledger.py)
    exo_master: str | None = None  # the node id its exo follows as master, "self": itself (facts/discovery.py)
    exo_coordinators: list[Coordinators] | None = None  # its /state instances' rank-0 addresses
    timed_out: list[str] = Field(default_factory=list)  # kinds whose command gave no answer in time
    problems: dict[str, str] = Field(default_factory=dict)  # kind -> why it is missing
    ages: dict[str, float] = Field(default_factory=dict)  # probe key -> age (s) of the cached answer used

    def why(self, *kinds: str) -> str:
        got = [f"{k}: {self.problems[k]}" for k in kinds if k in self.problems]
        return "; ".join(got) or f"{', '.join(kinds)} not collected"


class CheckSpec(_Model):
    code: str
    title: str
    fixable: bool = False  # `doctor --fix` applies its fix through a playbook
    depends: tuple[str, ...] = ()  # not judged on a node where one of these found a problem


Verdict = list[HealthFinding] | Unknown


@dataclass
class HealthContext:
    """One pass, with what several checks share computed once."""

    fleet: Fleet
    meshes: list[Mesh]
    facts: dict[str, NodeFacts]
    now: datetime
    cabling: dict[str, TopologyReport] = field(default_factory=dict)  # mesh -> report
    links_bench: Mapping[str, LinksBenchInput] = field(default_factory=dict)  # mesh -> latest `bench links`
    found: dict[tuple[str, str], bool] = field(default_factory=dict)  # (check, node) -> has a finding
    rdma: dict[str, dict[str, NodeRdma]] = field(default_factory=dict)  # mesh -> node -> `rdma status`'s verdict

    def mesh_of(self, node: str) -> Mesh:
        return next(m for m in self.meshes if node in m.node_names)

    def up(self, node: str) -> bool:
        f = self.facts.get(node)
        return f is not None and f.reachable


# --------------------------------------------------------------------------------------------- the checks


def check_reachable(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts.get(node)
    if f is not None and f.reachable:
        return []
    why = (f.unreachable_reason if f else None) or "no answer"
    if AT_UNLOCK_SCREEN in why:  # up, but its FileVault Data volume is locked (apple_ssh_and_filevault(7))
        fix = (f"unlock it: `macfleet unlock {node} --password-file FILE` (a FileVault-enabled user's password), "
               "or type the password at its console (docs/runbooks/unattended-reboot.md)")
    elif "host key" in why.lower():
        fix = (f"if {node} was reinstalled, check its new host key out of band and replace its line in the "
               "inventory's known_hosts; otherwise treat it as an intrusion")
    else:
        from macfleet.judge.reach import is_dns_failure, unreachable_fix

        fix = unreachable_fix(node, why) if is_dns_failure(why) else (
            f"check that {node} is powered on and on the network; a hung Mac needs a power cycle")
    return [HealthFinding(node=node, check="reachable", severity="error", message=f"{node} is unreachable: {why}",
                          fix=fix, evidence=why)]


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def check_macos_build(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.sw_vers is None or not f.sw_vers.build_version:
        return Unknown(reason=f.why("sw-vers"))
    mine = f.sw_vers
    out: list[HealthFinding] = []
    if mine.product_version and _version_tuple(mine.product_version) < MIN_MACOS:
        out.append(HealthFinding(
            node=node, check="macos-build", severity="error",
            message=f"{node} runs macOS {mine.product_version}: RDMA over Thunderbolt needs 26.2 or later",
            fix="upgrade macOS on every node to the same build (docs/runbooks/macos-upgrade.md)",
            evidence=f"sw_vers: {mine.product_version} ({mine.build_version})"))
    builds = {n: ctx.facts[n].sw_vers.build_version for n in ctx.mesh_of(node).node_names
              if ctx.up(n) and ctx.facts[n].sw_vers is not None and ctx.facts[n].sw_vers.build_version}
    counts: dict[str, int] = {}
    for b in builds.values():
        counts[b] = counts.get(b, 0) + 1
    top = max(counts.values())
    majority = [b for b, c in counts.items() if c == top]
    if len(counts) > 1 and (mine.build_version not in majority or len(majority) > 1):
        others = ", ".join(f"{n} {b}" for n, b in sorted(builds.items()) if n != node)
        out.append(HealthFinding(
            node=node, check="macos-build", severity="error",
            message=f"{node} runs build {mine.build_version} ({mine.product_version}), not the mesh's "
                    f"{'/'.join(sorted(b for b in majority if b != mine.build_version)) or 'other builds'}: "
                    "exo and JACCL need the same macOS build on every node",
            fix="bring every node to one build with the macOS-upgrade runbook (docs/runbooks/macos-upgrade.md); "
                "macOS updates need the Mac's screen or Screen Sharing",
            evidence=f"sw_vers on {node}: {mine.build_version}; {others}"))
    return out


def _ok_cable_ends(report: TopologyReport, node: str) -> dict[str, str]:
    """This node's devices (enX) whose cable the cabling check found good, with the peer on the other end."""
    out = {}
    for lk in report.links:
        if lk.state != "ok" or lk.problems:
            continue
        for me, peer in ((lk.a, lk.b), (lk.b, lk.a)):
            if me.node == node and me.device:
                out[me.device] = peer.node
    return out


# `rdma status`'s judgement, read by doctor: the problems of a node's own RDMA stack and ports. What the cabling
# check already says (a slow cable, a hub, a port that cannot do RDMA, a cable to a stranger), the macOS check
# (the build) and the peer's own finding (its RDMA off) are not said twice.
RDMA_FINDINGS = ("not-tb5", "rdma-off", "no-rdma-devices", "rdma-wedged", "port-down", "no-ipv4-gid")
RDMA_UNKNOWNS = ("rdma-unknown", "devices-unread", "devinfo-unread", "ports-unknown")


def rdma_facts(f: NodeFacts) -> NodeRdmaFacts:
    """doctor's facts of a node as `rdma status` reads them (doctor asks `ibv_devinfo -v` as its own kind)."""
    kind = {"ibv-devinfo:verbose": "ibv-devinfo"}
    return NodeRdmaFacts(
        sw_vers=f.sw_vers, thunderbolt=f.thunderbolt, hardware_ports=f.hardware_ports, ifconfig=f.ifconfig,
        rdma_ctl=f.rdma_ctl, ibv_devices=f.ibv_devices, ibv_devinfo=f.ibv_devinfo,
        timed_out=[kind.get(k, k) for k in f.timed_out],
        problems=[f"{kind.get(k, k)}: {why}" for k, why in f.problems.items()])


def _rdma_finding(node: str, p: Problem) -> HealthFinding:
    return HealthFinding(node=node, check="rdma", severity="error", message=p.message, fix=p.fix,
                         evidence=p.evidence or p.code)


def _rdma_of(ctx: HealthContext, mesh: Mesh) -> dict[str, NodeRdma]:
    if mesh.name not in ctx.rdma:
        unreachable = {n: (ctx.facts[n].unreachable_reason or "no answer") if n in ctx.facts else "not read"
                       for n in mesh.node_names if not ctx.up(n)}
        facts = {n: rdma_facts(ctx.facts[n]) for n in mesh.node_names if ctx.up(n)}
        ctx.rdma[mesh.name] = {r.name: r for r in check_rdma_mesh(mesh, facts, unreachable)}
    return ctx.rdma[mesh.name]


def check_rdma(ctx: HealthContext, node: str) -> Verdict:
    mesh = ctx.mesh_of(node)
    me = _rdma_of(ctx, mesh)[node]
    own = [p for p in me.problems if p.code in RDMA_FINDINGS and p.port is None]
    if own:
        return [_rdma_finding(node, p) for p in own]
    unknown = [p.message for p in me.problems if p.code in RDMA_UNKNOWNS]
    if unknown:
        return Unknown(reason="; ".join(unknown))
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    good = _ok_cable_ends(report, node)  # a port on a bad cable is the cabling check's finding
    found = [_rdma_finding(node, p) for p in me.problems if p.code in RDMA_FINDINGS and p.port in good]
    if found:
        return found
    unread = [f"{p.port}: {p.why}" for p in me.ports
              if p.port in good and (p.state == "unknown" or p.why == "GID table not read")]
    return Unknown(reason="RDMA ports not read: " + "; ".join(unread)) if unread else []


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
    return BRIDGE in c.what or "Bridge" in c.what


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


def check_power(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.pmset is None:
        return Unknown(reason=f.why("pmset"))
    want = ctx.mesh_of(node).settings.power.pmset
    wrong = {k: (f.pmset.settings.get(k), str(v)) for k, v in want.items() if f.pmset.settings.get(k) != str(v)}
    if not wrong:
        return []
    have = ", ".join(f"{k} {h if h is not None else 'unset'} (want {w})" for k, (h, w) in sorted(wrong.items()))
    return [HealthFinding(node=node, check="power", severity="error",
                          message=f"{node}'s power settings would let it sleep or not restart: {have}",
                          fix="`macfleet doctor --fix` applies the inventory's pmset values (playbooks/power.yml)",
                          evidence=f"pmset -g: {have}")]


def wired_limit_target(mesh: Mesh, memsize_bytes: int | None) -> int | None:
    """The iogpu.wired_limit_mb the inventory asks for on a node with that much memory (None: unknown)."""
    setting = mesh.settings.power.wired_limit_mb
    if setting != "auto":
        return int(setting)
    if memsize_bytes is None:
        return None
    return max(0, memsize_bytes // (1024 * 1024) - mesh.settings.power.wired_reserve_mb)


def check_wired_limit(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.sysctl is None:
        return Unknown(reason=f.why("sysctl"))
    have = f.sysctl.int_value("iogpu.wired_limit_mb")
    want = wired_limit_target(ctx.mesh_of(node), f.sysctl.int_value("hw.memsize"))
    if have is None or want is None:
        return Unknown(reason="sysctl printed no iogpu.wired_limit_mb or hw.memsize")
    if have == want:
        return []
    why = "macOS's default (it resets at every reboot)" if have == 0 else f"{have} MB"
    return [HealthFinding(node=node, check="wired-limit", severity="error",
                          message=f"{node}'s GPU wired memory limit is {why}, not the {want} MB planned: "
                                  "large models may not fit",
                          fix="`macfleet doctor --fix` sets it again (playbooks/power.yml)",
                          evidence=f"sysctl iogpu.wired_limit_mb: {have}")]


def check_filevault(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.fdesetup is None:
        return Unknown(reason=f.why("fdesetup"))
    if not f.fdesetup.filevault_on:
        return []
    return [HealthFinding(node=node, check="filevault", severity="warning",
                          message=f"FileVault is on on {node}: after a plain reboot it waits at the unlock screen, "
                                  "so an unattended mesh reboot would strand it",
                          fix="reboot it only with `fdesetup authrestart` (macfleet reboot does, with a stored "
                              "credential), or turn FileVault off at the Mac (docs/runbooks/doctor.md)",
                          evidence=f"fdesetup status: {f.fdesetup.status_line}")]


# --------------------------------------------------------------------------------------------------- exo


def check_exo_running(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.exo_api is None:
        return Unknown(reason=f.why("exo"))
    if f.exo_api == "up" and f.exo_node_id:
        return []
    return [HealthFinding(node=node, check="exo-running", severity="error",
                          message=f"exo does not answer on {node} (its API refuses connections)",
                          fix="`macfleet doctor --fix` starts it again (playbooks/exo-service.yml)",
                          evidence=f.problems.get("exo", "connection refused on the API port"))]


def check_exo_version(ctx: HealthContext, node: str) -> Verdict:
    versions = {n: ctx.facts[n].exo_version for n in ctx.mesh_of(node).node_names
                if ctx.up(n) and ctx.facts[n].exo_api == "up" and ctx.facts[n].exo_version}
    mine = ctx.facts[node].exo_version
    if mine is None:
        return Unknown(reason=ctx.facts[node].why("exo-release"))
    counts: dict[str, int] = {}
    for v in versions.values():
        counts[v] = counts.get(v, 0) + 1
    top = max(counts.values())
    if counts[mine] == top and list(counts.values()).count(top) == 1:
        return []
    others = ", ".join(f"{n} {v}" for n, v in sorted(versions.items()) if n != node)
    return [HealthFinding(node=node, check="exo-version", severity="error",
                          message=f"{node} runs exo {mine}, not the version the rest of the mesh runs: exo nodes "
                                  "of different versions ignore each other",
                          fix="install one exo build everywhere (`macfleet rollout`)",
                          evidence=f"{node} {mine}; {others}")]


def _views(ctx: HealthContext, mesh: Mesh) -> dict[str, set[str]]:
    """Each node's exo view of the mesh, in inventory names (node ids mapped through each node's /node_id)."""
    ids = {ctx.facts[n].exo_node_id: n for n in mesh.node_names if ctx.up(n) and ctx.facts[n].exo_node_id}
    return {n: {ids[i] for i in ctx.facts[n].exo_state.nodes if i in ids}
            for n in mesh.node_names if ctx.up(n) and ctx.facts[n].exo_state is not None}


def check_exo_peers(ctx: HealthContext, node: str) -> Verdict:
    if ctx.facts[node].exo_state is None:
        return Unknown(reason=ctx.facts[node].why("exo-state"))
    views = _views(ctx, ctx.mesh_of(node))
    live = set(views)
    others = live - {node}
    if not others:
        return []
    mine = views[node]
    unseen_by = sorted(n for n in others if node not in views[n])
    not_seen = sorted(others - mine)
    if 2 * len(unseen_by) <= len(others) and 2 * len(not_seen) <= len(others):
        return []  # a minority that disagrees is judged on its own nodes
    peers_seen = sorted(mine - {node})
    sees = f"it sees {', '.join(peers_seen)}" if peers_seen else "it sees nobody"
    seen = (f"{', '.join(unseen_by)} {'does' if len(unseen_by) == 1 else 'do'} not see it" if unseen_by
            else "every peer sees it")
    return [HealthFinding(node=node, check="exo-peers", severity="error",
                          message=f"exo on {node} is cut off from the mesh: {sees}; {seen}",
                          fix="check the Thunderbolt addresses (`macfleet topology ipplan`) and restart exo on it",
                          evidence=f"/state on {node}: {sorted(mine)}")]


def _pair_clear(ctx: HealthContext, a: str, b: str) -> bool:
    blocking = ("reachable", "cabling", "rdma", "bridge", "ip-plan", "exo-running", "exo-version", "exo-peers")
    return not any(ctx.found.get((c, n)) for c in blocking for n in (a, b))


def check_exo_rdma(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.exo_state is None or f.exo_node_id is None:
        return Unknown(reason=f.why("exo-state"))
    mesh = ctx.mesh_of(node)
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    ids = {n: ctx.facts[n].exo_node_id for n in mesh.node_names if ctx.up(n) and ctx.facts[n].exo_node_id}
    edges = set(f.exo_state.rdma_edges)
    missing = []
    for peer in sorted(set(_ok_cable_ends(report, node).values())):
        if peer not in ids or not _pair_clear(ctx, node, peer):
            continue
        if ctx.facts[peer].rdma_ctl is None or not ctx.facts[peer].rdma_ctl.enabled:
            continue
        if (ids[node], ids[peer]) not in edges or (ids[peer], ids[node]) not in edges:
            missing.append(peer)
    if not missing:
        return []
    return [HealthFinding(node=node, check="exo-rdma", severity="error",
                          message=f"exo has no RDMA connection between {node} and {', '.join(missing)} although "
                                  "the cables, ports and addresses are good",
                          fix="restart exo on the mesh (`macfleet doctor --fix`); if it stays, reboot the mesh",
                          evidence=f"/state on {node}: {len(edges)} RDMA edges")]


def _runner_failures(f: NodeFacts) -> list[str]:
    if f.exo_state is None or f.exo_node_id is None:
        return []
    return [r.error_message or r.status for r in f.exo_state.runners
            if r.node_id == f.exo_node_id and r.status == "RunnerFailed"]


def check_exo_runners(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.exo_state is None:
        return Unknown(reason=f.why("exo-state"))
    out = []
    for message in _runner_failures(f):
        sig = match_signature(message)
        out.append(HealthFinding(
            node=node, check="exo-runners", severity="error",
            message=f"exo's runner on {node} failed: {message}" + (f" ({sig.cause})" if sig else ""),
            fix=sig.fix if sig else "read exo's log on the node, then restart exo (`macfleet doctor --fix`)",
            evidence=f"/state runners: RunnerFailed {message}"))
    return out


HEALTHY_RUNNER = ("RunnerReady", "RunnerRunning")


def check_exo_log(ctx: HealthContext, node: str) -> Verdict:
    """Error signatures since exo's last start, judged while the node has no healthy runner (none at all after
    exo gave up on a crash loop, or one stuck connecting): once its runner is ready again, they are history."""
    f = ctx.facts[node]
    if f.exo_log is None:
        return Unknown(reason=f.why("exo-log"))
    if f.exo_state is not None and any(r.node_id == f.exo_node_id and r.status in HEALTHY_RUNNER
                                       for r in f.exo_state.runners):
        return []
    told = {_log_key(m, s) for m in _runner_failures(f) if (s := match_signature(m)) is not None}
    seen: dict[tuple[Signature, str], list[str]] = {}
    for line in f.exo_log:
        sig = match_signature(line)
        if sig is not None and (key := _log_key(line, sig)) not in told:
            seen.setdefault(key, []).append(line.strip())
    unknown = [k for k in seen if k[0] is UNRECOGNISED]
    for key in unknown[MAX_UNRECOGNISED:]:  # the first few distinct ones are named; the rest only counted
        del seen[key]
    more = len(unknown) - MAX_UNRECOGNISED
    return [HealthFinding(node=node, check="exo-log", severity="error",
                          message=f"exo's log on {node} since its last start: {sig.cause}"
                                  + (f": {text}" if sig is UNRECOGNISED else "")
                                  + f" ({len(lines)} line{'s' if len(lines) != 1 else ''})"
                                  + (f"; {more} more unrecognised JACCL line{'s' if more != 1 else ''}"
                                     if sig is UNRECOGNISED and more > 0 and (sig, text) == unknown[0] else ""),
                          fix=sig.fix, evidence=shown(lines[-1][-300:]))
            for (sig, text), lines in seen.items()]


MAX_UNRECOGNISED = 3
NOT_HOLDING = ("RunnerFailed", "RunnerShutdown", "RunnerIdle")  # runner states that hold no RDMA resources


def check_rdma_ledger(ctx: HealthContext, node: str) -> Verdict:
    """Room for the next runner starts on the node's RDMA devices (judge/rdma_ledger.py)."""
    f = ctx.facts[node]
    if f.ibv_devinfo is None:
        return Unknown(reason=f.why("ibv-devinfo"))
    if f.exo_failed_starts is None:
        why = f.why("exo-log", "boottime")
        return Unknown(reason=f"exo's failed runner starts since boot could not be counted: {why}")
    running = f.exo_state is not None and any(r.node_id == f.exo_node_id and r.status not in NOT_HOLDING
                                               for r in f.exo_state.runners)
    led = ledger(node, f.ibv_devinfo, f.exo_failed_starts, running)
    if isinstance(led, str):
        return Unknown(reason=led)
    said = ledger_verdict(led)
    if said is None:
        return []
    return [HealthFinding(node=node, check="rdma-ledger", severity=said[0], message=said[1], fix=REBOOT_FIRST,
                          evidence=led.evidence())]


# A node cut off from exo's cluster by one of these is that check's finding, not a split of the cluster.
DISCOVERY_CAUSES = ("reachable", "cabling", "bridge", "ip-plan", "exo-running", "exo-version")


def _discovery(ctx: HealthContext, mesh: Mesh) -> dict[str, NodeDiscovery]:
    out = {}
    for n in mesh.node_names:
        f = ctx.facts[n]
        if not ctx.up(n) or f.exo_state is None or any(ctx.found.get((c, n)) for c in DISCOVERY_CAUSES):
            continue
        addresses = {a.address: i.name for i in (f.ifconfig.interfaces if f.ifconfig else []) if i.name
                     for a in i.inet}
        out[n] = NodeDiscovery(node_id=f.exo_node_id, master=f.exo_master, sees=set(f.exo_state.nodes),
                               coordinators=f.exo_coordinators or [], addresses=addresses)
    return out


def check_exo_discovery(ctx: HealthContext, node: str) -> Verdict:
    """One master for the mesh and rank-0 addresses a peer can reach (judge/discovery.py); nodes that do not see
    each other are exo-peers' finding. A finding is told on the first node it names (for a split: the smallest
    group's)."""
    f = ctx.facts[node]
    if f.exo_state is None:
        return Unknown(reason=f.why("exo-state"))
    mesh = _discovery(ctx, ctx.mesh_of(node))
    return [HealthFinding(node=node, check="exo-discovery", severity="error", message=d.message, fix=d.fix,
                          evidence=d.evidence)
            for d in masters(mesh) + coordinators(mesh) if d.nodes[0] == node]


def _log_key(line: str, sig: Signature) -> tuple[Signature, str]:
    """Known signatures are reported once each; unrecognised JACCL lines once per distinct line."""
    return (sig, shown(line) if sig is UNRECOGNISED else "")


# ------------------------------------------------------------------------------------ clock, disk, updates


def check_clock_skew(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.clock is None:
        return Unknown(reason=f.why("date"))
    limit = ctx.mesh_of(node).settings.probes.clock_skew_max_s
    offset = f.clock.offset_s
    if abs(offset) - f.clock.slack_s <= limit:
        return []
    way = "ahead of" if offset > 0 else "behind"
    return [HealthFinding(
        node=node, check="clock-skew", severity="warning",
        message=f"{node}'s clock is {abs(offset):.0f} s {way} the controller's (more than the "
                f"{limit:g} s allowed by probes.clock_skew_max_s): logs across the mesh disagree, and TLS "
                "downloads fail once it is far off",
        fix="turn network time on at the node (`sudo systemsetup -setusingnetworktime on`, or System Settings > "
            "General > Date & Time) and let it reach its time server (`sntp time.apple.com` shows the offset); "
            "check the controller's own clock too",
        evidence=f"date -u +%s on {node}: {f.clock.node_epoch_s}; controller: {f.clock.controller_at_s:.1f} "
                 f"after a {f.clock.round_trip_s * 1000:.0f} ms round trip")]


GB = 1_000_000_000


def check_disk(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.df is None:
        return Unknown(reason=f.why("df"))
    mesh = ctx.mesh_of(node)
    want = mesh.settings.probes.min_free_disk_gb * GB
    free = f.df.available_bytes
    if free >= want:
        return []
    return [HealthFinding(
        node=node, check="disk", severity="error" if free < GB else "warning",
        message=f"only {free / GB:.1f} GB free on {node}'s models volume ({f.df.device}), less than the "
                f"{want / GB:g} GB set (probes.min_free_disk_gb): a model download or staging fails there",
        fix=f"delete the models no longer used from {mesh.settings.exo.models_dir} on {node} (and anything else "
            "filling the volume), or move the models to a larger volume (exo.models_dir)",
        evidence=f"df -k {mesh.settings.exo.models_dir}: {f.df.available_kb} KiB available of {f.df.total_kb}")]


def check_updates(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.updates is None:
        return Unknown(reason=f.why("softwareupdate"))
    if not f.updates.pending:
        return []
    labels = [u.label for u in f.updates.pending]
    macos = [u.label for u in f.updates.pending if u.is_macos]
    what = f"a macOS update ({', '.join(macos)})" if macos else "software updates"
    return [HealthFinding(
        node=node, check="updates", severity="warning",
        message=f"{node} has {what} pending: installed on one node only, the mesh would run two builds and "
                "exo and JACCL need one",
        fix="name the build in the inventory (macfleet_macos.build) and install it on every node of the mesh with "
            "`macfleet upgrade` (docs/runbooks/macos-upgrade.md; Screen Sharing for what it cannot install)",
        evidence=f"softwareupdate --list{cached_note(f.ages.get('softwareupdate'))}: " + "; ".join(labels))]


def check_macos_target(ctx: HealthContext, node: str) -> Verdict:
    """Where the node stands against the inventory's target build (macfleet_macos.build): on it, offered it, or
    not offered it (judge/upgrade.py)."""
    from macfleet.judge.upgrade import standing

    settings = ctx.mesh_of(node).settings.macos
    if not settings.build:
        return []
    f = ctx.facts[node]
    build = f.sw_vers.build_version if f.sw_vers is not None else None
    s = standing(node, build, f.updates, settings.build, why=f.why("softwareupdate"))
    if s.standing == "on-target":
        return []
    if s.standing == "unknown":
        return Unknown(reason=s.why)
    late = settings.deadline is not None and ctx.now.date() > settings.deadline
    due = f" (deadline {settings.deadline} {'passed' if late else 'ahead'})" if settings.deadline else ""
    if s.standing == "offered":
        return [HealthFinding(
            node=node, check="macos-target", severity="error" if late else "warning",
            message=f"{node} runs build {build}, not the mesh's target {settings.build}{due}; Apple offers it there",
            fix="`macfleet upgrade --check` shows the plan, then `macfleet upgrade --password-file FILE` installs it "
                "one node at a time (docs/runbooks/macos-upgrade.md)",
            evidence=f"sw_vers: {build}; softwareupdate --list{cached_note(f.ages.get('softwareupdate'))}: "
                     f"{s.label}")]
    return [HealthFinding(
        node=node, check="macos-target", severity="error",
        message=f"{node} runs build {build}, not the mesh's target {settings.build}{due}, and Apple does not offer "
                f"{settings.build} there ({', '.join(s.offered) or 'no macOS update'} offered)",
        fix="if Apple offers only a newer build, choose it as the target for the whole mesh (macfleet_macos.build) "
            "or keep the current one; see docs/runbooks/macos-upgrade.md",
        evidence=f"sw_vers: {build}; softwareupdate --list{cached_note(f.ages.get('softwareupdate'))}: "
                 f"{', '.join(s.offered) or 'no macOS update'}")]


def check_auto_updates(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    wrong = wrong_prefs(f.update_prefs or {})
    if wrong is None:
        return Unknown(reason=f.why("auto-updates"))
    if not wrong:
        return []
    return [HealthFinding(
        node=node, check="auto-updates", severity="error",
        message=f"{node} may install a macOS update or restart by itself: {'; '.join(wrong)}. One node updated "
                "overnight leaves the mesh on two builds (exo and JACCL need one), and may come back with RDMA off",
        fix="`macfleet bootstrap` switches them off again (playbooks/roles/autoupdate); if they come back after "
            "that, an MDM profile or a person in System Settings > General > Software Update sets them",
        evidence="defaults read " + ", ".join(AUTO_UPDATE_PREFS) + ": " + "; ".join(wrong))]


def age_words(seconds: float) -> str:
    """`3 min`, `2 h 5 min`, `1 d 3 h`: how old an answer is, for a person."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def cached_note(age_s: float | None) -> str:
    """` (answer of 2 h 5 min ago, cached; doctor --fresh asks again)`, or "" for an answer read in this pass."""
    return "" if age_s is None else f" (answer of {age_words(age_s)} ago, cached; `doctor --fresh` asks again)"


# -------------------------------------------------------------------------------------- exo's API exposure

LOOPBACK = "lo0"


def _thunderbolt_devices(f: NodeFacts) -> set[str] | None:
    if f.hardware_ports is None:
        return None
    return {p.device for p in f.hardware_ports.by_thunderbolt().values() if p.device}


def _pf_exposure(f: NodeFacts, port: int, *, sources_ok: bool) -> str | Unknown | None:
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


def check_exo_api_exposure(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    port = ctx.mesh_of(node).settings.exo.port
    why = _pf_exposure(f, port, sources_ok=True)
    if isinstance(why, Unknown):
        return why
    if why is None or f.pf_info is None or f.pf_rules is None:
        return []
    now = "switch pf on now (`sudo pfctl -E`); " if not f.pf_info.enabled else ""
    return [HealthFinding(
        node=node, check="exo-api-exposure", severity="warning",
        message=f"exo's API on {node} (unauthenticated, on every interface, port {port}) is open to the whole "
                f"LAN: {why}",
        fix=f"{now}`macfleet bootstrap` loads the packet-filter anchor that lets exo's ports in only from the "
            "Thunderbolt networks and the controller, and switches pf on at every boot (docs/runbooks/doctor.md)",
        evidence=f"pfctl -s info: {f.pf_info.status_line}; pfctl -a com.apple/macfleet -s rules: "
                 f"{len(f.pf_rules.rules)} rules")]


# -------------------------------------------------------------------- exo's models dir, exo's network daemon

EXO_MODELS_ENV = "EXO_DEFAULT_MODELS_DIR"  # exo src/exo/shared/constants.py since 15f1b61f4
EXO_DEFAULT_MODELS = EXO_MODELS_DIR.removeprefix("~/")  # its default, under HOME (same file; macfleet/constants.py)


def _clean(path: str) -> str:
    return re.sub(r"/+", "/", path).rstrip("/") or "/"


def check_exo_models_dir(ctx: HealthContext, node: str) -> Verdict:
    """exo looks for models where its LaunchDaemon's environment says (EXO_DEFAULT_MODELS_DIR, else its
    default, EXO_MODELS_DIR): the directory rollout fills (exo.models_dir), or exo downloads every model again."""
    f = ctx.facts[node]
    if f.exo_daemons is None:
        return Unknown(reason=f.why("exo-daemons"))
    if f.exo_daemons.exo_job is None:
        return Unknown(reason=f"exo's LaunchDaemon could not be read: {f.exo_daemons.exo_job_problem}")
    env = f.exo_daemons.exo_job.environment
    home = env.get("HOME")
    want = ctx.mesh_of(node).settings.exo.models_dir
    if want == "~" or want.startswith("~/"):
        if not home:
            return Unknown(reason="exo's LaunchDaemon sets no HOME, so ~ in exo.models_dir cannot be placed")
        want = home + want[1:]
    looks = env.get(EXO_MODELS_ENV) or (f"{home}/{EXO_DEFAULT_MODELS}" if home else None)
    if looks is None:
        return Unknown(reason=f"exo's LaunchDaemon sets neither {EXO_MODELS_ENV} nor HOME")
    if _clean(looks) == _clean(want):
        return []
    return [HealthFinding(
        node=node, check="exo-models-dir", severity="error",
        message=f"exo on {node} looks for models in {looks}, but rollout puts them in {want} (exo.models_dir): "
                "exo does not see the models pushed there and downloads them again",
        fix="`macfleet bootstrap` writes exo's LaunchDaemon with EXO_DEFAULT_MODELS_DIR set to exo.models_dir "
            "and restarts exo",
        evidence=f"{EXO_JOB_PLIST}: {EXO_MODELS_ENV}="
                 f"{env.get(EXO_MODELS_ENV, '(not set)')}, HOME={home or '(not set)'}")]


def check_exo_networksetup(ctx: HealthContext, node: str) -> Verdict:
    """exo's app installs the LaunchDaemon io.exo.networksetup, which at load and every ~30 min rewrites the
    network services and sets the Thunderbolt ports to DHCP (exo app/EXO/EXO/Services/NetworkSetupHelper.swift
    at b5375f8; exo#1158, #2007, #2067): it undoes the IP plan. Loaded, or installed and not disabled (so it loads
    at the next boot), is a finding."""
    f = ctx.facts[node]
    if f.exo_daemons is None:
        return Unknown(reason=f.why("exo-daemons"))
    ns = f.exo_daemons.networksetup
    if not ns.plist_present and not ns.loaded:
        return []
    if not ns.loaded and ns.disabled:
        return []
    if not ns.loaded and not ns.disabled_read:
        return Unknown(reason=f"{NETWORKSETUP_LABEL} is installed, not loaded; whether it is disabled could not "
                              "be read (launchctl print-disabled system)")
    ran = ", ".join(x for x in (f"state {ns.state}" if ns.state else "", f"{ns.runs} runs" if ns.runs is not None
                                else "", f"last exit {ns.last_exit}" if ns.last_exit else "") if x)
    now = (f"is loaded ({ran or 'launchctl print answers'})" if ns.loaded
           else "is installed and not disabled: it loads at the next boot")
    return [HealthFinding(
        node=node, check="exo-networksetup", severity="error" if ns.loaded else "warning",
        message=f"exo's network daemon {NETWORKSETUP_LABEL} on {node} {now}; at load and every ~30 minutes it "
                "rewrites the network services, destroys bridge0 and puts the Thunderbolt ports on DHCP, undoing "
                "the IP plan",
        fix=f"`macfleet bootstrap` boots it out and disables it (`sudo launchctl bootout system/{NETWORKSETUP_LABEL}"
            f"; sudo launchctl disable system/{NETWORKSETUP_LABEL}`), then `macfleet doctor --fix` re-applies the "
            "IP plan; do not run exo's app on the nodes (docs/runbooks/bootstrap.md)",
        evidence=f"{NETWORKSETUP_PLIST} "
                 f"{'present' if ns.plist_present else 'absent'}; launchctl print system/{NETWORKSETUP_LABEL}: "
                 f"{ran or ('loaded' if ns.loaded else 'not loaded')}; disabled: "
                 f"{'unread' if not ns.disabled_read else 'yes' if ns.disabled else 'no'}")]


# ------------------------------------------------------------------------------------- ping over each link


def ping_targets(fleet: Fleet, mesh: str, node: str) -> dict[str, str]:
    """The peers of `node` in the IP plan, by their address on the link between them (what doctor pings)."""
    out = {}
    for lk in plan_ip(fleet, mesh).for_node(node):
        peer = lk.b if lk.a.node == node else lk.a
        out[peer.address] = peer.node
    return out


def _ping_clear(ctx: HealthContext, peer: str) -> bool:
    """A peer whose own address or cable is already a finding: the ping to it would only repeat that."""
    return ctx.up(peer) and not any(ctx.found.get((c, peer)) for c in ("cabling", "bridge", "ip-plan"))


def check_tb_ping(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    mesh = ctx.mesh_of(node)
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    cabled = set(_ok_cable_ends(report, node).values())
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


# ------------------------------------------------------------------------------------ llama.cpp's rpc-server


def check_llama_rpc(ctx: HealthContext, node: str) -> Verdict:
    """Where the inventory enables llama-rpc: rpc-server (unauthenticated) listens on each of the node's
    Thunderbolt addresses, and on nothing else (not on every address, not on a LAN address)."""
    mesh = ctx.mesh_of(node)
    if not mesh.settings.llama.enabled:
        return []
    f = ctx.facts[node]
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    if f.tcp_sockets is None:
        return Unknown(reason=f.why("netstat-listen"))
    bindings = rpc_bindings(bind_ports(plan_ip(ctx.fleet, mesh.name), {mesh.name: report}), mesh.name, node)
    if not bindings:
        return Unknown(reason=f"{node} has no live Thunderbolt link: no address for rpc-server to listen on")
    port = mesh.settings.llama.rpc_port
    # rpc-server binds its Thunderbolt addresses, but a Mac takes a packet for any of its addresses on any
    # interface: only the packet filter keeps a LAN host with a route to that subnet out (hostile.md row 11)
    pf = _pf_exposure(f, port, sources_ok=False)
    v = judge_listeners([(s.local_address, s.local_port) for s in f.tcp_sockets.sockets if s.state == "LISTEN"],
                        bindings, port)
    evidence = "netstat -an -p tcp: " + (", ".join(f"{s.local_address}.{s.local_port}"
                                                    for s in f.tcp_sockets.listening(port)) or f"nothing on {port}")
    out = []
    if v.exposed:
        out.append(HealthFinding(
            node=node, check="llama-rpc", severity="error",
            message=f"rpc-server's port {port} on {node} listens on {', '.join(v.exposed)}: llama.cpp's RPC "
                    "server is unauthenticated and must listen on the Thunderbolt addresses only",
            fix=f"find the process (`lsof -nP -iTCP:{port} -sTCP:LISTEN` on {node}) and stop it; "
                "`macfleet rollout llama-rpc` runs rpc-server bound to each Thunderbolt address only",
            evidence=evidence))
    if v.missing:
        out.append(HealthFinding(
            node=node, check="llama-rpc", severity="error",
            message=f"rpc-server on {node} is not listening on {', '.join(v.missing)} (port {port})",
            fix=f"`macfleet rollout llama-rpc` (or `sudo launchctl kickstart -k system/{LABEL_PREFIX}.N` on "
                f"{node}); its log is ~/Library/Logs/llama-rpc.N.log",
            evidence=evidence))
    if isinstance(pf, str):
        out.append(HealthFinding(
            node=node, check="llama-rpc", severity="error",
            message=f"rpc-server's port {port} on {node} (unauthenticated) is reachable from the LAN: {pf}",
            fix=("switch pf on now (`sudo pfctl -E`); " if pf.startswith("pf is off") else "")
            + "`macfleet bootstrap` loads the packet-filter anchor that lets rpc-server's port in only on the "
              "Thunderbolt interfaces (docs/runbooks/llama-rpc.md)",
            evidence=f"pfctl -s info: {f.pf_info.status_line if f.pf_info else '?'}; pfctl -a com.apple/macfleet "
                     f"-s rules: {len(f.pf_rules.rules) if f.pf_rules else '?'} rules"))
    elif isinstance(pf, Unknown) and not out:
        return pf
    return out


def check_links_bench(ctx: HealthContext, node: str) -> Verdict:
    """The latest `bench links` against the saved baseline (doctor runs no iperf3): each link's finding is
    reported on its first node. Nothing to say where no baseline was saved."""
    mesh = ctx.mesh_of(node)
    bench = ctx.links_bench.get(mesh.name)
    if bench is None:
        return []
    if bench.problem:
        return Unknown(reason=bench.problem)
    return [HealthFinding(node=node, check="links-bench", severity=f.severity, message=f.message, fix=f.fix,
                          evidence="; ".join(f.evidence))
            for f in links_bench_findings(bench, mesh.name, mesh.settings.bench.min_fraction) if f.nodes[0] == node]


# ------------------------------------------------------------------------------------------- the catalogue

_R = ("reachable",)
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(code="reachable", title="SSH reaches the node and its host key matches known_hosts"),
    CheckSpec(code="macos-build", title="macOS 26.2 or later, the same build on every node of the mesh",
              depends=_R),
    CheckSpec(code="cabling", title="every pair cabled once, directly, at 80 Gb/s, on RDMA-capable ports",
              depends=_R),
    CheckSpec(code="bridge", title="the Thunderbolt Bridge is off", fixable=True, depends=_R),
    CheckSpec(code="ip-plan", title="each Thunderbolt port carries its planned address and nothing else",
              fixable=True, depends=(*_R, "bridge")),
    CheckSpec(code="rdma", title="RDMA enabled and not wedged; every cabled port ACTIVE with an IPv4-mapped GID",
              depends=(*_R, "bridge", "ip-plan")),
    CheckSpec(code="power", title="pmset as the inventory says (no sleep, restart after power loss)", fixable=True,
              depends=_R),
    CheckSpec(code="wired-limit", title="iogpu.wired_limit_mb as planned", fixable=True, depends=_R),
    CheckSpec(code="filevault", title="FileVault will not strand an unattended reboot", depends=_R),
    CheckSpec(code="exo-running", title="exo's API answers on the node", fixable=True, depends=_R),
    CheckSpec(code="exo-version", title="the same exo version on every node", depends=(*_R, "exo-running")),
    CheckSpec(code="exo-peers", title="exo on the node sees the mesh and the mesh sees it",
              depends=(*_R, "exo-running", "exo-version", "bridge", "ip-plan")),
    CheckSpec(code="exo-rdma", title="an exo RDMA connection for every pair whose cable and ports are good",
              depends=(*_R, "exo-running")),
    # JACCL errors on a node whose RDMA is off or wedged are that problem's consequence: reported by `rdma`.
    CheckSpec(code="exo-runners", title="no failed exo runner", depends=(*_R, "exo-running", "rdma")),
    CheckSpec(code="exo-log", title="no JACCL or runner error signature in exo's log since its last start, "
              "while it has no healthy runner", depends=(*_R, "rdma", "exo-running", "exo-runners")),
    CheckSpec(code="rdma-ledger", title="room on the node's RDMA devices (max_pd, max_qp) for the next runner "
              "starts, counting exo's failed starts since boot", depends=(*_R, "rdma")),
    CheckSpec(code="exo-discovery", title="one exo master for the mesh, rank-0 addresses rank 0 holds (not its "
              "Thunderbolt Bridge)", depends=(*_R, "exo-running")),
    CheckSpec(code="clock-skew", title="the node's clock within probes.clock_skew_max_s of the controller's",
              depends=_R),
    CheckSpec(code="disk", title="at least probes.min_free_disk_gb free on the models volume", depends=_R),
    CheckSpec(code="updates", title="no pending software update (softwareupdate --list)", depends=_R),
    CheckSpec(code="macos-target", title="the node runs the inventory's target build (macfleet_macos.build), or "
              "Apple offers it there", depends=_R),
    CheckSpec(code="auto-updates", title="automatic macOS install, download and restart switched off (the "
              "Software Update preferences bootstrap sets)", depends=_R),
    CheckSpec(code="tb-ping", title="each end of every good Thunderbolt link answers a ping at its planned address",
              depends=(*_R, "cabling", "bridge", "ip-plan")),
    CheckSpec(code="exo-models-dir", title="exo looks for models in the directory rollout fills (exo.models_dir)",
              depends=_R),
    CheckSpec(code="exo-networksetup", title="exo's app's network daemon (io.exo.networksetup) is not loaded and "
              "will not load at boot", depends=_R),
    CheckSpec(code="exo-api-exposure", title="exo's API reachable only from the Thunderbolt networks and the "
              "controller (pf anchor loaded, pf on)", depends=_R),
    CheckSpec(code="llama-rpc", title="where llama-rpc is enabled, rpc-server listens on each Thunderbolt address "
              "and nowhere else, and the packet filter lets its port in on the Thunderbolt interfaces only",
              depends=(*_R, "cabling", "bridge", "ip-plan")),
    # Read from the controller's files, but a node that does not answer now is not judged on old figures.
    CheckSpec(code="links-bench", title="the latest `bench links` has every link at or above its share of the "
              "saved baseline (where one was saved)", depends=_R),
)
CHECK_CODES: tuple[str, ...] = tuple(c.code for c in CHECKS)

CHECK_FUNCTIONS: dict[str, Callable[[HealthContext, str], Verdict]] = {
    "reachable": check_reachable,
    "macos-build": check_macos_build,
    "cabling": check_cabling_node,
    "bridge": check_bridge,
    "ip-plan": check_ip_plan,
    "rdma": check_rdma,
    "power": check_power,
    "wired-limit": check_wired_limit,
    "filevault": check_filevault,
    "clock-skew": check_clock_skew,
    "disk": check_disk,
    "updates": check_updates,
    "macos-target": check_macos_target,
    "auto-updates": check_auto_updates,
    "tb-ping": check_tb_ping,
    "exo-running": check_exo_running,
    "exo-version": check_exo_version,
    "exo-peers": check_exo_peers,
    "exo-rdma": check_exo_rdma,
    "exo-runners": check_exo_runners,
    "exo-log": check_exo_log,
    "rdma-ledger": check_rdma_ledger,
    "exo-discovery": check_exo_discovery,
    "exo-api-exposure": check_exo_api_exposure,
    "exo-models-dir": check_exo_models_dir,
    "exo-networksetup": check_exo_networksetup,
    "llama-rpc": check_llama_rpc,
    "links-bench": check_links_bench,
}


class HealthSummary(_Model):
    nodes: int
    checks: int
    ok: int
    findings: int
    unknown: int
    errors: int
    warnings: int
    unreachable: list[str]
    healthy: bool
    checked_at: str


class HealthReport(_Model):
    findings: list[HealthFinding]
    checks: list[CheckResult]
    summary: HealthSummary

    def json_payload(self) -> dict:
        return {
            "findings": [f.model_dump() for f in self.findings],
            "checks": [{"check": c.check, "node": c.node, "result": c.result} for c in self.checks],
            "summary": self.summary.model_dump(),
        }


def topology_facts(f: NodeFacts) -> NodeTopologyFacts:
    return NodeTopologyFacts(thunderbolt=f.thunderbolt, hardware_ports=f.hardware_ports, ibv_devices=f.ibv_devices,
                             ibv_devinfo=f.ibv_devinfo, ifconfig=f.ifconfig,
                             problems=[f"{k}: {v}" for k, v in f.problems.items()])


def select_checks(only: list[str] | None) -> list[CheckSpec]:
    """The checks to run, in catalogue order; `reachable` always runs (every other check needs it)."""
    if not only:
        return list(CHECKS)
    return [c for c in CHECKS if c.code in only or c.code == "reachable"]


def judge_health(fleet: Fleet, meshes: list[Mesh], facts: Mapping[str, NodeFacts], now: datetime,
                 only: list[str] | None = None, links_bench: Mapping[str, LinksBenchInput] | None = None
                 ) -> HealthReport:
    """Run the (selected) checks on every node of `meshes`, in catalogue order, so a check sees which of the
    checks it depends on found a problem on that node."""
    ctx = HealthContext(fleet=fleet, meshes=meshes, facts=dict(facts), now=now, links_bench=links_bench or {})
    for m in meshes:
        up = {n: topology_facts(facts[n]) for n in m.node_names if n in facts and facts[n].reachable}
        down = {n: facts[n].unreachable_reason or "no answer" for n in m.node_names if n not in up}
        ctx.cabling[m.name] = check_cabling(m, up, down)
    findings: list[HealthFinding] = []
    results: list[CheckResult] = []
    nodes = [n for m in meshes for n in m.node_names]
    for spec in select_checks(only):
        for node in nodes:
            blocked = [d for d in spec.depends if ctx.found.get((d, node))]
            if blocked:
                results.append(CheckResult(check=spec.code, node=node, result="unknown",
                                           reason=f"not judged: {', '.join(blocked)} found a problem first"))
                continue
            verdict = CHECK_FUNCTIONS[spec.code](ctx, node)
            if isinstance(verdict, Unknown):
                results.append(CheckResult(check=spec.code, node=node, result="unknown", reason=verdict.reason))
            elif verdict:
                ctx.found[(spec.code, node)] = True
                findings += verdict
                results.append(CheckResult(check=spec.code, node=node, result="finding",
                                           reason=verdict[0].message))
            else:
                results.append(CheckResult(check=spec.code, node=node, result="ok"))
    return HealthReport(findings=findings, checks=results, summary=_summary(nodes, findings, results, facts, now))


def _summary(nodes: list[str], findings: list[HealthFinding], results: list[CheckResult],
             facts: Mapping[str, NodeFacts], now: datetime) -> HealthSummary:
    unreachable = sorted(n for n in nodes if n not in facts or not facts[n].reachable)
    count = {r: sum(c.result == r for c in results) for r in ("ok", "finding", "unknown")}
    return HealthSummary(
        nodes=len(nodes), checks=len(results), ok=count["ok"], findings=len(findings), unknown=count["unknown"],
        errors=sum(f.severity == "error" for f in findings), warnings=sum(f.severity == "warning" for f in findings),
        unreachable=unreachable, healthy=not findings and not count["unknown"], checked_at=now.isoformat())
