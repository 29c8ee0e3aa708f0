"""Pure parsers: macOS command output -> typed, frozen facts. No I/O; imports only `macfleet.errors`.

KIND names, parsers and models are listed once in `macfleet.facts.registry` (their commands in
`macfleet.facts.kinds`). The names below are imported on first use: importing one parser module (or the
collector's command table) does not build every other parser's models.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    **dict.fromkeys(("Link", "LinkEnd", "LinkObservation", "LinksResult", "match_links"), "links"),
    **dict.fromkeys(("PortMap", "PortMapEntry", "build_port_map"), "portmap"),
    **dict.fromkeys(("KIND_NAMES", "KINDS", "detect_kind", "parse", "parse_auto"), "registry"),
    **dict.fromkeys(("ThunderboltAttached", "ThunderboltFacts", "ThunderboltPort", "parse_thunderbolt"),
                    "thunderbolt"),
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
