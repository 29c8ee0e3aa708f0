"""The topology flows: one collection pass per look, judged mesh by mesh."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from macfleet.act.hostvars import write_generated_hostvars
from macfleet.collect.commands import NETWORK_SPECS, TOPOLOGY_SPECS, CommandSpec
from macfleet.collect.gather import Gathered, gather
from macfleet.errors import Refused, UnreachableError
from macfleet.facts.registry import facts_from_outputs
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.ipplan import (
    IpPlan,
    NodeNetworkFacts,
    bind_ports,
    diff_ip,
    find_collisions,
    network_vars,
    plan_ip,
    refuse_on_collision,
    with_drift,
)
from macfleet.judge.model import Change
from macfleet.judge.topology import NodeTopologyFacts, TopologyReport, check_cabling

TOPOLOGY_KINDS = ("thunderbolt", "hardware-ports", "ibv-devices", "ibv-devinfo", "ifconfig")
NETWORK_KINDS = ("hardware-ports", "service-order", "ifconfig", "netstat-routes")


def collect(
    fleet: Fleet, meshes: list[Mesh], specs: tuple[CommandSpec, ...], *, cancel: threading.Event | None = None
) -> Gathered:
    return gather(fleet, [n for m in meshes for n in m.nodes], specs, cancel=cancel)


def topology_facts(gathered: Gathered, node: str) -> NodeTopologyFacts:
    facts, problems = facts_from_outputs(gathered.outputs.get(node, {}), gathered.failed.get(node, {}), TOPOLOGY_KINDS)
    return NodeTopologyFacts(**{k.replace("-", "_"): v for k, v in facts.items()}, problems=problems)


def network_facts(gathered: Gathered, node: str) -> NodeNetworkFacts:
    facts, _ = facts_from_outputs(gathered.outputs.get(node, {}), gathered.failed.get(node, {}), NETWORK_KINDS)
    return NodeNetworkFacts(**{k.replace("-", "_"): v for k, v in facts.items()})


def judge_cabling(meshes: list[Mesh], gathered: Gathered) -> list[TopologyReport]:
    """Each mesh's cabling, judged from one pass; unreachable nodes are named, the rest still judged."""
    return [
        check_cabling(
            m,
            {n: topology_facts(gathered, n) for n in m.node_names if n not in gathered.unreachable},
            {n: why for n, why in gathered.unreachable.items() if n in m.node_names},
        )
        for m in meshes
    ]


def check_topology(
    fleet: Fleet, meshes: list[Mesh], *, cancel: threading.Event | None = None
) -> tuple[list[TopologyReport], Gathered]:
    gathered = collect(fleet, meshes, TOPOLOGY_SPECS, cancel=cancel)
    return judge_cabling(meshes, gathered), gathered


@dataclass
class LivePlan:
    """The IP plan bound to the live cables, with what each node has now."""

    plan: IpPlan
    facts: dict[str, NodeNetworkFacts]
    reports: list[TopologyReport]
    gathered: Gathered


def plan_live(fleet: Fleet, meshes: list[Mesh]) -> LivePlan:
    gathered = collect(fleet, meshes, NETWORK_SPECS)
    reports = judge_cabling(meshes, gathered)
    facts = {n: network_facts(gathered, n) for m in meshes for n in m.node_names if n not in gathered.unreachable}
    plan = IpPlan(links=[], mtu={})
    for m in meshes:
        p = plan_ip(fleet, m.name)
        plan = plan.model_copy(update={"links": plan.links + p.links, "mtu": {**plan.mtu, **p.mtu}})
    plan = with_drift(bind_ports(plan, {r.mesh: r for r in reports}), facts)
    return LivePlan(plan=plan, facts=facts, reports=reports, gathered=gathered)


@dataclass
class PreparedApply:
    """The plan checked on every node and handed to Ansible as generated host_vars, ready to run."""

    nodes: list[str]
    diffs: dict[str, list[str]]  # node -> the judge's own per-node changes (or why nothing is to do)
    uncabled: dict[str, int]  # mesh -> pairs with no cable yet (their addresses wait for the cable)


def prepare_apply(fleet: Fleet, meshes: list[Mesh], *, write: bool = True) -> PreparedApply:
    """One pass, then refuse (nothing written) if a node is unreachable or the pool collides; else write
    each node's generated host_vars, so `playbooks/network.yml` applies exactly this plan (`write=False`:
    judge only, for a --check that must not touch the inventory either)."""
    live = plan_live(fleet, meshes)
    if live.gathered.unreachable:
        raise UnreachableError(live.gathered.unreachable,
                               hint="nothing was changed; the plan is checked on every node before any change")
    collisions = find_collisions(live.plan, live.facts, {n.name: n.address for m in meshes for n in m.nodes})
    refusal = refuse_on_collision(collisions)
    if refusal is not None:
        raise Refused(refusal.reason, hint=collisions[0].fix, details={"nodes": refusal.nodes})
    nodes = [n for m in meshes for n in m.node_names]
    for n in nodes if write else ():
        write_generated_hostvars(fleet, n, network_vars(live.plan, n, live.facts[n]), by="topology apply")
    diffs = {
        n: [c.what if isinstance(c, Change) else f"nothing to do: {c.reason}"
            for c in diff_ip(live.plan, n, live.facts[n])]
        for n in nodes
    }
    uncabled = {r.mesh: n for r in live.reports if (n := sum(f.code == "missing-pair" for f in r.findings))}
    return PreparedApply(nodes=nodes, diffs=diffs, uncabled=uncabled)
