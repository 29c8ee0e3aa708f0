"""Run checks: the checks asked for → the probes they read (judge/checks) → each node's commands → one pass over
the fleet or over kept sessions → parsed → judged. Doctor, the healer, reboot's verification, rollout's health
gate and the bench run checks through here; none keeps a list of its own.

The catalogue is imported where it is used, not at the top: a doctor run dials every node first, and the
catalogue (the parsers and judges behind it) is imported on the first node thread whose login is done, while
the others shake hands (`per_node` in `collect.gather.start_gather`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from macfleet.collect.commands import CommandSpec
from macfleet.collect.gather import Gathered, start_gather
from macfleet.inventory.model import Fleet, Mesh, Node

if TYPE_CHECKING:
    from macfleet.act.probecache import CachedAnswer
    from macfleet.collect.kept import NodeSessions
    from macfleet.collect.ssh import Raw
    from macfleet.judge.checks.base import Check, Probe
    from macfleet.judge.health import HealthReport, NodeFacts


# --------------------------------------------------------------------------------------------- the answers


class NodeAnswers:
    """One node's answers of a pass, as the probes read them; what could not be read says why (`problems`)."""

    def __init__(self, gathered: Gathered, node: str):
        self.outputs = gathered.outputs.get(node, {})
        self.failed = gathered.failed.get(node, {})
        self.problems: dict[str, str] = {}
        self.timed_out: list[str] = []

    def raw(self, key: str) -> Raw | None:
        return self.outputs.get(key)

    def text(self, key: str) -> str | None:
        """A command's stdout, or None with the reason recorded: could not read is never nothing there."""
        if key in self.failed:
            self.problems[key] = self.failed[key]
            if key not in self.timed_out:
                self.timed_out.append(key)
            return None
        raw = self.outputs.get(key)
        if raw is None:
            self.problems[key] = "no answer (the command could not be started)"
            return None
        if raw.rc != 0 and not raw.stdout.strip():
            self.problems[key] = f"exit {raw.rc}: {raw.stderr.strip()[-200:] or 'no output'}"
            return None
        return raw.stdout

    def keys(self, kind: str) -> list[str]:
        return [k for k in dict.fromkeys((*self.outputs, *self.failed)) if k.split(":", 1)[0] == kind]

    def unread(self, key: str, why: str) -> None:
        self.problems[key] = why

    def problem(self, key: str) -> str | None:
        return self.problems.get(key)


def node_facts(gathered: Gathered, node: str, probes: Sequence[Probe] | None = None) -> NodeFacts:
    """One node's answers of the pass, parsed by `probes` (None: every probe of the catalogue); each fact that
    could not be read says why."""
    from macfleet.judge.checks.catalogue import PROBES
    from macfleet.judge.health import NodeFacts

    if node in gathered.unreachable:
        return NodeFacts(reachable=False, unreachable_reason=gathered.unreachable[node])
    answers = NodeAnswers(gathered, node)
    values: dict = {}
    for probe in PROBES.values() if probes is None else probes:
        values.update(probe.facts(answers))
    return NodeFacts(**values, timed_out=answers.timed_out, problems=answers.problems)


# ------------------------------------------------------------------------------------------------ the plan


@dataclass
class CheckPlan:
    """The checks asked for on `meshes`, the probes they read, and each node's commands for them."""

    fleet: Fleet
    meshes: list[Mesh]
    checks: list[Check]
    probes: list[Probe]

    @classmethod
    def of(cls, fleet: Fleet, meshes: list[Mesh], codes: Sequence[str] | None) -> CheckPlan:
        """`codes` (None: every check; `reachable` always), in catalogue order."""
        from macfleet.judge.checks.catalogue import probes_for, select_checks

        checks = select_checks(list(codes) if codes else None)
        return cls(fleet=fleet, meshes=list(meshes), checks=checks, probes=probes_for(checks))

    @property
    def codes(self) -> list[str]:
        return [c.code for c in self.checks]

    def specs(self, node: str, extra: tuple[CommandSpec, ...] = ()) -> tuple[CommandSpec, ...]:
        """The node's commands for the plan's probes, and `extra` ones besides. probes.command_timeout_s bounds
        each, but a probe whose answer is kept between passes (a slow one, asked at most every few hours) keeps
        its own timeout."""
        from macfleet.judge.checks.base import Scope

        mesh = next(m for m in self.meshes if node in m.node_names)
        scope = Scope(fleet=self.fleet, mesh=mesh, node=node)
        cap = mesh.settings.probes.command_timeout_s
        mine = [(s, p.cache) for p in self.probes for s in p.command(scope)]
        mine += [(s, None) for s in extra if s.key not in {m.key for m, _ in mine}]
        return tuple(s if cached else replace(s, timeout_s=min(s.timeout_s, cap)) for s, cached in mine)

    def asked(self, node: str) -> list[Probe]:
        """The plan's probes that have a command on this node."""
        from macfleet.judge.checks.base import Scope

        mesh = next(m for m in self.meshes if node in m.node_names)
        return [p for p in self.probes if p.command(Scope(fleet=self.fleet, mesh=mesh, node=node))]

    def facts(self, gathered: Gathered, node: str) -> NodeFacts:
        return node_facts(gathered, node, self.asked(node))

    def judge(self, facts: dict[str, NodeFacts], now: datetime | None = None) -> HealthReport:
        from macfleet.judge.health import judge_health

        bench = None
        if "links-bench" in self.codes:
            from macfleet.flow.bench_links import links_bench_inputs

            bench = links_bench_inputs(self.fleet, self.meshes)
        inference = None
        if "inference" in self.codes:
            from macfleet.flow.placed import inference_inputs

            inference = inference_inputs(self.fleet, self.meshes, facts)
        return judge_health(self.fleet, self.meshes, facts, now or datetime.now(UTC), only=self.codes,
                            links_bench=bench, inference=inference)


# ----------------------------------------------------------------------------------------------- the pass


@dataclass
class CheckRun:
    report: HealthReport
    gathered: Gathered
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    cached: dict[str, dict[str, float]] = field(default_factory=dict)  # node -> probe key -> age (s) of its answer


def run_checks(fleet: Fleet, meshes: list[Mesh], codes: Sequence[str] | None, *,
               sessions: NodeSessions | None = None, extra: tuple[CommandSpec, ...] = (),
               now: datetime | None = None, cancel: threading.Event | None = None, deadline_s: float | None = None,
               dialled: Callable[[], None] | None = None, fresh: bool = False) -> CheckRun:
    """The checks `codes` (None: all) on every node of `meshes`: their probes read in one bounded pass, over
    `sessions` when given (kept open, the healer's and reboot's) or dialled now, parsed and judged. `extra`
    commands are run in the same pass and left in `CheckRun.gathered` (what a reboot reads first). A slow probe
    (one whose answer is kept) is asked only of the nodes whose kept answer is older than its setting, or of
    all with `fresh`. `dialled` is called once every node is being dialled. Never raises for a node's sake."""
    nodes = [n for m in meshes for n in m.nodes]
    state = _Lazy(fleet, meshes, codes, nodes, fresh, extra)

    if sessions is not None:
        probes = min(m.settings.probes.gather_deadline_s for m in meshes) if meshes else 30.0
        gathered = sessions.gather((), deadline_s or probes, per_node=state.specs, nodes=[n.name for n in nodes])
    else:
        pending = start_gather(fleet, nodes, (), cancel=cancel, deadline_s=deadline_s, per_node=state.specs)
        try:
            if dialled is not None:
                dialled()
            state.get()  # the catalogue imported while the nodes answer, if no node thread did it yet
        except BaseException:  # Ctrl-C (or a broken install) while the nodes answer: stop the pass too
            pending.abandon()
            raise
        gathered = pending.result()
    plan = state.get()
    ages = _use_and_keep(fleet, nodes, gathered, state.cache_plan(), time.time())
    facts = {n.name: plan.facts(gathered, n.name).model_copy(update={"ages": ages.get(n.name, {})}) for n in nodes}
    return CheckRun(report=plan.judge(facts, now), gathered=gathered, facts=facts, cached=ages)


class _Lazy:
    """The plan and the slow probes' cache, worked out once, by the first thread that needs them."""

    def __init__(self, fleet: Fleet, meshes: list[Mesh], codes: Sequence[str] | None, nodes: list[Node],
                 fresh: bool, extra: tuple[CommandSpec, ...]):
        self.fleet, self.meshes, self.codes, self.nodes, self.fresh = fleet, meshes, codes, nodes, fresh
        self.extra = extra
        self.lock = threading.Lock()
        self.plan: CheckPlan | None = None
        self.cached: dict[str, dict[str, CachedAnswer]] = {}

    def get(self) -> CheckPlan:
        with self.lock:
            if self.plan is None:
                self.plan = CheckPlan.of(self.fleet, self.meshes, self.codes)
                slow = {p.key: p.cache for p in self.plan.probes if p.cache}
                self.cached = _cache_plan(self.fleet, self.nodes, slow, self.fresh, time.time())
            return self.plan

    def cache_plan(self) -> dict[str, dict[str, CachedAnswer]]:
        self.get()
        return self.cached

    def specs(self, node: str) -> tuple[CommandSpec, ...]:
        plan = self.get()
        return tuple(s for s in plan.specs(node, self.extra) if node not in self.cached.get(s.kind, {}))


# ------------------------------------------------------------------------------------ the slow probes' cache


def _cache_key(fleet: Fleet, node: Node) -> str:
    from macfleet.act import probecache

    return probecache.node_key(str(fleet.root), node.name, node.address, node.port)


def _cache_plan(fleet: Fleet, nodes: list[Node], slow: dict[str, str], fresh: bool, now: float
                ) -> dict[str, dict[str, CachedAnswer]]:
    """probe key -> node -> the kept answer this pass uses instead of asking (young enough, not `fresh`).
    `slow`: probe key -> the ProbeSettings field of its maximum age."""
    from macfleet.act import probecache

    plan: dict[str, dict[str, CachedAnswer]] = {}
    for key, setting in slow.items():
        plan[key] = {}
        if fresh:
            continue
        found = probecache.load(key, [_cache_key(fleet, n) for n in nodes])
        for n in nodes:
            a = found.get(_cache_key(fleet, n))
            if a is not None and a.age_s(now) < getattr(fleet.mesh(n.mesh).settings.probes, setting):
                plan[key][n.name] = a
    return plan


def _use_and_keep(fleet: Fleet, nodes: list[Node], gathered: Gathered,
                  plan: dict[str, dict[str, CachedAnswer]], now: float) -> dict[str, dict[str, float]]:
    """Put the kept answers into the pass as if just read (their age noted), and keep this pass's fresh ones.
    A probe that failed, timed out or cannot be parsed now is not kept: the next pass asks again."""
    from macfleet.act import probecache
    from macfleet.collect.ssh import Raw

    ages: dict[str, dict[str, float]] = {}
    for key, used in plan.items():
        fresh_answers = {}
        for n in nodes:
            if n.name in gathered.unreachable:
                continue  # an unreachable node is judged unreachable, not from an old answer
            if n.name in used:
                a = used[n.name]
                gathered.outputs.setdefault(n.name, {})[key] = Raw(stdout=a.stdout, stderr=a.stderr, rc=a.rc,
                                                                   took_s=0.0, ended_at=a.read_at)
                ages.setdefault(n.name, {})[key] = a.age_s(now)
            elif (raw := gathered.outputs.get(n.name, {}).get(key)) is not None and _answers(key, raw):
                fresh_answers[_cache_key(fleet, n)] = probecache.CachedAnswer(
                    stdout=raw.stdout, stderr=raw.stderr, rc=raw.rc, read_at=raw.ended_at or now)
        with contextlib.suppress(OSError):  # a cache that cannot be written only means the next pass asks again
            probecache.store(key, fresh_answers)
    return ages


def _answers(key: str, raw: Raw) -> bool:
    """Whether a slow probe's output is an answer worth keeping: it exited 0 and its probe reads it."""
    from macfleet.judge.checks.catalogue import PROBES

    if raw.rc != 0:
        return False
    answers = NodeAnswers(Gathered(outputs={"n": {key: raw}}), "n")
    PROBES[key].facts(answers)
    return not answers.problems
