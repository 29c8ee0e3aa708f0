"""Pure parsers: macOS command output -> typed, frozen facts. No I/O; imports only `macfleet.errors`.

KIND names, parsers and models are listed once in `macfleet.facts.registry`.
"""

from macfleet.facts.links import Link, LinkEnd, LinkObservation, LinksResult, match_links
from macfleet.facts.portmap import PortMap, PortMapEntry, build_port_map
from macfleet.facts.registry import KIND_NAMES, KINDS, detect_kind, parse, parse_auto
from macfleet.facts.thunderbolt import ThunderboltAttached, ThunderboltFacts, ThunderboltPort, parse_thunderbolt

__all__ = [
    "KINDS", "KIND_NAMES", "Link", "LinkEnd", "LinkObservation", "LinksResult", "PortMap", "PortMapEntry",
    "ThunderboltAttached", "ThunderboltFacts", "ThunderboltPort", "build_port_map", "detect_kind",
    "match_links", "parse", "parse_auto", "parse_thunderbolt",
]
