"""`macfleet maintenance start|end|status`: tell the healer to leave a mesh alone for a while."""

from __future__ import annotations

from typing import Annotated

import typer

from macfleet.cli.options import CheckOpt, InventoryOpt, JsonOpt, MeshOpt, inventory_path
from macfleet.render.maintenance import said
from macfleet.render.output import emit

# The flows and the inventory's models are imported when a command runs, not for --help.

app = typer.Typer(no_args_is_help=True, help="Tell the healer to leave a mesh alone for a while (planned work).")

def _meshes(inventory, mesh):
    from macfleet.flow.meshes import select_meshes
    from macfleet.inventory.load import load_inventory

    fleet = load_inventory(inventory_path(inventory))
    return fleet, select_meshes(fleet, mesh)


@app.command("start")
def start_cmd(
    for_: Annotated[str, typer.Option("--for", metavar="DURATION", help="How long, e.g. 2h, 90m, 1h30m (at most "
                                      "7d); it ends by itself then.", show_default=False)],
    reason: Annotated[str, typer.Option("--reason", help="Why, for the audit log and the status page.",
                                        show_default=False)],
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    check: CheckOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Put the mesh (default: every mesh of the inventory) in maintenance: the healer still probes and reports,
    but does nothing to it and pages nobody, until `maintenance end` or the time runs out. Starting again
    replaces it. In the audit log, the metrics (macfleet_maintenance) and the status page.

    Exit 0, 2 bad input."""
    from macfleet.flow import maintenance

    fleet, meshes = _meshes(inventory, mesh)
    emit(maintenance.start(fleet, meshes, for_, reason, check=check), human=lambda p: said(p, "start"))


@app.command("end")
def end_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, check: CheckOpt = False,
            json_output: JsonOpt = False) -> None:
    """End the mesh's maintenance (default: every mesh's), a person's or a command's: the healer acts on it by
    its policy again from its next probe. Exit 0 (also when there was none), 2 bad input."""
    from macfleet.flow import maintenance

    fleet, meshes = _meshes(inventory, mesh)
    emit(maintenance.end(fleet, meshes, check=check), human=lambda p: said(p, "end"))


@app.command("status")
def status_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, json_output: JsonOpt = False) -> None:
    """Each mesh's maintenance: by whom, why, until when. Exit 0, 2 bad input."""
    from macfleet.flow import maintenance

    fleet, meshes = _meshes(inventory, mesh)
    emit(maintenance.status(fleet, meshes), human=lambda p: said(p, "status"))
