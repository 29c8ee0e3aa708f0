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
    report = _check_report(
        inventory=str(fleet.root), ok=True, meshes={m.name: list(m.node_names) for m in fleet.meshes},
        warnings=[dict(w.__dict__) for w in fleet.warnings],
    )
    for w in fleet.warnings:
        info(text(f"warning: {w}", style="yellow"))
    emit(report, human=lambda _: render_inventory_check(fleet))


@app.command()
def show(inventory: InventoryOpt = None, json_output: JsonOpt = False) -> None:
    """Show the meshes, their Macs and the effective settings."""
    from macfleet.inventory.load import load_inventory
    from macfleet.render.inventory import render_inventory

    fleet = load_inventory(inventory_path(inventory))
    emit(_show(fleet), human=lambda _: render_inventory(fleet))
