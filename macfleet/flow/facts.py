"""The facts flows: a saved capture parsed as one KIND (or guessed), and saved captures matched into links."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from macfleet.collect.replay import read_capture
from macfleet.errors import FactsParseError, UsageError
from macfleet.facts.links import match_links
from macfleet.facts.network import HardwarePortsFacts, parse_hardware_ports
from macfleet.facts.registry import KIND_NAMES, KINDS, parse, parse_auto
from macfleet.facts.thunderbolt import ThunderboltFacts, parse_thunderbolt
from macfleet.judge.links import LinksReport, judge_links

AUTO = "auto"


class AutoParsed(BaseModel):
    """`facts parse auto`: the KIND guessed, and the facts as `facts parse KIND` would print them."""

    kind: str
    facts: dict


def kind_commands() -> dict[str, str]:
    """Each KIND and the command line it stands for."""
    return {k: s.command for k, s in KINDS.items()}


def parse_capture(kind: str, file: Path) -> tuple[str, BaseModel]:
    """FILE parsed as KIND's output (or, for `auto`, as the KIND it looks like): (kind, facts)."""
    if kind != AUTO and kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}", hint="one of: " + ", ".join((*KIND_NAMES, AUTO)))
    text = read_capture(file)
    if kind == AUTO:
        return parse_auto(text)
    return kind, parse(kind, text)


def links_from_captures(thunderbolt: dict[str, Path], hardware_ports: dict[str, Path]) -> LinksReport:
    """The links between saved `SPThunderboltDataType` captures of one pass (and the port names, where given)."""
    nodes: dict[str, ThunderboltFacts] = {}
    for node, path in thunderbolt.items():
        try:
            nodes[node] = parse_thunderbolt(read_capture(path))
        except FactsParseError as e:
            raise UsageError(f"{node} ({path}): {e.message}") from None
    hw: dict[str, HardwarePortsFacts] = {}
    for node, path in hardware_ports.items():
        if node not in nodes:
            raise UsageError(f"--ports {node}: no --from capture for that node")
        try:
            hw[node] = parse_hardware_ports(read_capture(path))
        except FactsParseError as e:
            raise UsageError(f"{node} ({path}): {e.message}") from None
    return judge_links(match_links(nodes, hw))
