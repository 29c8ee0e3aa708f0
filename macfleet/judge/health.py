"""Doctor's judgement: one collection pass of facts + the inventory + now → findings and per-node results.

The checks themselves are declared once, by family, in judge/checks/ (catalogue.py gathers them): each is a
named function with a stable code, called once per node with the whole pass (`HealthContext`), so cross-node
checks (one build across the mesh, exo's view of its peers) see every node. A check returns findings, or
`Unknown(reason)` when a fact it needs could not be read: "could not tell" is never "ok". When a check on which
another depends found a problem on a node (the node is unreachable, the Thunderbolt Bridge is on...), the
dependent check is not judged there and says so, so one cause is reported once, by the check that names it.
Pure: no I/O, no clock (`now` is passed in).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.checks.base import (
    CheckResult,
    CheckSpec,
    ClockReading,
    Frozen,
    HealthContext,
    HealthFinding,
    NodeFacts,
    Unknown,
    Verdict,
)
from macfleet.judge.checks.catalogue import CHECK_CODES, CHECKS, select_checks
from macfleet.judge.checks.network import ping_targets
from macfleet.judge.checks.system import check_reachable, wired_limit_target
from macfleet.judge.checks.updates import age_words
from macfleet.judge.inference import InferenceInput
from macfleet.judge.links_bench import LinksBenchInput
from macfleet.judge.topology import NodeTopologyFacts, check_cabling

# The catalogue's public face, for those who judge a pass (doctor, the healer, reboot, rollout, render).
__all__ = ["CHECKS", "CHECK_CODES", "CheckResult", "CheckSpec", "ClockReading", "HealthContext",
           "HealthFinding", "HealthReport", "HealthSummary", "NodeFacts", "Unknown", "Verdict", "age_words",
           "check_reachable", "judge_health", "ping_targets", "select_checks", "topology_facts",
           "wired_limit_target"]


class HealthSummary(Frozen):
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


class HealthReport(Frozen):
    findings: list[HealthFinding]
    checks: list[CheckResult]
    summary: HealthSummary

    def problems(self) -> list[str]:
        """Each finding and each check that could not tell, one line each."""
        return ([f"{f.node}: {f.message}" for f in self.findings]
                + [f"{c.node} {c.check}: could not tell ({c.reason})" for c in self.checks if c.result == "unknown"])

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


def judge_health(fleet: Fleet, meshes: list[Mesh], facts: Mapping[str, NodeFacts], now: datetime,
                 only: list[str] | None = None, links_bench: Mapping[str, LinksBenchInput] | None = None,
                 inference: Mapping[str, InferenceInput] | None = None) -> HealthReport:
    """Run the (selected) checks on every node of `meshes`, in catalogue order, so a check sees which of the
    checks it depends on found a problem on that node."""
    ctx = HealthContext(fleet=fleet, meshes=meshes, facts=dict(facts), now=now, links_bench=links_bench or {},
                        inference=inference or {})
    for m in meshes:
        up = {n: topology_facts(facts[n]) for n in m.node_names if n in facts and facts[n].reachable}
        down = {n: facts[n].unreachable_reason or "no answer" for n in m.node_names if n not in up}
        ctx.cabling[m.name] = check_cabling(m, up, down)
    findings: list[HealthFinding] = []
    results: list[CheckResult] = []
    nodes = [n for m in meshes for n in m.node_names]
    for spec in select_checks(only):
        for node in nodes:
            blocked = ctx.found_by(node, spec.depends)
            if blocked:
                results.append(CheckResult(check=spec.code, node=node, result="unknown",
                                           reason=f"not judged: {', '.join(blocked)} found a problem first"))
                continue
            verdict = spec.judge(ctx, node)
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
