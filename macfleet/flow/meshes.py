"""Which meshes a command acts on, from its --mesh option: one rule and one message for every command."""

from __future__ import annotations

from macfleet.errors import UsageError
from macfleet.inventory.model import Fleet, Mesh


def select_meshes(fleet: Fleet, mesh: str | None) -> list[Mesh]:
    """--mesh NAME, or every mesh of the inventory."""
    if mesh is None:
        return list(fleet.meshes)
    try:
        return [fleet.mesh(mesh)]
    except KeyError:
        raise UsageError(f"no mesh {mesh!r} in {fleet.root}",
                         hint="meshes: " + ", ".join(m.name for m in fleet.meshes)) from None


def one_mesh(fleet: Fleet, mesh: str | None) -> Mesh:
    """--mesh NAME, or the inventory's only mesh (refused when there are several)."""
    meshes = select_meshes(fleet, mesh)
    if len(meshes) != 1:
        raise UsageError("this inventory has several meshes; say which with --mesh",
                         hint="meshes: " + ", ".join(m.name for m in meshes))
    return meshes[0]
