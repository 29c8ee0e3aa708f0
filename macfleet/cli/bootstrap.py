"""`macfleet bootstrap`: run playbooks/bootstrap.yml with a live node × step table, then say what changed and
what still needs a human."""

from __future__ import annotations

import sys
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
    inventory_path,
    show_diff,
)
from macfleet.render import events as stream
from macfleet.render import output
from macfleet.render.output import emit

if TYPE_CHECKING:  # the flow, rich and the inventory's models are imported when it runs, not for --help
    from rich.live import Live

SUDO_EXPLAINED = (
    "sudo asks for the admin password on: {nodes}.\n"
    "bootstrap needs root for its changes. With the password, given once and kept only in memory, it installs\n"
    "macfleet's sudoers drop-in (/etc/sudoers.d/macfleet, checked by visudo), which lets this account run\n"
    "without a password exactly the commands macfleet runs as root, and nothing else."
)


def command(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    check: CheckOpt = False,
    diff: DiffOpt = False,
    non_interactive: Annotated[bool, typer.Option(
        "--non-interactive", help="Never prompt: nodes that need a person are listed with what to do.")] = False,
    become_password_file: Annotated[Path | None, typer.Option(
        "--become-password-file", help="The admin password, first line of a file only you can read (for automation).",
        show_default=False)] = None,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Prepare every node: preflight, Command Line Tools, scoped sudo, power, GPU memory, Spotlight, exo as a
    LaunchDaemon, packet filter for exo's ports, the IP plan, RDMA and FileVault checks. Idempotent.

    Exit 0 every node ready, 1 something failed or needs a human, 3 a node unreachable."""
    from rich.prompt import Confirm, Prompt

    from macfleet.flow.bootstrap import STEPS, bootstrap, read_secret_file
    from macfleet.flow.meshes import limit_meshes, select_meshes
    from macfleet.inventory.load import load_inventory
    from macfleet.render.bootstrap import StepTable, live_steps, render_bootstrap
    from macfleet.render.output import err_console

    fleet = load_inventory(inventory_path(inventory))
    meshes, partial = limit_meshes(fleet, select_meshes(fleet, mesh), limit)  # the playbook's --limit: these nodes
    secret = read_secret_file(become_password_file) if become_password_file is not None else None
    interactive = not non_interactive and sys.stdin.isatty() and not output.mode.json and not events

    def ask_password(nodes: list[str]) -> str | None:
        if secret is not None:
            return secret
        if not interactive:
            return None
        err_console.print(SUDO_EXPLAINED.format(nodes=", ".join(nodes)), markup=False, highlight=False)
        if not Confirm.ask("Install the drop-in with the admin password", console=err_console, default=True):
            return None
        return Prompt.ask("Admin password (not echoed, not stored)", password=True, console=err_console) or None

    names = [n for m in meshes for n in m.node_names]
    table = StepTable(names, STEPS, check=check)
    live: list[Live] = []
    seen: dict[tuple[str, str], str] = {}

    def on_step(node: str, step: str, status: str) -> None:
        if seen.get((node, step)) != status:  # a step's status once, not once per task
            seen[node, step] = status
            stream.progress(node=node, status=status, detail=step)
        if not live:  # started at the first event, so a password prompt before it is not overdrawn
            live.append(live_steps(table, err_console))
            live[0].start()
        table.update(node, step, status)

    try:
        report = bootstrap(fleet, meshes, check=check, become_password=ask_password, on_step=on_step,
                           partial=tuple(partial), diff=diff, on_diff=show_diff)
    finally:
        if live:
            live[0].stop()
    payload = report.json_payload()
    stream.nodes_from(payload)
    emit(payload, exit_code=report.exit_code, human=lambda p: render_bootstrap(
        p, changes={n: o.changes for n, o in report.nodes.items()},
        notes={n: o.notes for n, o in report.nodes.items()}, unreachable=report.unreachable, check=check))
