"""`macfleet inventory check|show`."""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel

from macfleet.cli.options import InventoryOpt, JsonOpt, inventory_path
from macfleet.inventory.load import load_inventory
from macfleet.inventory.model import Fleet
from macfleet.render.inventory import render_inventory, render_inventory_check
from macfleet.render.output import emit, info
from macfleet.render.text import text

app = typer.Typer(no_args_is_help=True, help="Check and show an inventory.")


class InventoryCheckReport(BaseModel):
    inventory: str
    ok: bool
    meshes: dict[str, list[str]]
    warnings: list[dict[str, Any]]  # file, key_path, found, expected, line: allowed, but worth a word


def _show(fleet: Fleet) -> dict[str, Any]:
    data = fleet.model_dump(mode="json")
    data["root"] = str(fleet.root)
    return data


@app.command()
def check(inventory: InventoryOpt = None, json_output: JsonOpt = False) -> None:
    """Validate an inventory: every problem is listed with its file, key and line; exit 2 if any."""
    fleet = load_inventory(inventory_path(inventory))
    report = InventoryCheckReport(
        inventory=str(fleet.root), ok=True, meshes={m.name: list(m.node_names) for m in fleet.meshes},
        warnings=[dict(w.__dict__) for w in fleet.warnings],
    )
    for w in fleet.warnings:
        info(text(f"warning: {w}", style="yellow"))
    emit(report, human=lambda _: render_inventory_check(fleet))


@app.command()
def show(inventory: InventoryOpt = None, json_output: JsonOpt = False) -> None:
    """Show the meshes, their Macs and the effective settings."""
    fleet = load_inventory(inventory_path(inventory))
    emit(_show(fleet), human=lambda _: render_inventory(fleet))
