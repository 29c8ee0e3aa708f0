"""`macfleet trust`: first contact with each Mac's SSH host key."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from macfleet.cli import complete
from macfleet.cli.options import CheckOpt, InventoryOpt, JsonOpt, LimitOpt, inventory_path
from macfleet.errors import UsageError, most_severe_exit
from macfleet.render import output
from macfleet.render.output import emit


def command(
    nodes: Annotated[list[str] | None, typer.Argument(
        help="Nodes (default: every node of the inventory).",
        autocompletion=complete.nodes, show_default=False)] = None,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    fingerprint: Annotated[list[str] | None, typer.Option(
        "--fingerprint", help="NODE=SHA256:… read at the Mac; that node's key is recorded only if it matches.",
        show_default=False)] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", help="Record every new key as seen (a lab, or a network you vouch for); each is printed.")] = False,
    unlock: Annotated[bool, typer.Option(
        "--unlock", help="The nodes wait at their FileVault unlock screen: record the key that screen shows, apart "
        "from their normal key (known_hosts.unlock), so `macfleet unlock` can reach it strictly.")] = False,
    check: CheckOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Fetch each Mac's SSH host key, show its fingerprint, and record it in the inventory's known_hosts once
    confirmed (at the prompt, by --fingerprint, or --yes). A key that changed is refused, never replaced.

    With --unlock, the key recorded is the one a FileVault Mac shows at its unlock screen (macOS 26: password
    logins only there), kept apart and never accepted for a normal login.

    Exit 0 every key known or recorded, 1 a key refused or not confirmed, 3 a node unreachable."""
    from rich.prompt import Confirm

    from macfleet.flow.meshes import limit_names
    from macfleet.flow.trust import HostKeySeen, parse_fingerprints, trust_nodes  # paramiko: when it runs
    from macfleet.inventory.load import load_inventory
    from macfleet.render.output import err_console
    from macfleet.render.trust import confirm_text, render_trust

    fleet = load_inventory(inventory_path(inventory))
    if limit is not None and nodes:
        raise UsageError("give the nodes as arguments or with --limit, not both")
    all_nodes = [n.name for n in fleet.nodes]
    chosen = limit_names(fleet, limit) or list(nodes or all_nodes)
    unknown = [n for n in chosen if n not in all_nodes]
    if unknown:
        raise UsageError("no node " + ", ".join(repr(n) for n in unknown) + f" in {fleet.root}",
                         hint="nodes: " + ", ".join(all_nodes))
    fps = parse_fingerprints(fingerprint or [], chosen)
    interactive = sys.stdin.isatty() and not output.mode.json and not check

    def ask(seen: HostKeySeen) -> bool:
        err_console.print(confirm_text(seen.node, seen.entry, seen.key_type or "?", seen.fingerprint or "?",
                                       unlock=unlock, check=check))
        return Confirm.ask("  Is this the key of that Mac? Record it", console=err_console, default=False)

    report = trust_nodes(fleet, chosen, fingerprints=fps, accept_all=yes, confirm=ask if interactive else None,
                         unlock=unlock, check=check)
    codes = [3 if report.unreachable else 0, 1 if report.refused else 0]
    emit(report.json_payload(), human=render_trust, exit_code=most_severe_exit(codes))
