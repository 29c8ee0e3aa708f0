"""`macfleet export …`: the mesh macfleet knows (cabling, RDMA ports, IP plan) in another engine's own format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from macfleet.cli.options import InventoryOpt, JsonOpt, LimitOpt, MeshOpt, inventory_path, whole_mesh
from macfleet.errors import UsageError
from macfleet.render import output
from macfleet.render.output import emit, info

# The flows and the inventory's models are imported when a command runs, not for --help.

app = typer.Typer(no_args_is_help=True, help="Hand the mesh to other engines: MLX's hostfile, llama.cpp's --rpc list.")


@app.command("mlx-hostfile")
def mlx_hostfile_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    backend: Annotated[str, typer.Option("--backend", help="jaccl (RDMA over Thunderbolt) or ring (TCP over the "
                                         "Thunderbolt addresses).")] = "jaccl",
    out: Annotated[Path | None, typer.Option("--out", help="Write the hostfile to FILE (replaced whole) instead "
                                             "of printing it.", show_default=False)] = None,
    json_output: JsonOpt = False,
) -> None:
    """The hostfile `mlx.launch --hostfile` reads, from one collection pass: ranks in inventory order, each
    pair's RDMA device from its live cable (jaccl) or its planned Thunderbolt address (ring).

    Refused (exit 1, naming the pairs) when a pair has no active RDMA port; 3 when a node cannot be reached."""
    from macfleet.flow.export import MLX_BACKENDS, export_mlx_hostfile
    from macfleet.flow.meshes import one_mesh
    from macfleet.inventory.load import load_inventory
    from macfleet.render.mlx import hostfile_written

    if backend not in MLX_BACKENDS:
        raise UsageError(f"--backend {backend!r}: expected one of {', '.join(MLX_BACKENDS)}")
    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the hostfile ranks every node of the mesh")
    m = one_mesh(fleet, mesh)
    info(f"collecting from {len(m.nodes)} node(s) of mesh {m.name} in one pass…")
    hostfile = export_mlx_hostfile(fleet, m, backend, out)  # type: ignore[arg-type]
    if out is not None:
        info(hostfile_written(hostfile, out))
    if output.mode.json:  # MLX's hostfile is JSON itself: --json prints it as the result
        emit(hostfile.json_payload())
    elif out is None:
        typer.echo(hostfile.text(), nl=False)


@app.command("llama-rpc")
def llama_rpc_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    head: Annotated[str | None, typer.Option("--head", help="The node that runs llama-cli / llama-server "
                                             "(default: the mesh's first node).", show_default=False)] = None,
    json_output: JsonOpt = False,
) -> None:
    """The `--rpc host:port,…` list for the head node: each worker's planned address on its direct cable to the
    head, with the mesh's rpc-server port.

    Refused (exit 1, naming the workers) when a worker has no live cable or address to the head; 3 unreachable."""
    from macfleet.flow.export import export_llama_rpc
    from macfleet.flow.meshes import one_mesh
    from macfleet.inventory.load import load_inventory

    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the --rpc list names every worker of the mesh")
    m = one_mesh(fleet, mesh)
    rpc = export_llama_rpc(fleet, m, head)
    emit(rpc.json_payload(), human=lambda _: f"--rpc {rpc.rpc}")
