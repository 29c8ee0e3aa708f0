"""Rich renderings of an inventory."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from macfleet.inventory.model import Fleet
from macfleet.render.text import text


def render_inventory_check(fleet: Fleet) -> Text:
    nodes = sum(len(m.nodes) for m in fleet.meshes)
    meshes = len(fleet.meshes)
    return text(
        f"ok: {fleet.root}: {meshes} mesh{'es' if meshes != 1 else ''}, {nodes} Mac{'s' if nodes != 1 else ''}",
        style="green",
    )


def render_inventory(fleet: Fleet) -> Group:
    parts = []
    for mesh in fleet.meshes:
        table = Table(title=text(f"mesh {mesh.name}"), title_justify="left")
        for col in ("node", "address", "user", "model", "Thunderbolt ports"):
            table.add_column(col)
        for node in mesh.nodes:
            spec = node.model_spec
            model = f"{node.model} ({spec.chip})" if spec else (node.model or "?")
            ports = f"{len(spec.rdma_ports)} RDMA of {len(spec.thunderbolt_ports)}" if spec else "?"
            table.add_row(*(text(v) for v in (node.name, node.address, node.user or "", model, ports)))
        plan = mesh.settings.ipplan
        parts += [table, Text(f"  IP plan: {plan.pool} in /{plan.prefix} links, MTU {plan.mtu}", style="dim")]
    return Group(*parts)
