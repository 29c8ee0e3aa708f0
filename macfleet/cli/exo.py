"""`macfleet exo ...`: models placed on the mesh and prompts answered, through exo's own API."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from macfleet.cli.options import (
    CheckOpt,
    EventsOpt,
    InventoryOpt,
    JsonOpt,
    LimitOpt,
    MeshOpt,
    inventory_path,
    whole_mesh,
)
from macfleet.cli.shared import lazy_module
from macfleet.constants import EXO_PORT
from macfleet.errors import UsageError
from macfleet.render.output import emit, info

flow = lazy_module("macfleet.flow.exo")
render = lazy_module("macfleet.render.exo")

app = typer.Typer(no_args_is_help=True, help="Models on the mesh through exo's API: status, place, chat, stop, "
                  "and a tunnel to exo's dashboard.")

MAX_PROMPT = 64 * 1024


def _fleet(inventory):
    from macfleet.inventory.load import load_inventory

    return load_inventory(inventory_path(inventory))


WHOLE = "exo places and serves a model across the whole mesh"


@app.command("status")
def status_cmd(inventory: InventoryOpt = None, mesh: MeshOpt = None, limit: LimitOpt = None,
               json_output: JsonOpt = False) -> None:
    """Each node's exo (release, running, the peers it sees) and the placed instances with their shards.

    Exit 0 all running and every instance ready, 1 otherwise, 3 a node could not be reached."""
    fleet = _fleet(inventory)
    report = flow.status(fleet, whole_mesh(fleet, mesh, limit, WHOLE))
    emit(report, human=render.render_status, exit_code=report.exit_code())


@app.command("place")
def place_cmd(
    model: Annotated[str, typer.Argument(help="The model id, as exo and `rollout model` name it (org/name).")],
    sharding: Annotated[str, typer.Option("--sharding", help="pipeline or tensor.")] = "pipeline",
    over: Annotated[str, typer.Option("--over", help="rdma (exo's MlxJaccl) or ring (MlxRing).")] = "rdma",
    min_nodes: Annotated[int, typer.Option("--min-nodes", min=1, max=64, help="Place it over at least N nodes.")] = 1,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until every runner has loaded its shard.")] = False,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", min=1, max=86400, show_default=False,
        help="Seconds --wait waits (default: the inventory's exo.place_timeout_s).")] = None,
    check: CheckOpt = False,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    json_output: JsonOpt = False,
    events: EventsOpt = False,
) -> None:
    """Show exo's placement and place the model: refused with the reason when it does not fit, when the mesh
    has no RDMA for `--over rdma`, or when the model is not on every node it needs (`macfleet rollout model`).

    Exit 0 placed (or placed already), 1 refused or not ready in time, 3 unreachable."""
    from typing import get_args

    from macfleet.inventory.model import Sharding, Transport

    for flag, value, words in (("--sharding", sharding, get_args(Sharding)), ("--over", over, get_args(Transport))):
        if value not in words:
            raise UsageError(f"{flag} {value!r}: expected {' or '.join(words)}")
    fleet = _fleet(inventory)
    report = flow.place(fleet, model, mesh=whole_mesh(fleet, mesh, limit, WHOLE), sharding=sharding, transport=over,
                        min_nodes=min_nodes, wait=wait, check=check, timeout_s=timeout, say=info)
    emit(report, human=render.render_place)


@app.command("chat")
def chat_cmd(
    model: Annotated[str, typer.Argument(help="A placed model.")],
    prompt: Annotated[str | None, typer.Argument(help="The prompt (default: read from stdin).",
                                                 show_default=False)] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", min=1, max=1_000_000,
                                                   help="Stop the answer after this many tokens.")] = None,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Stream the model's answer to PROMPT, then its prompt and generation speeds (tokens/s).

    Exit 0 answered, 1 not placed or failed mid-answer, 3 unreachable."""
    from macfleet.render.output import mode

    if prompt is not None:
        text = prompt
    else:
        try:  # bytes, decoded here: a prompt that is not UTF-8 is refused, whatever the locale
            text = sys.stdin.buffer.read(4 * MAX_PROMPT + 1).decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError("the prompt on stdin is not UTF-8 text") from None
    if not text.strip() or len(text) > MAX_PROMPT:
        raise UsageError(f"the prompt must be 1 to {MAX_PROMPT} characters (found {len(text)})")
    streaming = not mode.json

    def show(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    report = flow.chat(_fleet(inventory), model, text, mesh=mesh, max_tokens=max_tokens,
                       on_text=show if streaming else flow.quiet)
    emit(report, human=render.render_chat)


@app.command("stop")
def stop_cmd(
    target: Annotated[str, typer.Argument(help="An instance id, or a model (every instance of it).")],
    check: CheckOpt = False,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Stop an instance (or every instance of a model) and wait until exo no longer shows it. Nothing placed by
    that name: nothing to do, exit 0."""
    fleet = _fleet(inventory)
    report = flow.stop(fleet, target, mesh=whole_mesh(fleet, mesh, limit, WHOLE), check=check, say=info)
    emit(report, human=render.render_stop)


@app.command("tunnel")
def tunnel_cmd(
    node: Annotated[str | None, typer.Argument(help="The node whose exo to reach (default: the mesh's first).",
                                               show_default=False)] = None,
    port: Annotated[int, typer.Option("--port", min=1024, max=65535, help="Local port.")] = EXO_PORT,
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Forward a local port to a node's exo (API and dashboard) over the SSH login macfleet uses, print the URL,
    and keep the tunnel open until Ctrl-C. exo's API has no authentication: the port listens on 127.0.0.1 only."""
    import subprocess

    url, argv = flow.tunnel_argv(_fleet(inventory), node, mesh=mesh, local_port=port)
    emit({"url": url, "argv": argv}, human=lambda _: f"exo at {url} (Ctrl-C closes the tunnel)")
    rc = subprocess.call(argv)
    if rc not in (0, 130, -2):
        raise typer.Exit(1)

