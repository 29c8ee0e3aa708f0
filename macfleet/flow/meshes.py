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


def limit_names(fleet: Fleet, limit: str | None) -> list[str] | None:
    """The nodes `-l/--limit PATTERN` names (inventory/limit.py: Ansible's pattern syntax over the nodes, the
    meshes, `macfleet` and `all`), or None without a limit."""
    if limit is None:
        return None
    from macfleet.inventory.limit import match

    hosts = [n.name for n in fleet.nodes]
    groups = {"macfleet": hosts, **{m.name: list(m.node_names) for m in fleet.meshes}}
    return match(limit, hosts, groups)


def limit_meshes(fleet: Fleet, meshes: list[Mesh], limit: str | None) -> tuple[list[Mesh], list[str]]:
    """`meshes` narrowed to the nodes `--limit` names (a mesh none of whose nodes is named is dropped), and the
    names of the meshes left partial (a mesh-wide step or check cannot be judged on part of a mesh)."""
    names = limit_names(fleet, limit)
    if names is None:
        return meshes, []
    out: list[Mesh] = []
    partial: list[str] = []
    for m in meshes:
        kept = tuple(n for n in m.nodes if n.name in names)
        if not kept:
            continue
        if len(kept) < len(m.nodes):
            partial.append(m.name)
            m = m.model_copy(update={"nodes": kept})
        out.append(m)
    if not out:
        raise UsageError(f"--limit {limit!r} names no node of " + ", ".join(m.name for m in meshes),
                         hint="nodes: " + ", ".join(n for m in meshes for n in m.node_names))
    return out, partial


def one_mesh(fleet: Fleet, mesh: str | None) -> Mesh:
    """--mesh NAME, or the inventory's only mesh (refused when there are several)."""
    meshes = select_meshes(fleet, mesh)
    if len(meshes) != 1:
        raise UsageError("this inventory has several meshes; say which with --mesh",
                         hint="meshes: " + ", ".join(m.name for m in meshes))
    return meshes[0]
