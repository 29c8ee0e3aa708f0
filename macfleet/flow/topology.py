"""The topology flows: one collection pass per look, judged mesh by mesh."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from macfleet.collect.commands import NETWORK_SPECS, TOPOLOGY_SPECS, CommandSpec
from macfleet.collect.gather import Gathered, gather
from macfleet.facts.registry import facts_from_outputs
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.ipplan import IpPlan, NodeNetworkFacts, bind_ports, plan_ip, with_drift
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
