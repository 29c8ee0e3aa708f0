"""`macfleet upgrade`: the mesh to the inventory's macOS build, one node at a time (or together)."""

from __future__ import annotations

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
    node_progress,
    whole_mesh,
)
from macfleet.errors import EXIT_PROBLEMS, EXIT_UNREACHABLE


def command(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    password_file: Annotated[Path | None, typer.Option(
        "--password-file", help="The admin's password (the inventory's ansible_user), first line of a file only "
        "you can read: softwareupdate needs an owner's password on Apple silicon. Not needed with --check.",
        show_default=False)] = None,
    together: Annotated[bool, typer.Option("--together", help="Install on every node at once (for a jump exo "
                                           "cannot run across anyway); default: one node at a time.")] = False,
    check: CheckOpt = False,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Bring every node of the mesh to the inventory's macOS build (macfleet_macos.build): stop exo, install the
    update on each node in turn (`softwareupdate --install LABEL --restart --user ADMIN --stdinpass`, the password
    on stdin), wait for it to come back (FileVault unlocked as `macfleet reboot` does), check its build and RDMA,
    verify the mesh, and start exo once every node runs the build. Takes the cluster lock and maintenance on the
    mesh (the healer leaves it alone; `macfleet maintenance`); resumes an interrupted
    upgrade; refuses when the build is not offered to a node. --check shows the plan and changes nothing.

    Exit 0 done (or nothing to do, or --check), 1 refused or failed, 2 bad input, 3 a node unreachable."""
    # loaded here, not at import: `macfleet upgrade --help` pays for none of them
    from macfleet.flow.maintenance import planned
    from macfleet.flow.meshes import one_mesh
    from macfleet.flow.upgrade import upgrade_mesh
    from macfleet.inventory.load import load_inventory
    from macfleet.render.output import emit, err_console, info
    from macfleet.render.reboot import progress_line
    from macfleet.render.text import text
    from macfleet.render.upgrade import render_upgrade
    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "exo starts again only once every node of the mesh runs the target build")
    target = one_mesh(fleet, mesh)
    show = node_progress(lambda n, s, d: err_console.print(progress_line(n, s, d)))
    with planned(fleet, target, "upgrade", f"macOS upgrade of mesh {target.name}", check=check,
                 say=lambda line: info(text(line))):
        result = upgrade_mesh(fleet, target, password_file, check=check, together=together,
                              say=lambda line: info(text(line)), progress=show)
    code = 0
    if result.result in ("refused", "failed"):
        code = EXIT_UNREACHABLE if result.unreachable else EXIT_PROBLEMS
    emit(result.payload(), human=render_upgrade, exit_code=code)
