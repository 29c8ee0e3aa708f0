"""The topology flows: one collection pass per look, judged mesh by mesh; the IP plan read, refused or applied.

Which commands a pass runs follows from what its judge reads: the fields of `NodeTopologyFacts` and
`NodeNetworkFacts` are KIND names, and their command lines, timeouts and parsers come from the one table in
`facts/registry.py`.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from macfleet.act.ansible import HostStats, PlaybookResult, PlaybookRun, ProgressEvent, raise_for, run_playbook
from macfleet.act.hostvars import write_generated_hostvars
from macfleet.collect.commands import CommandSpec, specs_for
from macfleet.collect.gather import Gathered, gather
from macfleet.errors import EXIT_OK, EXIT_UNREACHABLE, Refused, UnreachableError, UsageError, most_severe_exit
from macfleet.facts.registry import facts_from_outputs
from macfleet.inventory.model import Fleet, MacModelSpec, Mesh, known_models
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
from macfleet.judge.model import Change, Finding
from macfleet.judge.topology import (
    CablingPlan,
    NodeTopologyFacts,
    TopologyReport,
    WatchEvent,
    check_cabling,
    diff_reports,
    judge_exit_code,
    plan_cabling,
    plan_for_mesh,
)


def kinds_read_by(model: type[BaseModel]) -> tuple[str, ...]:
    """The KINDs a judge's per-node input model holds: its fact fields, named as KINDs."""
    return tuple(name.replace("_", "-") for name in model.model_fields if name != "problems")


TOPOLOGY_KINDS = kinds_read_by(NodeTopologyFacts)
# The IP plan binds addresses to the live cables, so its pass also reads what the cabling check needs to
# match cable ends (Thunderbolt and the port names); not the RDMA devices, which the plan does not use.
NETWORK_KINDS = tuple(dict.fromkeys(("thunderbolt", "hardware-ports", *kinds_read_by(NodeNetworkFacts))))


def collect(
    fleet: Fleet, meshes: list[Mesh], specs: tuple[CommandSpec, ...], *, cancel: threading.Event | None = None
) -> Gathered:
    return gather(fleet, [n for m in meshes for n in m.nodes], specs, cancel=cancel)


def _node_facts(gathered: Gathered, node: str, model: type[BaseModel], asked: Iterable[str]) -> dict:
    """The facts of `model` that this pass asked for, with every one that could not be read in `problems`."""
    wanted = set(kinds_read_by(model))
    kinds = [k for k in asked if k in wanted]
    facts, problems = facts_from_outputs(gathered.outputs.get(node, {}), gathered.failed.get(node, {}), kinds)
    return {**{k.replace("-", "_"): v for k, v in facts.items()}, "problems": problems}


def topology_facts(gathered: Gathered, node: str, asked: Iterable[str] = TOPOLOGY_KINDS) -> NodeTopologyFacts:
    return NodeTopologyFacts(**_node_facts(gathered, node, NodeTopologyFacts, asked))


def network_facts(gathered: Gathered, node: str, asked: Iterable[str] = NETWORK_KINDS) -> NodeNetworkFacts:
    return NodeNetworkFacts(**_node_facts(gathered, node, NodeNetworkFacts, asked))


def judge_cabling(meshes: list[Mesh], gathered: Gathered, asked: Iterable[str] = TOPOLOGY_KINDS
                  ) -> list[TopologyReport]:
    """Each mesh's cabling, judged from one pass; unreachable nodes are named, the rest still judged."""
    asked = tuple(asked)
    return [
        check_cabling(
            m,
            {n: topology_facts(gathered, n, asked) for n in m.node_names if n not in gathered.unreachable},
            {n: why for n, why in gathered.unreachable.items() if n in m.node_names},
        )
        for m in meshes
    ]


@dataclass
class CablingCheck:
    """`topology check` / `show`: each mesh's report from one pass."""

    reports: list[TopologyReport]
    gathered: Gathered

    @property
    def exit_code(self) -> int:
        return most_severe_exit([judge_exit_code(r) for r in self.reports])

    def json_payload(self) -> dict[str, Any]:
        """The documented `topology check --json` shape; several meshes' reports are concatenated."""
        if len(self.reports) == 1:
            return self.reports[0].json_payload()
        out: dict[str, Any] = {"nodes": [], "links": [], "findings": []}
        for r in self.reports:
            p = r.json_payload()
            for k in out:
                out[k] += p[k]
        return out


def check_topology(fleet: Fleet, meshes: list[Mesh], *, cancel: threading.Event | None = None) -> CablingCheck:
    gathered = collect(fleet, meshes, specs_for(TOPOLOGY_KINDS), cancel=cancel)
    return CablingCheck(judge_cabling(meshes, gathered), gathered)


def cabling_sheet(spec: MacModelSpec, count: int) -> CablingPlan:
    """The sheet for `count` Macs of one model, named after it ("studio-1"...)."""
    short = spec.marketing_name.lower().removeprefix("mac ").replace(" ", "-") or "mac"
    return plan_cabling([(f"{short}-{i + 1}", spec) for i in range(count)])


def mesh_sheet(mesh: Mesh) -> CablingPlan:
    """The sheet for an inventory mesh; UsageError naming the nodes whose model is not known."""
    plan = plan_for_mesh(mesh)
    if plan is None:
        unset = [n.name for n in mesh.nodes if n.model is None]
        unknown = [f"{n.name} ({n.model})" for n in mesh.nodes if n.model is not None and n.model_spec is None]
        if unset:
            raise UsageError("no macfleet_model for " + ", ".join(unset),
                             hint="set macfleet_model (e.g. \"Mac15,14\") for each node in hosts.yml")
        raise UsageError("a model macfleet does not know for " + ", ".join(unknown),
                         hint="macfleet_model must be one of: " + known_models())
    return plan


# ------------------------------------------------------------------------------------------------ watching


@dataclass
class Look:
    """One look of `topology watch`: the report, what changed since the last look, and whether the pairs
    still to cable changed (so they are said again only then)."""

    report: TopologyReport
    events: list[WatchEvent]
    missing_changed: bool


def watch_topology(
    fleet: Fleet,
    mesh: Mesh,
    *,
    interval_s: float,
    timeout_s: float | None,
    on_look: Callable[[Look], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TopologyReport:
    """Check every `interval_s` until the mesh is clean or `timeout_s` has passed; returns the last report
    (clean when the mesh is complete)."""
    started = clock()
    previous: TopologyReport | None = None
    while True:
        t0 = clock()
        report = check_topology(fleet, [mesh]).reports[0]
        missing_changed = previous is None or report.missing != previous.missing
        on_look(Look(report, diff_reports(previous, report), missing_changed))
        previous = report
        if report.clean or (timeout_s is not None and clock() - started >= timeout_s):
            return report
        sleep(max(0.0, interval_s - (clock() - t0)))


# ---------------------------------------------------------------------------------------------- the IP plan


@dataclass
class LivePlan:
    """The IP plan bound to the live cables, with what each node has now and what could not be read."""

    plan: IpPlan
    facts: dict[str, NodeNetworkFacts]
    reports: list[TopologyReport]
    gathered: Gathered
    collisions: list[Finding] = field(default_factory=list)

    @property
    def unreachable(self) -> dict[str, str]:
        return dict(self.gathered.unreachable)

    @property
    def unknown_nodes(self) -> dict[str, str]:
        """Nodes whose live addresses could not be read (unreachable, or ifconfig unanswered), with why."""
        out = dict(self.gathered.unreachable)
        for n, f in self.facts.items():
            if f.ifconfig is None:
                out[n] = "; ".join(p for p in f.problems if p.startswith("ifconfig")) or "ifconfig was not read"
        return out

    @property
    def exit_code(self) -> int:
        return EXIT_UNREACHABLE if self.gathered.unreachable else EXIT_OK


def plan_live(fleet: Fleet, meshes: list[Mesh], gathered: Gathered | None = None) -> LivePlan:
    """The IP plan on the live cables. `gathered`: a pass that read NETWORK_KINDS on these nodes along with
    the caller's own commands (bootstrap's), so the nodes are not asked twice."""
    if gathered is None:
        gathered = collect(fleet, meshes, specs_for(NETWORK_KINDS))
    reports = judge_cabling(meshes, gathered, NETWORK_KINDS)
    facts = {n: network_facts(gathered, n) for m in meshes for n in m.node_names if n not in gathered.unreachable}
    plan = IpPlan(links=[], mtu={})
    for m in meshes:
        p = plan_ip(fleet, m.name)
        plan = plan.model_copy(update={"links": plan.links + p.links, "mtu": {**plan.mtu, **p.mtu}})
    plan = with_drift(bind_ports(plan, {r.mesh: r for r in reports}), facts)
    collisions = find_collisions(plan, facts, {n.name: n.address for m in meshes for n in m.nodes})
    return LivePlan(plan=plan, facts=facts, reports=reports, gathered=gathered, collisions=collisions)


@dataclass
class PreparedApply:
    """The plan checked on every node, with each node's generated host_vars, ready to hand to Ansible."""

    nodes: list[str]
    hostvars: dict[str, dict]  # node -> the variables `playbooks/network.yml` applies
    diffs: dict[str, list[str]]  # node -> the judge's own per-node changes (or why nothing is to do)
    uncabled: dict[str, int]  # mesh -> pairs with no cable yet (their addresses wait for the cable)


def prepare_apply(fleet: Fleet, meshes: list[Mesh], gathered: Gathered | None = None) -> PreparedApply:
    """One pass (or the caller's, as in `plan_live`), then refuse if a node is unreachable, could not be read
    or the pool collides. Writes nothing: `apply_network` decides where the host_vars go."""
    live = plan_live(fleet, meshes, gathered)
    if live.gathered.unreachable:
        raise UnreachableError(live.gathered.unreachable,
                               hint="nothing was changed; the plan is checked on every node before any change")
    refusal = refuse_on_collision(live.collisions)
    if refusal is not None:
        raise Refused(refusal.reason, hint=live.collisions[0].fix, details={"nodes": refusal.nodes})
    nodes = [n for m in meshes for n in m.node_names]
    diffs = {
        n: [c.what if isinstance(c, Change) else f"nothing to do: {c.reason}"
            for c in diff_ip(live.plan, n, live.facts[n])]
        for n in nodes
    }
    uncabled = {r.mesh: n for r in live.reports if (n := sum(f.code == "missing-pair" for f in r.findings))}
    return PreparedApply(nodes=nodes, hostvars={n: network_vars(live.plan, n, live.facts[n]) for n in nodes},
                         diffs=diffs, uncabled=uncabled)


@contextmanager
def inventory_for_run(fleet: Fleet, prepared: PreparedApply, check: bool) -> Iterator[Path]:
    """Where the playbook reads the plan from. A real run writes the generated host_vars into the inventory
    (so a later plain `ansible-playbook` applies the same plan); a check run writes them into a private
    copy of the inventory, removed afterwards, so a preview changes nothing on disk."""
    if not check:
        for n in prepared.nodes:
            write_generated_hostvars(fleet, n, prepared.hostvars[n], by="topology apply")
        yield fleet.root
        return
    with tempfile.TemporaryDirectory(prefix="macfleet-check-") as tmp:
        copy = Path(tmp) / fleet.root.name
        shutil.copytree(fleet.root, copy, symlinks=True)
        shadow = fleet.model_copy(update={"root": copy})
        for n in prepared.nodes:
            write_generated_hostvars(shadow, n, prepared.hostvars[n], by="topology apply --check")
        yield copy


@dataclass
class AppliedPlan:
    """What `topology apply` did (or, under --check, would do)."""

    prepared: PreparedApply
    result: PlaybookResult
    check: bool

    @property
    def summary(self) -> dict:
        """The documented `topology apply --json` shape."""
        stats = {n: self.result.hosts.get(n, HostStats()) for n in self.prepared.nodes}
        return {"changed": self.result.changed,
                "nodes": {n: {"changed": s.changed, "failed": bool(s.failed)} for n, s in stats.items()}}

    @property
    def changes(self) -> dict[str, list[str]]:
        """Per node: the judge's own list under --check, else the tasks that changed something."""
        return self.prepared.diffs if self.check else self.result.changes

    @property
    def failed(self) -> bool:
        r = self.result
        return bool(r.unreachable or r.failed_tasks or r.status != "successful")

    def raise_failure(self) -> None:
        """The error for a failed run (unreachable outranks task failures), or nothing."""
        if self.failed:
            raise_for(self.result)


def apply_network(
    fleet: Fleet,
    meshes: list[Mesh],
    *,
    check: bool,
    on_prepared: Callable[[PreparedApply], None] = lambda _: None,
    on_event: Callable[[ProgressEvent], None] | None = None,
    diff: bool = False,
) -> AppliedPlan:
    """Refuse (nothing written, nothing run) or run `playbooks/network.yml` on the plan."""
    prepared = prepare_apply(fleet, meshes)
    on_prepared(prepared)
    with inventory_for_run(fleet, prepared, check) as inventory:
        result = run_playbook(PlaybookRun(playbook="network", inventory=inventory, limit=tuple(prepared.nodes),
                                          check=check, diff=check or diff), on_event=on_event,
                              raise_on_failure=False)
    return AppliedPlan(prepared=prepared, result=result, check=check)
