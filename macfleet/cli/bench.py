"""`macfleet bench …`: measurements of the mesh itself."""

from __future__ import annotations

from typing import Annotated

import typer

from macfleet.cli.options import (
    EventsOpt,
    InventoryOpt,
    JsonOpt,
    LimitOpt,
    MeshOpt,
    count_option,
    inventory_path,
    whole_mesh,
)
from macfleet.render.output import emit, info
from macfleet.render.text import text

app = typer.Typer(no_args_is_help=True, help="Measure the mesh: every Thunderbolt link's throughput and latency, "
                  "every placed model's tokens/s.")


@app.command("links")
def links_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    duration: Annotated[int, count_option("--duration", low=1, high=600, what="seconds",
                                          help="Seconds of iperf3 per link (both directions at once).")] = 5,
    save_baseline: Annotated[bool, typer.Option("--save-baseline", help="Keep these results beside the "
                                                "inventory as the baseline later runs are compared with.")] = False,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Every Thunderbolt link measured each way with iperf3 between the two ends' link addresses, and its latency
    with ping, in rounds of links that share no Mac. With a baseline, each direction below the mesh's
    `macfleet_bench.min_fraction` of it is named.

    Exit 0, 1 a link below its baseline or not measured, 3 a node could not be reached."""
    from macfleet.flow.bench_links import bench_links  # the flows when it runs, not for --help
    from macfleet.flow.meshes import one_mesh
    from macfleet.inventory.load import load_inventory
    from macfleet.render.bench import baseline_note, render_bench

    fleet = load_inventory(inventory_path(inventory))
    m = one_mesh(fleet, whole_mesh(fleet, mesh, limit, "every link of the mesh is measured, in rounds of links "
                                   "that share no Mac"))
    info(f"measuring the links of mesh {m.name} ({duration} s each, links sharing no Mac at once)…")

    def progress(i: int, rnd) -> None:
        info(text(f"round {i + 1}: " + ", ".join(f"{lk.a} ↔ {lk.b}" for lk in rnd)))

    run = bench_links(fleet, m, duration_s=duration, save_baseline=save_baseline, on_round=progress)
    if run.saved:
        info(text(f"saved the baseline in {run.baseline_path}"))
    elif run.not_saved:
        info(text(f"baseline not saved: {run.not_saved}"))
    note = baseline_note(run.baseline.saved_at if run.baseline else None, run.min_fraction, str(run.baseline_path))
    emit(run.json_payload(), human=lambda _: render_bench(run.nodes, run.results, run.below, note),
         exit_code=run.exit_code)


@app.command("exo")
def exo_cmd(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    save_baseline: Annotated[bool, typer.Option("--save-baseline", help="Keep these figures beside the inventory "
                                                "as the baseline later runs and doctor's inference check compare "
                                                "with.")] = False,
    limit: LimitOpt = None,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Every model exo has placed on the mesh, one at a time, through exo's bench endpoint: prompt and generation
    tokens/s as exo measures them. With a baseline, a model below the mesh's
    `macfleet_bench.inference_min_fraction` of it is named.

    Exit 0, 1 a model gave no token, is below its baseline, or nothing is placed, 3 a node could not be reached."""
    from macfleet.flow.bench_exo import bench_exo
    from macfleet.flow.meshes import one_mesh
    from macfleet.flow.placed import api_for
    from macfleet.inventory.load import load_inventory
    from macfleet.render.bench import baseline_note, render_bench_exo

    fleet = load_inventory(inventory_path(inventory))
    m = one_mesh(fleet, whole_mesh(fleet, mesh, limit, "exo serves each placed model from the whole mesh"))
    info(f"measuring the models placed on mesh {m.name} through exo's bench endpoint, one at a time…")
    run = bench_exo(fleet, m, api_for(fleet, m), save_baseline=save_baseline)
    if run.saved:
        info(text(f"saved the baseline in {run.baseline_path}"))
    elif run.not_saved:
        info(text(f"baseline not saved: {run.not_saved}"))
    note = baseline_note(run.baseline.saved_at if run.baseline else None, run.min_fraction, str(run.baseline_path))
    emit(run.json_payload(), human=lambda _: render_bench_exo(run.measured, run.findings, note),
         exit_code=run.exit_code)
