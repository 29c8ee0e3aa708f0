"""Options shared by every command, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from macfleet.render.output import set_json_mode

JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the result as JSON on stdout (messages go to stderr).",
        envvar="MACFLEET_JSON",
        callback=set_json_mode,
        is_eager=True,
    ),
]

InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "-i",
        "--inventory",
        help="Inventory directory (default: $MACFLEET_INVENTORY, else ./inventories/default).",
        envvar="MACFLEET_INVENTORY",
        show_default=False,
    ),
]

MeshOpt = Annotated[
    str | None,
    typer.Option("--mesh", help="Only this mesh (an inventory group under `macfleet`).", show_default=False),
]

CheckOpt = Annotated[
    bool,
    typer.Option("--check", help="Say what would change on the nodes, and change nothing."),
]

DEFAULT_INVENTORY = Path("inventories/default")


def inventory_path(value: Path | None) -> Path:
    return value if value is not None else DEFAULT_INVENTORY
