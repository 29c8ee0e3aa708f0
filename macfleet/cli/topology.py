"""`macfleet topology ...`: the cabling between Macs. `links` is the offline half, from saved captures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group

from macfleet.act.ansible import HostStats, PlaybookRun, ProgressEvent, raise_for, run_playbook
from macfleet.cli.facts import read_capture
from macfleet.cli.options import (
    CheckOpt,
    InventoryOpt,
    JsonOpt,
    MeshOpt,
    count_option,
    inventory_path,
    seconds_option,
)
from macfleet.errors import FactsParseError, UsageError, most_severe_exit
from macfleet.facts.links import match_links
from macfleet.facts.network import HardwarePortsFacts, parse_hardware_ports
from macfleet.facts.thunderbolt import ThunderboltFacts, parse_thunderbolt
from macfleet.flow.topology import check_topology, plan_live, prepare_apply
from macfleet.inventory.load import load_inventory
from macfleet.inventory.model import MAC_MODELS, MAX_MESH_NODES, Fleet, MacModelSpec, Mesh, model_spec
from macfleet.judge.ipplan import find_collisions
from macfleet.judge.topology import (
    TopologyReport,
    WatchEvent,
    diff_reports,
    judge_exit_code,
    plan_cabling,
    plan_for_mesh,
    still_missing,
)
from macfleet.render import output
from macfleet.render.facts import render_links
from macfleet.render.output import console, emit, info, verbose
from macfleet.render.svg import svg_from_plan, svg_from_report
from macfleet.render.text import markup, text
from macfleet.render.topology import format_event, render_apply, render_check, render_ipplan, render_plan

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
    nodes: dict[str, ThunderboltFacts] = {}
    for node, path in _node_files(from_, "--from").items():
        try:
            nodes[node] = parse_thunderbolt(read_capture(path))
        except FactsParseError as e:
            raise UsageError(f"{node} ({path}): {e.message}") from None
    hw: dict[str, HardwarePortsFacts] = {}
    for node, path in _node_files(ports or [], "--ports").items():
        if node not in nodes:
            raise UsageError(f"--ports {node}: no --from capture for that node")
        try:
            hw[node] = parse_hardware_ports(read_capture(path))
        except FactsParseError as e:
            raise UsageError(f"{node} ({path}): {e.message}") from None
    result = match_links(nodes, hw)
    emit(result, human=render_links)


# ------------------------------------------------------------------------------------------------------
# check / plan / show / watch / ipplan / apply: the live half (issue 6). Collect in one pass, judge, render.
# ------------------------------------------------------------------------------------------------------

SvgOpt = Annotated[Path | None, typer.Option("--svg", help="Also draw it as an SVG picture in FILE.",
                                             show_default=False)]


def _meshes(fleet: Fleet, mesh: str | None) -> list[Mesh]:
    if mesh is None:
        return list(fleet.meshes)
    try:
        return [fleet.mesh(mesh)]
    except KeyError:
        raise UsageError(f"no mesh {mesh!r} in {fleet.root}",
                         hint="meshes: " + ", ".join(m.name for m in fleet.meshes)) from None


def _one_mesh(fleet: Fleet, mesh: str | None) -> Mesh:
    meshes = _meshes(fleet, mesh)
    if len(meshes) != 1:
        raise UsageError("this inventory has several meshes; say which with --mesh",
                         hint="meshes: " + ", ".join(m.name for m in meshes))
    return meshes[0]


def _merged_payload(reports: list[TopologyReport]) -> dict[str, Any]:
    if len(reports) == 1:
        return reports[0].json_payload()
    out: dict[str, Any] = {"nodes": [], "links": [], "findings": []}
    for r in reports:
        p = r.json_payload()
        for k in out:
            out[k] += p[k]
    return out


def _exit_code(reports: list[TopologyReport]) -> int:
    return most_severe_exit([judge_exit_code(r) for r in reports])


@app.command("check")
def check_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, json_output: JsonOpt = False) -> None:
    """Judge the cabling: every pair cabled once, directly, at 80 Gb/s, on RDMA-capable ports.

    Exit 0 clean, 1 findings, 3 a node could not be reached (the others are still judged)."""
    fleet = load_inventory(inventory_path(inventory))
    meshes = _meshes(fleet, mesh)
    info(f"collecting from {sum(len(m.nodes) for m in meshes)} node(s) in one pass…")
    reports, gathered = check_topology(fleet, meshes)
    verbose(f"collected in {gathered.took_s:.2f} s")
    emit(_merged_payload(reports), human=lambda _: Group(*(render_check(r) for r in reports)),
         exit_code=_exit_code(reports))


def _model_or_fail(name: str) -> MacModelSpec:
    spec = model_spec(name)
    if spec is None:
        raise UsageError(f"unknown Mac model {name!r}",
                         hint="known: " + ", ".join(f"{m.slug} ({m.model_identifier})" for m in MAC_MODELS.values()))
    return spec


def _short(spec: MacModelSpec) -> str:
    return spec.marketing_name.lower().removeprefix("mac ").replace(" ", "-") or "mac"


def _write_svg(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    info(f"wrote {path}")


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
    if (nodes is None) != (model is None):
        raise UsageError("give --nodes and --model together, or neither (then the inventory is used)")
    if nodes is not None and model is not None:
        if inventory is not None or mesh is not None:
            raise UsageError("give either --nodes/--model or -i/--mesh, not both")
        spec = _model_or_fail(model)
        plan = plan_cabling([(f"{_short(spec)}-{i + 1}", spec) for i in range(nodes)])
    else:
        fleet = load_inventory(inventory_path(inventory))
        m = _one_mesh(fleet, mesh)
        unknown = [n.name for n in m.nodes if n.model_spec is None]
        if unknown:
            raise UsageError("no known macfleet_model for " + ", ".join(unknown),
                             hint="set macfleet_model (e.g. \"Mac15,14\") for each node in hosts.yml")
        plan = plan_for_mesh(m)
        assert plan is not None
    if svg is not None:
        _write_svg(svg, svg_from_plan(plan))
    emit(plan, human=render_plan, exit_code=0 if plan.feasible else 1)


@app.command("show")
def show_cmd(
    svg: Annotated[Path, typer.Option("--svg", help="Draw the live mesh into FILE (SVG).")],
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Draw the live mesh from a check: cables coloured by state, missing cables dashed."""
    fleet = load_inventory(inventory_path(inventory))
    m = _one_mesh(fleet, mesh)
    report = check_topology(fleet, [m])[0][0]
    spec_ports = {n.name: [p.receptacle for p in n.model_spec.thunderbolt_ports] for n in m.nodes if n.model_spec}
    _write_svg(svg, svg_from_report(report, spec_ports))
    emit(report.json_payload(), human=lambda _: render_check(report), exit_code=judge_exit_code(report))


@app.command("watch")
def watch_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    interval: Annotated[float, seconds_option("--interval", low=0.2, high=3600, help="Seconds between looks.")] = 2.0,
    timeout: Annotated[float | None, seconds_option("--timeout", low=0, high=7 * 86400, low_open=True,
                                                    help="Give up after this many seconds (exit 1).",
                                                    show_default=False)] = None,
) -> None:
    """Live cabling assistant: prints each cable plugged (+), pulled (−) or wrong (!) as it happens, with the
    pairs still missing, until the mesh is complete (exit 0) or Ctrl-C."""
    fleet = load_inventory(inventory_path(inventory))
    m = _one_mesh(fleet, mesh)
    info(f"watching mesh {m.name} ({len(m.nodes)} Macs, {len(m.pairs)} cables) every {interval:g} s; Ctrl-C to stop")
    started = time.monotonic()
    previous: TopologyReport | None = None
    last_missing: list[str] | None = None
    while True:
        t0 = time.monotonic()
        report = check_topology(fleet, [m])[0][0]
        for event in diff_reports(previous, report):
            console.print(format_event(event))
        for node, why in report.unreachable.items():
            if previous is None or node not in previous.unreachable:
                console.print(format_event(WatchEvent(sign="!", text=f"{node} unreachable: {why}")))
        missing = still_missing(report)
        if missing != last_missing and missing:
            console.print(text(f"  still missing ({len(missing)}): " + "; ".join(missing)))
        last_missing, previous = missing, report
        if report.clean:
            console.print(f"mesh {m.name} complete: {len(report.links)} cables, all at 80 Gb/s on RDMA ports")
            return
        if timeout is not None and time.monotonic() - started >= timeout:
            info(f"gave up after {timeout:g} s with {len(report.findings)} finding(s)")
            raise typer.Exit(1)
        time.sleep(max(0.0, interval - (time.monotonic() - t0)))


@app.command("ipplan")
def ipplan_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, json_output: JsonOpt = False) -> None:
    """The IP plan: one subnet per cable keyed by the pair of Macs, on the port the live cable uses,
    and the drift between it and the nodes' live addresses."""
    fleet = load_inventory(inventory_path(inventory))
    meshes = _meshes(fleet, mesh)
    live = plan_live(fleet, meshes)
    plan, facts, gathered = live.plan, live.facts, live.gathered
    for f in find_collisions(plan, facts, {n.name: n.address for m in meshes for n in m.nodes}):
        info(f"[red]collision:[/red] {markup(f.message)}")
    emit(plan.json_payload(), human=lambda _: render_ipplan(plan), exit_code=3 if gathered.unreachable else 0)


@app.command("apply")
def apply_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    check: CheckOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Apply the IP plan with playbooks/network.yml: Thunderbolt Bridge off, one service per cabled
    Thunderbolt port with its address, MTU. Refused, with nothing changed, if the plan collides."""
    inv = inventory_path(inventory)
    fleet = load_inventory(inv)
    meshes = _meshes(fleet, mesh)
    prepared = prepare_apply(fleet, meshes)
    for mesh_name, n in prepared.uncabled.items():
        info(f"[yellow]note:[/yellow] {n} pair(s) of mesh {markup(mesh_name)} have no cable yet; "
             "their addresses are applied once cabled (see `macfleet topology check`)")
    nodes, diffs = prepared.nodes, prepared.diffs

    def progress(e: ProgressEvent) -> None:
        if e.status in ("changed", "failed", "unreachable") or output.mode.verbose:
            style = {"changed": "yellow", "failed": "red", "unreachable": "red"}.get(e.status, "dim")
            info(f"[{style}]{markup(f'{e.host}: {e.status}: {e.task}')}[/{style}]")

    result = run_playbook(PlaybookRun(playbook="network", inventory=inv, limit=tuple(nodes), check=check,
                                      diff=check), on_event=progress, raise_on_failure=False)
    summary = {
        "changed": result.changed,
        "nodes": {n: {"changed": result.hosts.get(n, HostStats()).changed,
                      "failed": bool(result.hosts.get(n, HostStats()).failed)} for n in nodes},
    }
    human = {**summary, "changes": diffs if check else result.changes}
    if result.unreachable or result.failed_tasks or result.status != "successful":
        if not output.mode.json:
            console.print(render_apply(human, check))
        raise_for(result)  # the error (and, with --json, its details per host) is the result
    emit(summary, human=lambda _: render_apply(human, check))
