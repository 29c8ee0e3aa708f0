"""`macfleet doctor`: every health probe on every node in one bounded pass, each finding with its fix."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from macfleet.cli.options import (
    DiffOpt,
    EventsOpt,
    InventoryOpt,
    JsonOpt,
    LimitOpt,
    MeshOpt,
    inventory_path,
    show_diff,
)
from macfleet.errors import UsageError
from macfleet.render import events as stream
from macfleet.render.output import emit, info, mode

# The flows and macfleet.render.doctor (and the judges it names) are imported once they are needed: not for
# --help, and a doctor run imports the judges while the nodes answer (flow.doctor.run_doctor), not before it
# dials them.

app = typer.Typer(help="Every health probe, each with its fix.", invoke_without_command=True,
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.callback()
def doctor(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    json_output: JsonOpt = False,
    fix: Annotated[bool, typer.Option("--fix", help="Apply the safe fixes (bridge, IP plan, power, wired limit, "
                                      "restart exo) through their playbooks, then check again. Never reboots.")]
    = False,
    only: Annotated[str | None, typer.Option("--only", help="Only these checks (comma-separated codes).",
                                             show_default=False)] = None,
    list_checks: Annotated[bool, typer.Option("--list", help="List the checks and exit.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Ask the slow probes again (softwareupdate --list), "
                                        "not their cached answers (kept up to probes.updates_max_age_s).")]
    = False,
    check: Annotated[bool, typer.Option("--check", help="With --fix: which fix playbooks would run on which "
                                        "nodes, run in Ansible's check mode; nothing changes.")] = False,
    diff: DiffOpt = False,
    events: EventsOpt = False,
) -> None:
    """Every probe on every node in one bounded pass; findings grouped by node, each with its fix.

    Exit 0 healthy, 1 findings (or a check that could not tell), 3 a node unreachable (the rest still judged)."""
    from macfleet.flow.doctor import (
        apply_fix_step,
        check_catalogue,
        doctor_exit_code,
        fix_doctor,
        fix_payload,
        limited_checks,
        parse_only,
        preview_fixes,
        run_doctor,
    )
    from macfleet.flow.meshes import limit_meshes, select_meshes
    from macfleet.inventory.load import load_inventory

    if list_checks:
        from macfleet.render.doctor import render_catalogue

        specs = check_catalogue()
        emit({"checks": [c.model_dump() for c in specs]}, human=lambda _: render_catalogue(specs))
        return
    codes = parse_only(only)
    fleet = load_inventory(inventory_path(inventory))
    meshes, partial = limit_meshes(fleet, select_meshes(fleet, mesh), limit)
    if partial:
        if fix:
            raise UsageError(f"--fix with --limit {limit!r}: it leaves part of mesh {', '.join(partial)}, and the "
                             "fixes apply the IP plan, which is made for whole meshes",
                             hint="run `doctor --fix` without --limit, or with a limit that names whole meshes")
        codes = limited_checks(codes)
        info(f"doctor: --limit leaves part of {', '.join(partial)}: the mesh-wide checks (cabling, IP plan, "
             "exo's peers, versions alike) are not judged")
    probing = f"doctor: probing {sum(len(m.nodes) for m in meshes)} node(s) in one pass…"
    if fix:
        info(probing)
        from macfleet.render.doctor import render_fix

        if check:
            run = preview_fixes(fleet, meshes, only=codes, fresh=fresh, diff=diff, on_diff=show_diff)
        else:
            apply = functools.partial(apply_fix_step, diff=diff, on_diff=show_diff)
            run = fix_doctor(fleet, meshes, apply, only=codes, fresh=fresh)
        final = run.after or run.before
        _node_events(final.json_payload())
        emit(fix_payload(run), human=lambda _: render_fix(run.before, run.after, run.steps, run.not_fixed),
             exit_code=doctor_exit_code(final))
        return
    done = run_doctor(fleet, meshes, only=codes, dialled=lambda: info(probing), fresh=fresh)
    report = done.report
    _node_events(report.json_payload())
    from macfleet.render.doctor import render_doctor

    emit({**report.json_payload(), "cached": done.cached},
         human=lambda _: render_doctor(report, verbose=mode.verbose, cached=done.cached),
         exit_code=doctor_exit_code(report))


def _node_events(payload: dict) -> None:
    """A `node` event per node once it is judged (from the report's `checks`): ok, or what was not."""
    checks: dict[str, list[str]] = {}
    for c in payload["checks"]:
        found = checks.setdefault(c["node"], [])
        if c["result"] != "ok":
            found.append(f"{c['check']}: {c['result']}")
    for node, found in checks.items():
        stream.node_status(node, "findings" if found else "ok", "; ".join(found))
