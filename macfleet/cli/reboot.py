"""`macfleet reboot`: the coordinated whole-mesh reboot (lock, FileVault preflight, phases, verification)."""

from __future__ import annotations

from typing import Annotated

import typer

from macfleet.cli import complete
from macfleet.cli.options import EventsOpt, InventoryOpt, JsonOpt, LimitOpt, MeshOpt, inventory_path, node_progress
from macfleet.errors import EXIT_PROBLEMS, EXIT_UNREACHABLE, UsageError
from macfleet.render import output
from macfleet.render.output import emit, info
from macfleet.render.text import text

app = typer.Typer(help="The coordinated whole-mesh reboot.", invoke_without_command=True,
                  context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": True})


@app.callback()
def reboot(
    nodes: Annotated[list[str] | None, typer.Argument(
        help="Every node of one mesh (or use --mesh).",
        autocompletion=complete.nodes, show_default=False)] = None,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="Why; recorded in the lock and its history.")]
    = "operator request",
    dry_run: Annotated[bool, typer.Option("--check", "--dry-run", help="Print the plan and change nothing.")]
    = False,
    limit: LimitOpt = None,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Stop exo, reboot every node of the mesh at once (authrestart where FileVault is on), wait for each,
    verify RDMA ports, the IP plan and the cabling, start exo, verify its /state.

    Exit 0 done, 1 refused or a phase failed, 3 a node unreachable or not back."""
    from macfleet.flow.maintenance import planned
    from macfleet.flow.meshes import limit_names
    from macfleet.flow.reboot import select  # the flows when it runs, not for --help
    from macfleet.inventory.load import load_inventory
    from macfleet.render.reboot import render_reboot

    fleet = load_inventory(inventory_path(inventory))
    limited = limit_names(fleet, limit)
    if limited is not None:
        whole = [m.name for m in fleet.meshes if sorted(m.node_names) == sorted(limited)]
        if not whole:
            raise UsageError(f"reboot --limit {limit!r}: a mesh reboots whole, and this names "
                             f"{', '.join(limited)}, which is not every node of one mesh",
                             hint="RDMA state held by peers is released only when the whole mesh reboots together: "
                                  "give --mesh NAME (or a --limit naming exactly one mesh)")
        nodes = limited
    target, names = select(fleet, mesh, list(nodes or []))
    info(f"reboot: mesh {target.name} ({', '.join(names)}){' (dry run)' if dry_run else ''}")
    with planned(fleet, target, "reboot", reason, check=dry_run, say=lambda line: info(text(line))):
        result = _run(fleet, target, names, reason, dry_run, events)
    payload = result.payload()
    code = 0
    if result.result in ("refused", "failed"):
        lost = any(not w["back"] for w in payload["nodes"].values()) or (
            result.refusal is not None and "unreachable" in result.refusal)
        code = EXIT_UNREACHABLE if lost else EXIT_PROBLEMS
    emit(payload, human=render_reboot, exit_code=code)


def _run(fleet, target, names: list[str], reason: str, dry_run: bool, events: bool):
    """The reboot, shown as a live board on a terminal, else one line per change (and on the --events stream)."""
    from macfleet.flow.reboot import reboot_mesh
    from macfleet.render.output import err_console
    from macfleet.render.reboot import RebootBoard, live_board, progress_line

    if err_console.is_terminal and not output.mode.json and not events and not dry_run:
        # a terminal: one table of every node, redrawn in place, with the phases printed above it
        board = RebootBoard(names)
        with live_board(board, err_console) as live:
            result = reboot_mesh(fleet, target, names, reason, dry_run=dry_run, progress=board.update,
                                 say=lambda line: live.console.print(text(line), highlight=False))
    else:  # a log or a pipe: one line per change
        result = reboot_mesh(fleet, target, names, reason, dry_run=dry_run,
                             progress=node_progress(lambda n, s, d: err_console.print(progress_line(n, s, d))),
                             say=lambda line: info(text(line)))
    return result
