"""Flows: collect → facts → judge, composed once so the CLI, the watcher and the benchmarks share them.

A flow does I/O only through `collect` (and `act` where it changes nodes) and decides nothing itself;
it never renders. The CLI modules stay thin: options in, a flow, a renderer out.
"""

from collections.abc import Callable

Say = Callable[[str], None]  # how a flow tells its caller what it is doing (the CLI's stderr, the healer's log)


def quiet(_: str) -> None:
    """A `say` that says nothing (a flow called without a console)."""


def model_dir(model: str) -> str:
    """exo's directory name for the model id ORG/NAME (`rollout model`, `exo place|chat`); bad input (exit 2)
    naming what is expected otherwise."""
    from macfleet.errors import UsageError
    from macfleet.judge.rollout import model_dir_name

    try:
        return model_dir_name(model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
