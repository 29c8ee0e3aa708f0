"""`macfleet rollout ...`: exo builds switched on the whole mesh at once, and model weights pushed once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from macfleet.cli.options import (
    CheckOpt,
    EventsOpt,
    InventoryOpt,
    JsonOpt,
    LimitOpt,
    MeshOpt,
    inventory_path,
    whole_mesh,
)
from macfleet.cli.shared import lazy_module
from macfleet.errors import UsageError
from macfleet.flow.defaults import EXO_HEALTH_TIMEOUT_S, LLAMA_HEALTH_TIMEOUT_S, ROLLOUT_KEEP
from macfleet.render import events as stream
from macfleet.render.output import emit, info

# The flows and renderers load when a command runs, not for --help.
flow = lazy_module("macfleet.flow.rollout")
llama_flow = lazy_module("macfleet.flow.llama_rpc")
model_flow = lazy_module("macfleet.flow.models")
render = lazy_module("macfleet.render.rollout")


def load_inventory(path: Path):
    from macfleet.inventory.load import load_inventory as load

    return load(path)

def _planned(fleet, mesh: str | None, command: str, reason: str, check: bool):
    """Maintenance on the mesh while the rollout runs: the healer leaves it to the rollout (flow/maintenance.py)."""
    from macfleet.flow.maintenance import planned
    from macfleet.flow.meshes import one_mesh
    from macfleet.render.text import text

    return planned(fleet, one_mesh(fleet, mesh), command, reason[:200], check=check,
                   say=lambda line: info(text(line)))


app = typer.Typer(no_args_is_help=True, help="Push exo builds and model weights once, fanned out over the mesh.")

KeepOpt = Annotated[int, typer.Option("--keep", min=2, max=50, help="Releases kept on each node.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="Seconds the health gate waits.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Take the cluster lock even from a command that died in a "
                                        "critical step (an exo switch, a reboot): its record of what to repair is "
                                        "lost, and the nodes stay as it left them.")]


@app.command("exo")
def exo_cmd(
    source: Annotated[str | None, typer.Option(
        "--source", help="exo build: a directory, a tarball or a git URL (default: macfleet_exo.source).",
        show_default=False)] = None,
    ref: Annotated[str | None, typer.Option(
        "--ref", help="Git branch or tag, with a git URL (default: macfleet_exo.version).", show_default=False)] = None,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    keep: KeepOpt = ROLLOUT_KEEP,
    timeout: TimeoutOpt = EXO_HEALTH_TIMEOUT_S,
    json_output: JsonOpt = False,
    build_on: Annotated[str | None, typer.Option(
        "--build-on", help="Build the source on this node (default: macfleet_exo.build.node); it seeds the fan-out.",
    )] = None,
    no_build: Annotated[bool, typer.Option("--no-build", help="The source is already built: send it as it is.")]
    = False,
    check: CheckOpt = False,
    events: EventsOpt = False,
) -> None:
    """Build a source on a builder node (or take a built one), stage it on every node, switch the whole mesh to
    it at once, roll back if it is not healthy."""
    if build_on and no_build:
        raise UsageError("--build-on and --no-build contradict each other: give one")
    if source is not None:
        flow.check_source(source)  # refused before the maintenance is taken
    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "a release is switched on the whole mesh at once (its peers run one "
                      "version)")
    with _planned(fleet, mesh, "rollout exo", f"exo rollout of {source or 'macfleet_exo.source'}", check):
        report = flow.rollout_exo(fleet, source, ref=ref, mesh=mesh, keep=keep, timeout_s=timeout, say=info,
                                  build_on=build_on, no_build=no_build, check=check)
    if isinstance(report, flow.RolloutPlan):
        emit(report, human=render.render_plan)
    else:
        emit(report, human=render.render_report)


@app.command("llama-rpc")
def llama_rpc_cmd(
    source: Annotated[str, typer.Option("--source", help="llama.cpp build: a directory holding bin/rpc-server, "
                                        "or its tarball.")],
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    keep: KeepOpt = ROLLOUT_KEEP,
    timeout: TimeoutOpt = LLAMA_HEALTH_TIMEOUT_S,
    check: CheckOpt = False,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Stage a llama.cpp build and run rpc-server on every node, bound to its Thunderbolt addresses only."""
    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "rpc-server runs on every node of the mesh, one job per cable")
    with _planned(fleet, mesh, "rollout llama-rpc", f"llama.cpp rollout of {source}", check):
        report = llama_flow.rollout_llama_rpc(fleet, source, mesh=mesh, keep=keep, timeout_s=timeout, check=check,
                                              say=info, force=force)
    emit(report.json_payload(), human=lambda _: lazy_module("macfleet.render.llama_rpc").render_llama_rollout(report))


@app.command("rollback")
def rollback_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    timeout: TimeoutOpt = EXO_HEALTH_TIMEOUT_S,
    check: Annotated[bool, typer.Option("--check", help="Say which release it would switch back to; change "
                                        "nothing, take no lock.")] = False,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Switch the whole mesh back to the release it ran before."""
    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "a release is switched back on the whole mesh at once")
    with _planned(fleet, mesh, "rollout rollback", "exo rollback", check):
        report = flow.rollback_exo(fleet, mesh=mesh, timeout_s=timeout, say=info, check=check)
    emit(report, human=render.render_report)


@app.command("status")
def status_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, limit: LimitOpt = None,
               json_output: JsonOpt = False) -> None:
    """The release each node's `current` points at, and whether exo runs."""
    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the status says whether every node of the mesh runs the same release")
    status = flow.rollout_status(fleet, mesh)
    emit(status, human=render.render_status, exit_code=0 if status.current else 1)


@app.command("history")
def history_cmd(inventory: InventoryOpt = None, json_output: JsonOpt = False) -> None:
    """Every rollout, rollback and repair this controller ran on this inventory."""
    fleet = load_inventory(inventory_path(inventory))
    entries = flow.read_history(fleet)
    emit({"history": entries}, human=lambda r: render.render_history(r["history"]))


@app.command("model")
def model_cmd(
    model: Annotated[str, typer.Argument(help="ORG/NAME, as on Hugging Face (e.g. mlx-community/Qwen3-0.6B-4bit).")],
    from_: Annotated[Path | None, typer.Option("--from", help="A local directory holding the model's files.")] = None,
    hf: Annotated[bool, typer.Option("--hf", help="Download it once from Hugging Face onto the controller.")] = False,
    nodes: Annotated[list[str] | None, typer.Option("--nodes", help="Only these nodes (repeat).")] = None,
    limit: LimitOpt = None,
    verify: Annotated[bool, typer.Option("--verify", help="Send nothing: re-check every digest on every node.")]
    = False,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    force: ForceOpt = False,
    check: Annotated[bool, typer.Option("--check", help="Say what would be sent to each node (files, sizes, "
                                        "free space), from a read-only look; send nothing.")] = False,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Push a model's weights once and fan them out over the Thunderbolt mesh into exo's models dir."""
    if (from_ is None) == (not hf) or (verify and from_ is None):
        raise UsageError("say where the model comes from: --from DIR or --hf (--verify needs --from DIR)")
    if limit is not None and nodes:
        raise UsageError("give the nodes with --nodes or with --limit, not both")
    fleet = load_inventory(inventory_path(inventory))
    if limit is not None:
        from macfleet.flow.meshes import limit_names

        nodes = limit_names(fleet, limit)
    if verify:
        report = model_flow.verify_model(fleet, model, from_, mesh=mesh, nodes=nodes)
        emit(report, human=render.render_model_verify, exit_code=1 if report.differ else 0)
        return
    if check:
        plan = model_flow.plan_model_push(fleet, model, from_, hf=hf, mesh=mesh, nodes=nodes)
        refused = any(n and n["refused"] for n in plan["nodes"].values())
        emit(plan, human=render.render_model_plan, exit_code=1 if refused else 0)
        return
    with render.push_progress() as bars:
        report = model_flow.push_model(fleet, model, from_, hf=hf, mesh=mesh, nodes=nodes, say=info,
                                       progress=_bytes_progress(bars), force=force)
    emit(report, human=render.render_model_push)


def _bytes_progress(bars: Callable[[str, int, int], None] | None) -> Callable[[str, int, int], None] | None:
    """The push's per-node bytes to the terminal's bars and to the --events stream (a line a second per node
    at most, and one when the node has everything)."""
    if not stream.stream.on:
        return bars
    last: dict[str, float] = {}

    def update(node: str, done: int, total: int) -> None:
        if bars is not None:
            bars(node, done, total)
        if done >= total:
            if last.get(node) != -1.0:
                last[node] = -1.0
                stream.node_status(node, "done", f"{total} bytes")
        elif time.monotonic() - last.get(node, 0.0) >= 1.0:
            last[node] = time.monotonic()
            stream.progress(node=node, status="receiving", bytes_done=done, bytes_total=total)

    return update
