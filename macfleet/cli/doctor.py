"""`macfleet doctor`: every health probe on every node in one bounded pass, each finding with its fix."""

from __future__ import annotations

from typing import Annotated

import typer

from macfleet.cli.options import InventoryOpt, JsonOpt, MeshOpt, inventory_path
from macfleet.errors import EXIT_PROBLEMS, EXIT_UNREACHABLE, UsageError, most_severe_exit
from macfleet.flow.doctor import apply_fix_step, fix_doctor, run_doctor
from macfleet.inventory.load import load_inventory
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.health import CHECK_CODES, CHECKS, HealthReport
from macfleet.render.doctor import render_catalogue, render_doctor, render_fix
from macfleet.render.output import emit, info, mode

app = typer.Typer(help="Every health probe, each with its fix.", invoke_without_command=True,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _meshes(fleet: Fleet, mesh: str | None) -> list[Mesh]:
    if mesh is None:
        return list(fleet.meshes)
    try:
        return [fleet.mesh(mesh)]
    except KeyError:
        raise UsageError(f"no mesh {mesh!r} in {fleet.root}",
                         hint="meshes: " + ", ".join(m.name for m in fleet.meshes)) from None


def _only(value: str | None) -> list[str] | None:
    if not value:
        return None
    codes = [c.strip() for c in value.split(",") if c.strip()]
    bad = [c for c in codes if c not in CHECK_CODES]
    if bad:
        raise UsageError(f"--only: unknown check(s) {', '.join(bad)}", hint="checks: " + ", ".join(CHECK_CODES))
    return codes


def exit_code(report: HealthReport) -> int:
    codes = [EXIT_UNREACHABLE] if report.summary.unreachable else []
    if report.findings or report.summary.unknown:
        codes.append(EXIT_PROBLEMS)
    return most_severe_exit(codes)


@app.callback()
def doctor(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    json_output: JsonOpt = False,
    fix: Annotated[bool, typer.Option("--fix", help="Apply the safe fixes (bridge, IP plan, power, wired limit, "
                                      "restart exo) through their playbooks, then check again. Never reboots.")]
    = False,
    only: Annotated[str | None, typer.Option("--only", help="Only these checks (comma-separated codes).",
                                             show_default=False)] = None,
    list_checks: Annotated[bool, typer.Option("--list", help="List the checks and exit.")] = False,
) -> None:
    """Every probe on every node in one bounded pass; findings grouped by node, each with its fix.

    Exit 0 healthy, 1 findings (or a check that could not tell), 3 a node unreachable (the rest still judged)."""
    if list_checks:
        emit({"checks": [c.model_dump() for c in CHECKS]}, human=lambda _: render_catalogue(list(CHECKS)))
        return
    codes = _only(only)
    fleet = load_inventory(inventory_path(inventory))
    meshes = _meshes(fleet, mesh)
    info(f"doctor: probing {sum(len(m.nodes) for m in meshes)} node(s) in one pass…")
    if fix:
        run = fix_doctor(fleet, meshes, apply_fix_step, only=codes)
        final = run.after or run.before
        payload = {"before": run.before.json_payload(), "after": run.after.json_payload() if run.after else None,
                   "fixes": [{"playbook": s.playbook, "nodes": s.nodes, "checks": s.checks, "status": s.status}
                             for s in run.steps],
                   "not_fixed": [{"node": n, "check": c, "fix": w} for n, c, w in run.not_fixed]}
        emit(payload, human=lambda _: render_fix(run.before, run.after, run.steps, run.not_fixed),
             exit_code=exit_code(final))
        return
    report = run_doctor(fleet, meshes, only=codes).report
    emit(report.json_payload(), human=lambda _: render_doctor(report, verbose=mode.verbose),
         exit_code=exit_code(report))
