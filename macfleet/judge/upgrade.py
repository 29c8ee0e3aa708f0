"""The macOS target build (inventory `macfleet_macos`): where each node stands against it, and `macfleet upgrade`'s
plan. Pure: facts in (sw_vers, `softwareupdate --list`), verdicts out.

A node is on the target (sw_vers says the build), or Apple offers the target there (a macOS update in its
`softwareupdate --list` whose label ends in `-<build>`, as `macOS Tahoe 26.2-25C56`), or not (another build
offered, or nothing): the target is then unreachable from that node with softwareupdate, and upgrade refuses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from macfleet.facts.probes import UpdatesFacts

Standing = Literal["on-target", "offered", "not-offered", "unknown"]


@dataclass(frozen=True)
class NodeStanding:
    node: str
    build: str | None  # sw_vers, None: not read
    standing: Standing
    label: str | None = None  # the softwareupdate label that installs the target
    restart: bool = True
    offered: tuple[str, ...] = ()  # every macOS build offered there
    why: str = ""  # for unknown: what could not be read

    def words(self, target: str) -> str:
        on = f"on {self.build}" if self.build else "build not read"
        if self.standing == "on-target":
            return f"{self.node}: {on}, the target"
        if self.standing == "offered":
            return f"{self.node}: {on}; {target} offered ({self.label})"
        if self.standing == "not-offered":
            other = ", ".join(self.offered) or "no macOS update"
            return f"{self.node}: {on}; {target} not offered (Apple offers {other})"
        return f"{self.node}: {on}; cannot tell whether {target} is offered ({self.why})"


def standing(node: str, build: str | None, updates: UpdatesFacts | None, target: str, why: str = "") -> NodeStanding:
    if build == target:
        return NodeStanding(node, build, "on-target")
    if updates is None:
        return NodeStanding(node, build, "unknown", why=why or "softwareupdate --list not read")
    macos = [u for u in updates.pending if u.build]
    hit = next((u for u in macos if u.build == target), None)
    offered = tuple(u.build for u in macos if u.build)
    if hit is not None:
        return NodeStanding(node, build, "offered", label=hit.label, restart=hit.restart, offered=offered)
    if build is None:
        return NodeStanding(node, build, "unknown", offered=offered, why=why or "sw_vers not read")
    return NodeStanding(node, build, "not-offered", offered=offered)


@dataclass
class UpgradePlan:
    mesh: str
    target: str
    together: bool
    nodes: list[NodeStanding]
    done: list[str] = field(default_factory=list)  # nodes a former, interrupted run already brought to the target
    refusals: list[str] = field(default_factory=list)

    @property
    def todo(self) -> list[NodeStanding]:
        return [n for n in self.nodes if n.standing == "offered" and n.node not in self.done]

    @property
    def nothing_to_do(self) -> bool:
        return not self.refusals and all(n.standing == "on-target" for n in self.nodes)


def plan_upgrade(mesh: str, target: str | None, nodes: list[NodeStanding], *, together: bool,
                 done: list[str] | None = None) -> UpgradePlan:
    """One node at a time in inventory order (or all together); refused, naming each node, when the target is not
    set, not offered to a node, or cannot be told there: nothing is installed anywhere then."""
    plan = UpgradePlan(mesh=mesh, target=target or "", together=together, nodes=nodes, done=list(done or []))
    if not target:
        plan.refusals.append("no target build: set macfleet_macos.build in the inventory (sw_vers -buildVersion "
                             "of the build the mesh should run, e.g. 25C56)")
        return plan
    for n in nodes:
        if n.standing in ("not-offered", "unknown"):
            plan.refusals.append(n.words(target))
    return plan
