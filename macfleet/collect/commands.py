"""The commands the collector runs: stated once in `facts/commands.py` (the check catalogue names its probes'
commands from there), imported here under the collector's name for its sessions and passes."""

from macfleet.facts.commands import (
    ALL_SPECS,
    BOOTTIME,
    EXO_RELEASE_SCRIPT,
    PF_ANCHOR,
    CommandSpec,
    exo_daemons_spec,
    exo_specs,
    home_relative,
    ping_spec,
    probe_specs,
    spec_for,
    specs_for,
)

__all__ = ["ALL_SPECS", "BOOTTIME", "EXO_RELEASE_SCRIPT", "PF_ANCHOR", "CommandSpec", "exo_daemons_spec", "exo_specs",
           "home_relative", "ping_spec", "probe_specs", "spec_for", "specs_for"]
