"""One SSH session per node, kept open across probes and reconnected with backoff (`collect.kept`); a probe
runs doctor's commands over them in parallel and hands back what `collect.gather` would (a `Gathered`).
A reboot watch starts runs over the same sessions."""

from __future__ import annotations

from macfleet.collect.commands import CommandSpec
from macfleet.collect.gather import Gathered
from macfleet.collect.kept import BACKOFF_FIRST_S, BACKOFF_MAX_S, KeptSession, NodeSessions

__all__ = ["BACKOFF_FIRST_S", "BACKOFF_MAX_S", "KeptSession", "Prober"]


class Prober(NodeSessions):
    def probe(self, specs: tuple[CommandSpec, ...], deadline_s: float, command_timeout_s: float) -> Gathered:
        """Every spec on every node; a command gets min(its own timeout, `command_timeout_s`), so a hung
        `ibv_devinfo` (a wedge) costs one command timeout per probe, not more."""
        return self.gather(specs, deadline_s, cap_s=command_timeout_s)
