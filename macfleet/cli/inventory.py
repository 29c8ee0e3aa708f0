"""`macfleet inventory check|show`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from macfleet.cli.options import InventoryOpt, JsonOpt, inventory_path
from macfleet.render.output import emit, info
from macfleet.render.text import text

# The inventory's models (pydantic, yaml) are imported when a command runs, not for its --help.
if TYPE_CHECKING:
    from macfleet.inventory.model import Fleet

app = typer.Typer(no_args_is_help=True, help="Check and show an inventory.")


def _check_report(**fields: Any) -> Any:
    from pydantic import BaseModel

    class InventoryCheckReport(BaseModel):
        inventory: str
        ok: bool
        meshes: dict[str, list[str]]
        warnings: list[dict[str, Any]]  # file, key_path, found, expected, line: allowed, but worth a word

    return InventoryCheckReport(**fields)


def _known_hosts_warnings(fleet: Fleet) -> list[Any]:
    """A known_hosts file that is missing or holds no key: with strict host keys every connection is refused
    until `macfleet trust` records the keys (said here, not discovered at the first doctor)."""
    from macfleet.errors import Problem

    out = []
    for file in dict.fromkeys(m.settings.ssh.known_hosts_file for m in fleet.meshes if m.settings.ssh.known_hosts_file):
        path = fleet.path(file)
        try:
            keys = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("#")]
            found = None if keys else "an empty known_hosts (no host key recorded)"
        except FileNotFoundError:
            found = "no known_hosts file"
        except OSError as e:
            found = f"an unreadable known_hosts ({e.strerror or e})"
        if found is not None:
            out.append(Problem(str(path), "macfleet_ssh.known_hosts_file", found,
                               "every node's host key: run `macfleet trust` (strict host keys refuse every node "
                               "until then)"))
    return out


def _show(fleet: Fleet) -> dict[str, Any]:
    data = fleet.model_dump(mode="json")
    data["root"] = str(fleet.root)
    return data


@app.command()
def check(inventory: InventoryOpt = None, json_output: JsonOpt = False) -> None:
    """Validate an inventory: every problem is listed with its file, key and line; exit 2 if any."""
    from macfleet.inventory.load import load_inventory
    from macfleet.render.inventory import render_inventory_check

    fleet = load_inventory(inventory_path(inventory))
    warnings = [*fleet.warnings, *_known_hosts_warnings(fleet)]
    report = _check_report(
        inventory=str(fleet.root), ok=True, meshes={m.name: list(m.node_names) for m in fleet.meshes},
        warnings=[dict(w.__dict__) for w in warnings],
    )
    for w in warnings:
        info(text(f"warning: {w}", style="yellow"))
    emit(report, human=lambda _: render_inventory_check(fleet))


@app.command()
def show(inventory: InventoryOpt = None, json_output: JsonOpt = False) -> None:
    """Show the meshes, their Macs and the effective settings."""
    from macfleet.inventory.load import load_inventory
    from macfleet.render.inventory import render_inventory

    fleet = load_inventory(inventory_path(inventory))
    emit(_show(fleet), human=lambda _: render_inventory(fleet))
