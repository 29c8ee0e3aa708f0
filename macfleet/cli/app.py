"""The root command: assembles the groups and is the only place that turns errors into exit codes."""

from __future__ import annotations

import importlib
import signal
import sys
import threading
import traceback
from datetime import UTC, datetime
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.text import Text

from macfleet import __version__
from macfleet.errors import EXIT_CANCELLED, EXIT_PROBLEMS, MacfleetError, NotBuiltYet, UsageError
from macfleet.paths import state_dir
from macfleet.render import output

CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="macfleet",
    help="Provision and run Thunderbolt-mesh Mac clusters for exo and RDMA over Thunderbolt.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings=CONTEXT,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"macfleet {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="Say more on stderr.")] = 0,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    output.mode.verbose = verbose


# Groups, each a module under macfleet/cli exposing `app`. (name, module, help for not-yet-built)
GROUPS: list[tuple[str, str, str]] = [
    ("inventory", "macfleet.cli.inventory", "Check and show an inventory."),
    ("facts", "macfleet.cli.facts", "Parse macOS command outputs into facts."),
    ("topology", "macfleet.cli.topology", "Cabling check, cabling plan and picture, IP plan."),
    ("lab", "macfleet.cli.lab", "A simulated Mac cluster on Linux, to try and test macfleet."),
    ("bootstrap", "macfleet.cli.bootstrap", "Prepare every node: power, memory, OS checks, IP plan, RDMA."),
    ("doctor", "macfleet.cli.doctor", "Every health probe, each with its fix."),
    ("rollout", "macfleet.cli.rollout", "Push exo builds and model weights once, fanned out over the mesh."),
    ("rdma", "macfleet.cli.rdma", "RDMA status, and the guided Recovery-mode steps that switch it on."),
    ("reboot", "macfleet.cli.reboot", "The coordinated whole-mesh reboot."),
    ("watch", "macfleet.cli.watch", "The watcher that heals a wedged mesh."),
]


def _add_not_built(name: str, help_text: str) -> None:
    @app.command(
        name,
        help=f"{help_text} [dim](not built yet)[/dim]",
        context_settings={**CONTEXT, "allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def _placeholder(ctx: typer.Context) -> None:
        raise NotBuiltYet(name)


for _name, _module, _help in GROUPS:
    try:
        _group = importlib.import_module(_module).app
    except ModuleNotFoundError as exc:
        if exc.name != _module:
            raise
        _add_not_built(_name, _help)
    else:
        app.add_typer(_group, name=_name)



def _report_crash(exc: BaseException) -> int:
    path = state_dir() / "last-error.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as fh:
            fh.write(f"macfleet {__version__} at {datetime.now(UTC).isoformat()}\n")
            fh.write("".join(traceback.format_exception(exc)))
        where = f"; the full traceback is in {path}"
    except OSError:
        where = ""
    output.fail(MacfleetError(f"internal error: {type(exc).__name__}: {exc}{where}", hint="please report it"))
    return EXIT_PROBLEMS


def _validation_error(exc: ValidationError) -> UsageError:
    lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return UsageError("invalid input: " + "; ".join(lines))


def _interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, KeyboardInterrupt):
        seen = seen.__cause__ or seen.__context__
    return seen


def _cancelled(interrupt: KeyboardInterrupt, *, console: bool) -> None:
    """One line saying what was done (when the cancelled step said), then exit 130 without waiting."""
    if console and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while exiting: no traceback
    output.info(Text(f"cancelled: {interrupt}" if str(interrupt) else "cancelled"))
    sys.exit(EXIT_CANCELLED)


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Only here do exceptions become exit codes (docs/cli.md)."""
    output.mode.json = False
    output.mode.verbose = 0
    try:
        app(args=argv, prog_name="macfleet", standalone_mode=True)
    except MacfleetError as exc:
        sys.exit(output.fail(exc))
    except ValidationError as exc:
        sys.exit(output.fail(_validation_error(exc)))
    except KeyboardInterrupt as exc:
        _cancelled(exc, console=argv is None)
    except SystemExit as exc:
        # typer turns Ctrl-C into exit 130; the KeyboardInterrupt, with what was done, is in the chain.
        interrupt = _interrupt_in(exc) if exc.code == EXIT_CANCELLED else None
        if interrupt is not None:
            _cancelled(interrupt, console=argv is None)
        raise
    except Exception as exc:
        sys.exit(_report_crash(exc))
