"""RDMA over Thunderbolt as `rdma status` judges it: enabled, not wedged, every cabled port ACTIVE with an
IPv4-mapped GID."""

from __future__ import annotations

from macfleet.inventory.model import Mesh
from macfleet.judge.checks.base import (
    Check,
    HealthContext,
    HealthFinding,
    NodeFacts,
    Unknown,
    Verdict,
    kind_probe,
)
from macfleet.judge.checks.network import CABLING, ok_cable_ends
from macfleet.judge.rdma import NodeRdma, NodeRdmaFacts, Problem
from macfleet.judge.rdma import check_rdma as check_rdma_mesh

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
    good = ok_cable_ends(report, node)  # a port on a bad cable is the cabling check's finding
    found = [_rdma_finding(node, p) for p in me.problems if p.code in RDMA_FINDINGS and p.port in good]
    if found:
        return found
    unread = [f"{p.port}: {p.why}" for p in me.ports
              if p.port in good and (p.state == "unknown" or p.why == "GID table not read")]
    return Unknown(reason="RDMA ports not read: " + "; ".join(unread)) if unread else []


# ------------------------------------------------------------------------------------------- declarations

PROBES = (
    kind_probe("ibv_devices", "ibv-devices"),
    kind_probe("ibv_devinfo", "ibv-devinfo", "verbose"),  # `ibv_devinfo -v`: states and GID tables
    kind_probe("rdma_ctl", "rdma-ctl"),
)
CHECKS = (
    Check(code="rdma", title="RDMA enabled and not wedged; every cabled port ACTIVE with an IPv4-mapped GID",
          order=60, judge=check_rdma, reads=(*CABLING, "rdma-ctl", "sw-vers"),
          depends=("reachable", "bridge", "ip-plan"), mesh_wide=True),
)
