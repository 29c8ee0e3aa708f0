"""`macfleet topology ...`: the cabling between Macs. `links` is the offline half, from saved captures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from macfleet.cli.facts import read_capture
from macfleet.cli.options import JsonOpt
from macfleet.errors import FactsParseError, UsageError
from macfleet.facts.links import match_links
from macfleet.facts.network import HardwarePortsFacts, parse_hardware_ports
from macfleet.facts.thunderbolt import ThunderboltFacts, parse_thunderbolt
from macfleet.render.facts import render_links
from macfleet.render.output import emit

app = typer.Typer(no_args_is_help=True, help="Cabling check, cabling plan and picture, IP plan.")


def _node_files(values: list[str], option: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for v in values:
        node, sep, file = v.partition("=")
        if not sep or not node or not file:
            raise UsageError(f"{option} {v!r}: expected NODE=FILE")
        if node in out:
            raise UsageError(f"{option}: node {node!r} given twice")
        out[node] = Path(file)
    return out


@app.command("links")
def links_cmd(
    from_: Annotated[
        list[str],
        typer.Option("--from", help="NODE=FILE: a saved `system_profiler SPThunderboltDataType` (-json or text)."),
    ],
    ports: Annotated[
        list[str] | None,
        typer.Option("--ports", help="NODE=FILE: that node's `networksetup -listallhardwareports`, to name enX."),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """The links between saved captures of one collection pass (each cable checked from both ends)."""
    nodes: dict[str, ThunderboltFacts] = {}
    for node, path in _node_files(from_, "--from").items():
        try:
            nodes[node] = parse_thunderbolt(read_capture(path))
        except FactsParseError as e:
            raise UsageError(f"{node} ({path}): {e.message}") from None
    hw: dict[str, HardwarePortsFacts] = {}
    for node, path in _node_files(ports or [], "--ports").items():
        if node not in nodes:
            raise UsageError(f"--ports {node}: no --from capture for that node")
        try:
            hw[node] = parse_hardware_ports(read_capture(path))
        except FactsParseError as e:
            raise UsageError(f"{node} ({path}): {e.message}") from None
    result = match_links(nodes, hw)
    emit(result, human=render_links)
