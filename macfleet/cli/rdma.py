"""`macfleet rdma ...`: RDMA over Thunderbolt, its status and the guided Recovery-mode walkthrough."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from macfleet.cli import complete
from macfleet.cli.options import EventsOpt, InventoryOpt, JsonOpt, LimitOpt, MeshOpt, inventory_path, whole_mesh
from macfleet.render.output import emit, info

if TYPE_CHECKING:  # the flows, rich and the inventory's models are imported when a command runs, not for --help
    from rich.console import Group

app = typer.Typer(no_args_is_help=True, help="RDMA over Thunderbolt: status, and the guided Recovery-mode steps "
                  "that switch it on.")


@app.command("status")
def status_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, limit: LimitOpt = None,
               json_output: JsonOpt = False) -> None:
    """Is the mesh RDMA-ready? macOS build, Thunderbolt 5, rdma_ctl, RDMA devices, every cabled port ACTIVE
    with its IPv4-mapped GID, and a wedged RDMA stack.

    Exit 0 ready, 1 not ready, 3 a node could not be reached (the others are still judged)."""
    from macfleet.flow.meshes import select_meshes
    from macfleet.flow.rdma import rdma_status
    from macfleet.inventory.load import load_inventory
    from macfleet.render.rdma import render_status

    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "RDMA readiness is judged on each cable's ports at both ends")
    meshes = select_meshes(fleet, mesh)
    info(f"collecting from {sum(len(m.nodes) for m in meshes)} node(s) in one pass…")
    report = rdma_status(fleet, meshes)
    emit(report.json_payload(), human=lambda _: render_status(report), exit_code=report.exit_code())


@app.command("enable")
def enable_cmd(
    nodes: Annotated[list[str] | None, typer.Argument(
        help="Only these nodes (default: every node with RDMA off).",
        autocompletion=complete.nodes, show_default=False)] = None,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    all_at_once: Annotated[bool, typer.Option("--all-at-once", help="Shut every node down together and walk "
                                              "them through Recovery at once.")] = False,
    non_interactive: Annotated[bool, typer.Option("--non-interactive", "--check", help="Print the status and "
                                                  "the steps only (for a runbook or a ticket); change nothing; exit 1 "
                                                  "while work remains.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=5, help="Seconds to wait for a node to shut down, and "
                                           "again to come back from Recovery.")] = 900.0,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Switch RDMA on, guided: identify each Mac, shut it down, show that model's Recovery steps, wait for it to
    come back, verify; then verify the whole mesh. Resumable: Ctrl-C, and a later run continues where it stopped
    (the state file is kept beside the inventory). It never runs `rdma_ctl enable` over SSH: that works only in
    Recovery."""
    from rich.console import Group

    from macfleet.errors import UsageError
    from macfleet.flow.meshes import limit_names, select_meshes
    from macfleet.flow.rdma import EnableOptions, enable_rdma
    from macfleet.inventory.load import load_inventory
    from macfleet.render.rdma import ConsoleOperator, render_status, render_walk_summary

    fleet = load_inventory(inventory_path(inventory))
    meshes = select_meshes(fleet, mesh)
    if limit is not None and nodes:
        raise UsageError("give the nodes as arguments or with --limit, not both")
    opts = EnableOptions(nodes=limit_names(fleet, limit) or list(nodes or []), all_at_once=all_at_once,
                         non_interactive=non_interactive,
                         timeout_s=timeout)
    result = enable_rdma(fleet, meshes, opts, ConsoleOperator())

    def human(_: object) -> Group:
        parts = []
        if result.walk is not None and result.walk.nodes:
            parts.append(render_walk_summary({p.node: (p.phase, p.note) for p in result.walk.nodes}, result.never))
        parts.append(render_status(result.report))
        return Group(*parts)

    emit(result.report.json_payload(), human=human, exit_code=result.exit_code)
