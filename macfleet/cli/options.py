"""Options shared by every command, defined once."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from macfleet.cli import shared
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
    typer.Option("--mesh", help="Only this mesh (an inventory group under `macfleet`).", show_default=False),
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
    ),
]

CheckOpt = Annotated[
    bool,
    typer.Option("--check", help="Say what would change on the nodes, and change nothing."),
]

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
