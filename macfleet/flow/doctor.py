"""The doctor flow: one bounded pass of every check's probes on every node (flow/checks.py, over the catalogue in
judge/checks); `--fix` applies the safe fixes through their checks' playbooks and judges again."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from macfleet.errors import EXIT_PROBLEMS, EXIT_UNREACHABLE, MacfleetError, UsageError, most_severe_exit
from macfleet.flow.checks import CheckRun, run_checks
from macfleet.inventory.model import Fleet, Mesh

# The catalogue and the judges are imported where they are used, not here: a doctor run dials every node first
# and imports them while the nodes answer (flow/checks.py), which hides most of the CLI's start-up behind the pass.
if TYPE_CHECKING:
    from macfleet.judge.checks.base import CheckSpec
    from macfleet.judge.health import HealthReport, NodeFacts


def run_doctor(fleet: Fleet, meshes: list[Mesh], *, only: list[str] | None = None, now: datetime | None = None,
               cancel: threading.Event | None = None, deadline_s: float | None = None,
               dialled: Callable[[], None] | None = None, fresh: bool = False) -> CheckRun:
    """One bounded pass over every node of `meshes`, judged: the checks `only` (None: all) and the probes they
    read, no other (`softwareupdate --list` asks Apple's catalogue: a pass that does not judge updates does
    not pay for it). Never raises for a node's sake. `dialled` is called once every node is being dialled (the
    CLI says so then, and pays for its console meanwhile). A slow probe is asked only of the nodes whose cached
    answer is older than its setting, or of all with `fresh`; the others' cached answers are judged, their ages
    in `CheckRun.cached`."""
    return run_checks(fleet, meshes, only, now=now, cancel=cancel, deadline_s=deadline_s, dialled=dialled,
                      fresh=fresh)


# ------------------------------------------------------------------------------------------------- --fix


@dataclass
class FixStep:
    playbook: str
    nodes: list[str]
    checks: list[str]
    extravars: dict = field(default_factory=dict)
    status: str = "pending"  # "applied", "would apply" (--check), "failed: ...", "skipped: ..."
    changes: dict[str, list[str]] = field(default_factory=dict)  # node -> tasks that changed (or would)


@dataclass
class FixRun:
    before: HealthReport
    after: HealthReport | None
    steps: list[FixStep]
    not_fixed: list[tuple[str, str, str]]  # (node, check, why it is not fixed automatically)


def plan_fixes(report: HealthReport) -> tuple[list[FixStep], list[tuple[str, str, str]]]:
    """Which playbooks to run on which nodes, and which findings are left to a human (and why)."""
    steps: dict[str, FixStep] = {}
    left: list[tuple[str, str, str]] = []
    from macfleet.judge.checks.catalogue import BY_CODE

    for f in report.findings:
        book = BY_CODE[f.check].fix if f.check in BY_CODE else None
        if book is None:
            left.append((f.node, f.check, f.fix))
            continue
        step = steps.setdefault(book, FixStep(playbook=book, nodes=[], checks=[]))
        if f.node not in step.nodes:
            step.nodes.append(f.node)
        if f.check not in step.checks:
            step.checks.append(f.check)
    return list(steps.values()), left


def fix_vars(step: FixStep, meshes: list[Mesh], facts: dict[str, NodeFacts]) -> dict:
    """The judge's values a fix playbook applies (the inventory's pmset, each node's planned wired limit)."""
    if step.playbook != "power":
        return {}
    from macfleet.judge.health import wired_limit_target

    mesh_of = {n: m for m in meshes for n in m.node_names}
    wired = {}
    for n in step.nodes:
        sysctl = facts[n].sysctl
        target = wired_limit_target(mesh_of[n], sysctl.int_value("hw.memsize") if sysctl else None)
        if target is not None:
            wired[n] = target
    return {"power_pmset": dict(mesh_of[step.nodes[0]].settings.power.pmset), "power_wired_limit_by_host": wired}


def fix_doctor(fleet: Fleet, meshes: list[Mesh], apply: Callable[[FixStep, Fleet, list[Mesh]], None], *,
               only: list[str] | None = None, fresh: bool = False) -> FixRun:
    """Judge, apply the safe fixes (never a reboot) through `apply` (one playbook run per step), judge again."""
    first = run_doctor(fleet, meshes, only=only, fresh=fresh)
    before = first.report
    steps, left = plan_fixes(before)
    for step in steps:
        step.extravars = fix_vars(step, meshes, first.facts)
    if not steps:
        return FixRun(before=before, after=None, steps=[], not_fixed=left)
    for step in steps:
        try:
            apply(step, fleet, meshes)
            step.status = "applied"
        except Exception as exc:  # a failed fix is reported with the rest; the second look says what is left
            step.status = f"failed: {getattr(exc, 'message', exc)}"
    after = run_doctor(fleet, meshes, only=only).report
    return FixRun(before=before, after=after, steps=steps, not_fixed=left)


def apply_fix_step(step: FixStep, fleet: Fleet, meshes: list[Mesh], *, check: bool = False,
                   diff: bool = False, on_diff: Callable[[str, str, str], None] | None = None) -> None:
    """Run one fix's playbook on its nodes. The IP plan is written as generated host_vars first (the same
    `prepare_apply` as `topology apply`), so the playbook applies exactly the plan doctor judged against.
    `check`: Ansible's check mode, against a private copy of the inventory (as `topology apply --check`), so
    nothing changes on a node or on disk; `diff`: Ansible's --diff. What changed (or would) is in `step.changes`."""
    # imported here: a plain doctor run (and `watch` at every tick) does not pay for Ansible's side
    from macfleet.act.ansible import PLAYBOOKS_DIR, PlaybookRun, run_playbook
    from macfleet.flow.topology import inventory_for_run, prepare_apply

    if not (PLAYBOOKS_DIR / f"{step.playbook}.yml").is_file():
        raise MacfleetError(f"playbooks/{step.playbook}.yml is not built yet", hint="; ".join(step.checks))
    with contextlib.ExitStack() as stack:
        inventory = fleet.root
        if step.playbook == "network":
            prepared = prepare_apply(fleet, [m for m in meshes if set(step.nodes) & set(m.node_names)])
            if check:
                inventory = stack.enter_context(inventory_for_run(fleet, prepared, check=True))
        result = run_playbook(PlaybookRun(playbook=step.playbook, inventory=inventory, limit=tuple(step.nodes),
                                          extravars=step.extravars, check=check, diff=diff),
                              on_event=lambda e: on_diff(e.host, e.task, e.diff) if e.diff and on_diff else None)
    step.changes = result.changes


def preview_fixes(fleet: Fleet, meshes: list[Mesh], *, only: list[str] | None = None, fresh: bool = False,
                  diff: bool = False, on_diff: Callable[[str, str, str], None] | None = None) -> FixRun:
    """`doctor --fix --check`: judge once, then run each fix's playbook in check mode on its nodes: which
    playbooks would run where, and the tasks that would change. Nothing changes; no second look."""
    first = run_doctor(fleet, meshes, only=only, fresh=fresh)
    steps, left = plan_fixes(first.report)
    for step in steps:
        step.extravars = fix_vars(step, meshes, first.facts)
        try:
            apply_fix_step(step, fleet, meshes, check=True, diff=diff, on_diff=on_diff)
            step.status = "would apply"
        except Exception as exc:  # reported with the rest, as a real run reports a failed fix
            step.status = f"failed: {getattr(exc, 'message', exc)}"
    return FixRun(before=first.report, after=None, steps=steps, not_fixed=left)


def check_catalogue() -> list[CheckSpec]:
    """`doctor --list`: every check with its stable code."""
    from macfleet.judge.checks.catalogue import catalogue_specs

    return catalogue_specs()


def limited_checks(only: list[str] | None) -> list[str]:
    """`--only` (or every check) without those judged across a whole mesh (its cables and the RDMA ports on
    them, its IP plan keyed by pair, versions alike on every node, exo's view of its peers), for a pass over part
    of a mesh."""
    from macfleet.judge.checks.catalogue import BY_CODE, CHECK_CODES

    return [c for c in (only or CHECK_CODES) if not BY_CODE[c].mesh_wide]


def parse_only(value: str | None) -> list[str] | None:
    """`--only a,b`: known check codes, or UsageError naming the unknown ones."""
    if not value:
        return None
    from macfleet.judge.checks.catalogue import CHECK_CODES

    codes = [c.strip() for c in value.split(",") if c.strip()]
    bad = [c for c in codes if c not in CHECK_CODES]
    if bad:
        raise UsageError(f"--only: unknown check(s) {', '.join(bad)}", hint="checks: " + ", ".join(CHECK_CODES))
    return codes


def doctor_exit_code(report: HealthReport) -> int:
    """3 when a node is unreachable, 1 for findings or a check that could not tell, else 0."""
    codes = [EXIT_UNREACHABLE] if report.summary.unreachable else []
    if report.findings or report.summary.unknown:
        codes.append(EXIT_PROBLEMS)
    return most_severe_exit(codes)


def fix_payload(run: FixRun) -> dict:
    """`doctor --fix --json`: the report before and after, the playbooks run and what was left."""
    return {"before": run.before.json_payload(), "after": run.after.json_payload() if run.after else None,
            "fixes": [{"playbook": s.playbook, "nodes": s.nodes, "checks": s.checks, "status": s.status,
                       "changes": s.changes} for s in run.steps],
            "not_fixed": [{"node": n, "check": c, "fix": w} for n, c, w in run.not_fixed]}
