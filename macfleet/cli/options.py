"""Options shared by every command, defined once."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from macfleet.cli import complete, shared
from macfleet.errors import UsageError
from macfleet.render import events
from macfleet.render.output import set_json_mode

JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help=shared.JSON_HELP,
        envvar="MACFLEET_JSON",
        show_envvar=False,
        callback=set_json_mode,
        is_eager=True,
    ),
]

InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "-i",
        "--inventory",
        help=shared.INVENTORY_HELP,
        metavar="DIR",
        show_default=False,
    ),
]

MeshOpt = Annotated[
    str | None,
    typer.Option("--mesh", metavar="NAME", help="Only this mesh (an inventory group under `macfleet`).",
                 show_default=False, autocompletion=complete.meshes),
]

LimitOpt = Annotated[
    str | None,
    typer.Option(
        "-l",
        "--limit",
        metavar="PATTERN",
        help="Only these nodes, in Ansible's pattern syntax: names or groups (a mesh, all), comma- or "
        "colon-separated, globs (studio-*), !exclude, &intersect.",
        show_default=False,
        autocompletion=complete.limit,
    ),
]

def _events_cb(ctx: typer.Context, value: bool) -> bool:
    if value:
        events.start(ctx.command_path)
    return value


EventsOpt = Annotated[
    bool,
    typer.Option("--events", callback=_events_cb, is_eager=True,
                 help="Stream what happens as JSON Lines on stdout (started, progress, node, finished; the result in "
                 "the finished line)."),
]

CheckOpt = Annotated[
    bool,
    typer.Option("--check", help="Say what would change (on the nodes or here), and change nothing."),
]

def whole_mesh(fleet: Any, mesh: str | None, limit: str | None, why: str) -> str | None:
    """-l/--limit on a command that works on whole meshes: taken when it names exactly the nodes of one mesh
    (as --mesh NAME), else refused with `why` the command needs the whole mesh. Returns the mesh to use."""
    if limit is None:
        return mesh
    from macfleet.flow.meshes import limit_names

    names = sorted(limit_names(fleet, limit) or [])
    whole = [m.name for m in fleet.meshes if sorted(m.node_names) == names]
    if not whole or mesh not in (None, whole[0]):
        also = f", and --mesh {mesh} is another" if whole and mesh not in (None, whole[0]) else ""
        raise UsageError(f"--limit {limit!r} names {', '.join(names)}, which is not every node of one mesh{also}",
                         hint=f"{why}: give --mesh NAME, or a --limit that names one whole mesh")
    return whole[0]


def node_progress(show: Callable[[str, str, str], None]) -> Callable[[str, str, str], None]:
    """A flow's per-node progress callback (node, status, detail): shown by `show`, and on the --events stream."""

    def update(node: str, status: str, detail: str) -> None:
        show(node, status, detail)
        events.node_status(node, status, detail)

    return update


DiffOpt = Annotated[
    bool,
    typer.Option("--diff", help="Show what the playbooks change (or would, with --check) inside files, as "
                 "Ansible's --diff does."),
]

def show_diff(node: str, task: str, diff: str) -> None:
    """--diff: what a playbook task changed (or would) inside files, on stderr and on the --events stream."""
    from macfleet.render.output import err_console
    from macfleet.render.text import text

    err_console.print(text(f"--- {node}: {task}", style="bold"), highlight=False)
    err_console.print(text(diff.rstrip("\n")), highlight=False)
    events.progress(node=node, status="diff", detail=task, diff=diff)


inventory_path = shared.inventory_path  # its own -i, the -i before the command, $MACFLEET_INVENTORY, the default


# ---------------------------------------------------------------------------------------------------------
# Numbers from flags: each has a unit and a sane range, checked here, at the edge. click's own FloatRange
# lets `nan` and `inf` through (nan compares false with every bound), so every number is parsed by one of these.
# ---------------------------------------------------------------------------------------------------------


def _g(value: float) -> str:
    return f"{value:g}"


def parse_seconds(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A parser for a duration in seconds: finite, in [low, high] (or (low, high] with low_open)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{text!r} is not a number of seconds") from None
        too_low = value <= low if low_open else value < low
        if not math.isfinite(value) or too_low or value > high:
            bound = f"more than {_g(low)}" if low_open else f"at least {_g(low)}"
            raise typer.BadParameter(f"{text} s is out of range: expected {bound} and at most {_g(high)} seconds")
        return value

    return parse


def parse_count(low: int, high: int, what: str) -> Callable[[str], int]:
    """A parser for a whole number of `what` in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(str(text).strip(), 10)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{text!r} is not a whole number of {what}") from None
        if not low <= value <= high:
            raise typer.BadParameter(f"{value} {what} is out of range: expected {low} to {high}")
        return value

    return parse


def seconds_option(*names: str, low: float, high: float, low_open: bool = False, **kwargs: Any) -> Any:
    """typer.Option for a duration in seconds, range-checked and finite; use as Annotated[float, ...]."""
    return typer.Option(*names, parser=parse_seconds(low, high, low_open=low_open), metavar="SECONDS", **kwargs)


def count_option(*names: str, low: int, high: int, what: str, **kwargs: Any) -> Any:
    """typer.Option for a count of things, range-checked; use as Annotated[int, ...]."""
    return typer.Option(*names, parser=parse_count(low, high, what), metavar="N", **kwargs)
