"""Flows: collect → facts → judge, composed once so the CLI, the watcher and the benchmarks share them.

A flow does I/O only through `collect` (and `act` where it changes nodes) and decides nothing itself;
it never renders. The CLI modules stay thin: options in, a flow, a renderer out.
"""

from collections.abc import Callable

Say = Callable[[str], None]  # how a flow tells its caller what it is doing (the CLI's stderr, the healer's log)


def quiet(_: str) -> None:
    """A `say` that says nothing (a flow called without a console)."""
