"""`macfleet unlock`: unlock FileVault Macs waiting at their unlock screen over SSH (macOS 26)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from macfleet.cli import complete
from macfleet.cli.options import (
    CheckOpt,
    EventsOpt,
    InventoryOpt,
    JsonOpt,
    LimitOpt,
    inventory_path,
    node_progress,
    seconds_option,
)
from macfleet.errors import UsageError
from macfleet.render.output import emit


def command(
    nodes: Annotated[list[str] | None, typer.Argument(
        help="Nodes (default: every node of the inventory).",
        autocompletion=complete.nodes, show_default=False)] = None,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    password_file_opt: Annotated[Path | None, typer.Option(
        "--password-file", help="The password of a FileVault-enabled user, first line of a file only you can read "
        "(default: macfleet_reboot.filevault_credential_file).", show_default=False)] = None,
    timeout: Annotated[float | None, seconds_option(
        "--timeout", low=1, high=86400, help="How long to wait for each node to come back (default: "
        "macfleet_reboot.timeout_s).", show_default=False)] = None,
    check: CheckOpt = False,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Unlock each node waiting at its FileVault unlock screen: the password over SSH, checked strictly against
    the unlock-screen key `macfleet trust --unlock` recorded (apple_ssh_and_filevault(7)), then wait for the node
    to come back with its normal host key. --check shows which nodes would be unlocked and sends nothing.

    Exit 0 every node unlocked or not locked, 1 a key or the password refused, 2 bad input (no password file,
    one others can read), 3 a node unreachable or not back in time."""
    from macfleet.flow.meshes import limit_names
    from macfleet.flow.unlock import password_file, unlock_nodes  # paramiko: when it runs, not for --help
    from macfleet.inventory.load import load_inventory
    from macfleet.render.output import err_console
    from macfleet.render.reboot import progress_line
    from macfleet.render.unlock import render_unlock

    fleet = load_inventory(inventory_path(inventory))
    if limit is not None and nodes:
        raise UsageError("give the nodes as arguments or with --limit, not both")
    all_nodes = [n.name for n in fleet.nodes]
    chosen = limit_names(fleet, limit) or list(dict.fromkeys(nodes or all_nodes))
    unknown = [n for n in chosen if n not in all_nodes]
    if unknown:
        raise UsageError("no node " + ", ".join(repr(n) for n in unknown) + f" in {fleet.root}",
                         hint="nodes: " + ", ".join(all_nodes))
    secret = password_file(fleet, chosen, password_file_opt)
    wait_s = timeout if timeout is not None else max(
        m.settings.reboot.timeout_s for m in fleet.meshes if set(m.node_names) & set(chosen))
    report = unlock_nodes(fleet, chosen, secret, check=check, timeout_s=wait_s,
                          progress=node_progress(lambda n, s, d: err_console.print(progress_line(n, s, d))))
    emit(report.payload(), human=render_unlock, exit_code=report.exit_code)
