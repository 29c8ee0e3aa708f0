"""The shell's completion of node and mesh names, from the inventory the command would read (its -i, the -i
before the command's name, $MACFLEET_INVENTORY, the config file's, the default). Quiet: an inventory that
cannot be read completes nothing and prints nothing. Loaded only when the shell asks (typer calls these)."""

from __future__ import annotations

import click  # typer reads these functions' annotations to pass the context (click is loaded with typer)

# What -l/--limit takes besides names (inventory/limit.py): separators, then a term's prefix.
_SEPARATORS = ",:"
_PREFIXES = "!&~"


def _names(ctx: click.Context) -> tuple[list[str], list[str]]:
    """(nodes, meshes) of the inventory the command would read, or nothing."""
    from macfleet.cli.shared import inventory_path

    given = None
    while ctx is not None and given is None:
        given = ctx.params.get("inventory")
        ctx = ctx.parent  # type: ignore[assignment]
    try:
        from macfleet.inventory.load import load_inventory

        fleet = load_inventory(inventory_path(given))
    except Exception:  # completing must never print or fail: no names, the shell shows none
        return [], []
    return [n.name for n in fleet.nodes], [m.name for m in fleet.meshes]


def nodes(ctx: click.Context, incomplete: str) -> list[str]:
    return [n for n in _names(ctx)[0] if n.startswith(incomplete)]


def meshes(ctx: click.Context, incomplete: str) -> list[str]:
    return [m for m in _names(ctx)[1] if m.startswith(incomplete)]


def limit(ctx: click.Context, incomplete: str) -> list[str]:
    """A pattern's last term, after what is written before it: `studio-1,!stu` → `studio-1,!studio-2`, …"""
    cut = max(incomplete.rfind(sep) for sep in _SEPARATORS) + 1
    head, term = incomplete[:cut], incomplete[cut:]
    sign = term[:1] if term[:1] in _PREFIXES else ""
    node_names, mesh_names = _names(ctx)
    words = [*node_names, *mesh_names, "macfleet", "all"]
    return [head + sign + w for w in dict.fromkeys(words) if w.startswith(term[len(sign):])]
