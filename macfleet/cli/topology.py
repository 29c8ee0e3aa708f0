"""`macfleet topology ...`: the cabling between Macs. `links` is the offline half, from saved captures.

Each command parses its options, calls one flow (`macfleet.flow`) and renders what it returns."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from macfleet.cli.options import (
    CheckOpt,
    DiffOpt,
    EventsOpt,
    InventoryOpt,
    JsonOpt,
    LimitOpt,
    MeshOpt,
    count_option,
    inventory_path,
    seconds_option,
    show_diff,
    whole_mesh,
)
from macfleet.errors import UsageError
from macfleet.inventory.limits import MAX_MESH_NODES
from macfleet.render import events as stream
from macfleet.render import output
from macfleet.render.output import emit, info, verbose
from macfleet.render.text import text

# The flows, the inventory's models and the renderers are imported by the command that runs, not for --help.
if TYPE_CHECKING:
    from macfleet.flow.topology import Look
    from macfleet.inventory.model import MacModelSpec

app = typer.Typer(no_args_is_help=True, help="Cabling check, cabling plan and picture, IP plan.")


def _node_files(values: list[str], option: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for v in values:
        node, sep, file = v.partition("=")
        if not sep or not node or not file:
            raise UsageError(f"{option} {v!r}: expected NODE=FILE")
        if node in out:
            raise UsageError(f"{option}: node {node!r} given twice")
        out[node] = Path(file)
    return out


@app.command("links")
def links_cmd(
    from_: Annotated[
        list[str],
        typer.Option("--from", help="NODE=FILE: a saved `system_profiler SPThunderboltDataType` (-json or text)."),
    ],
    ports: Annotated[
        list[str] | None,
        typer.Option("--ports", help="NODE=FILE: that node's `networksetup -listallhardwareports`, to name enX."),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """The links between saved captures of one collection pass (each cable checked from both ends)."""
    from macfleet.flow.facts import links_from_captures
    from macfleet.render.facts import render_links

    emit(links_from_captures(_node_files(from_, "--from"), _node_files(ports or [], "--ports")), human=render_links)


# ------------------------------------------------------------------------------------------------------
# check / plan / show / watch / ipplan / apply: the live half. Collect in one pass, judge, render.
# ------------------------------------------------------------------------------------------------------

SvgOpt = Annotated[Path | None, typer.Option("--svg", help="Also draw it as an SVG picture in FILE.",
                                             show_default=False)]


@app.command("check")
def check_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, limit: LimitOpt = None,
              json_output: JsonOpt = False) -> None:
    """Judge the cabling: every pair cabled once, directly, at 80 Gb/s, on RDMA-capable ports.

    Exit 0 clean, 1 findings, 3 a node could not be reached (the others are still judged)."""
    from rich.console import Group

    from macfleet.flow.meshes import select_meshes
    from macfleet.flow.topology import check_topology
    from macfleet.inventory.load import load_inventory
    from macfleet.render.topology import render_check

    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the cabling is judged on the whole mesh, each cable from both ends")
    meshes = select_meshes(fleet, mesh)
    info(f"collecting from {sum(len(m.nodes) for m in meshes)} node(s) in one pass…")
    checked = check_topology(fleet, meshes)
    verbose(f"collected in {checked.gathered.took_s:.2f} s")
    emit(checked.json_payload(), human=lambda _: Group(*(render_check(r) for r in checked.reports)),
         exit_code=checked.exit_code)


def _model_or_fail(name: str) -> MacModelSpec:
    from macfleet.inventory.model import known_models, model_spec

    spec = model_spec(name)
    if spec is None:
        raise UsageError(f"unknown Mac model {name!r}", hint="known: " + known_models())
    return spec


def _write_svg(path: Path, svg: str) -> None:
    try:
        path.write_text(svg)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    info(text(f"wrote {path}"))


@app.command("plan")
def plan_cmd(
    nodes: Annotated[int | None, count_option("--nodes", low=2, high=MAX_MESH_NODES, what="Macs",
                                              help="How many Macs (with --model).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Mac model: slug or identifier (Mac15,14).")] = None,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    svg: SvgOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """The cabling sheet: which port of which Mac into which port of which, on RDMA-capable ports only."""
    from macfleet.flow.meshes import one_mesh
    from macfleet.flow.topology import cabling_sheet, mesh_sheet
    from macfleet.inventory.load import load_inventory
    from macfleet.render.svg import svg_from_plan
    from macfleet.render.topology import render_plan

    if (nodes is None) != (model is None):
        raise UsageError("give --nodes and --model together, or neither (then the inventory is used)")
    if nodes is not None and model is not None:
        if inventory is not None or mesh is not None:
            raise UsageError("give either --nodes/--model or -i/--mesh, not both")
        plan = cabling_sheet(_model_or_fail(model), nodes)
    else:
        fleet = load_inventory(inventory_path(inventory))
        m = one_mesh(fleet, mesh)
        plan = mesh_sheet(m)
    if svg is not None:
        _write_svg(svg, svg_from_plan(plan))
    emit(plan, human=render_plan, exit_code=0 if plan.feasible else 1)


@app.command("show")
def show_cmd(
    svg: Annotated[Path, typer.Option("--svg", help="Draw the live mesh into FILE (SVG).")],
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Draw the live mesh from a check: cables coloured by state, missing cables dashed."""
    from macfleet.flow.meshes import one_mesh
    from macfleet.flow.topology import check_topology
    from macfleet.inventory.load import load_inventory
    from macfleet.render.svg import svg_from_report
    from macfleet.render.topology import render_check

    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the cabling is judged on the whole mesh, each cable from both ends")
    m = one_mesh(fleet, mesh)
    checked = check_topology(fleet, [m])
    report = checked.reports[0]
    spec_ports = {n.name: [p.receptacle for p in n.model_spec.thunderbolt_ports] for n in m.nodes if n.model_spec}
    _write_svg(svg, svg_from_report(report, spec_ports))
    emit(report.json_payload(), human=lambda _: render_check(report), exit_code=checked.exit_code)


@app.command("watch")
def watch_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    interval: Annotated[float, seconds_option("--interval", low=0.2, high=3600, help="Seconds between looks.")] = 2.0,
    timeout: Annotated[float | None, seconds_option("--timeout", low=0, high=7 * 86400, low_open=True,
                                                    help="Give up after this many seconds (exit 1).",
                                                    show_default=False)] = None,
    json_output: Annotated[bool, typer.Option("--json", help="JSON Lines on stdout, as --events: each change "
                                              "as it happens, the final check's result in the finished line.")]
    = False,
    events: EventsOpt = False,
) -> None:
    """Live cabling assistant: prints each cable plugged (+), pulled (−) or wrong (!) as it happens, with the
    pairs still missing, until the mesh is complete (exit 0) or Ctrl-C."""
    from macfleet.flow.meshes import one_mesh
    from macfleet.flow.topology import watch_topology
    from macfleet.inventory.load import load_inventory
    from macfleet.render.output import console
    from macfleet.render.topology import render_look

    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the cabling assistant watches every cable of a mesh")
    m = one_mesh(fleet, mesh)
    info(f"watching mesh {m.name} ({len(m.nodes)} Macs, {len(m.pairs)} cables) every {interval:g} s; Ctrl-C to stop")

    if json_output:
        stream.start("macfleet topology watch")  # a live command's JSON is its stream of changes

    def show(look: Look) -> None:
        if stream.stream.on:
            for change in look.events:
                stream.progress(change.kind, change=change.model_dump(mode="json", exclude_none=True))
        else:
            console.print(render_look(look.report, look.events, look.missing_changed))

    report = watch_topology(fleet, m, interval_s=interval, timeout_s=timeout, on_look=show)
    if not report.clean:
        info(f"gave up after {timeout:g} s with {len(report.findings)} finding(s)")
    elif not stream.stream.on:
        console.print(f"mesh {m.name} complete: {len(report.links)} cables, all at 80 Gb/s on RDMA ports")
    emit(report.json_payload(), human=lambda _: None, exit_code=0 if report.clean else 1)


@app.command("ipplan")
def ipplan_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, limit: LimitOpt = None,
               json_output: JsonOpt = False) -> None:
    """The IP plan: one subnet per cable keyed by the pair of Macs, on the port the live cable uses,
    and the drift between it and the nodes' live addresses."""
    from macfleet.flow.meshes import select_meshes
    from macfleet.flow.topology import plan_live
    from macfleet.inventory.load import load_inventory
    from macfleet.render.topology import collision_lines, render_ipplan, unreachable_lines

    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the IP plan is made for whole meshes, one subnet per pair")
    meshes = select_meshes(fleet, mesh)
    live = plan_live(fleet, meshes)
    for line in [*unreachable_lines(live.unreachable), *collision_lines(live.collisions)]:
        info(line)
    unknown = live.unknown_nodes
    emit(live.plan.json_payload(), human=lambda _: render_ipplan(live.plan, unknown), exit_code=live.exit_code)


@app.command("apply")
def apply_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    check: CheckOpt = False,
    diff: DiffOpt = False,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Apply the IP plan with playbooks/network.yml: Thunderbolt Bridge off, one service per cabled
    Thunderbolt port with its address, MTU. Refused, with nothing changed, if the plan collides."""
    from macfleet.flow.meshes import select_meshes
    from macfleet.flow.topology import apply_network
    from macfleet.inventory.load import load_inventory
    from macfleet.render.output import console
    from macfleet.render.topology import progress_line, render_apply, uncabled_notes

    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the IP plan is made for whole meshes, one subnet per pair")
    meshes = select_meshes(fleet, mesh)

    def notes(prepared) -> None:
        for line in uncabled_notes(prepared.uncabled):
            info(line)

    def progress(e) -> None:
        if diff and e.diff:
            show_diff(e.host, e.task, e.diff)
        line = progress_line(e.host, e.status, e.task, output.mode.verbose)
        if line is not None:
            info(line)

    applied = apply_network(fleet, meshes, check=check, on_prepared=notes, on_event=progress, diff=diff)
    stream.nodes_from(applied.summary)
    human = {**applied.summary, "changes": applied.changes}
    if applied.failed:
        if not (output.mode.json or stream.stream.on):
            console.print(render_apply(human, check))
        applied.raise_failure()  # the error (and, with --json, its details per host) is the result
    emit(applied.summary, human=lambda _: render_apply(human, check))
