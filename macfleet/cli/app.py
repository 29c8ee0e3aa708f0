"""The root command: assembles the groups and is the only place that turns errors into exit codes."""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import threading
import traceback
from datetime import UTC, datetime
from typing import Annotated

import click
import typer
from pydantic import ValidationError
from typer.core import TyperGroup
from typer.exceptions import TyperException

from macfleet import __version__
from macfleet.errors import EXIT_CANCELLED, EXIT_PROBLEMS, EXIT_USAGE, MacfleetError, UsageError
from macfleet.paths import state_dir
from macfleet.render import output

CONTEXT = {"help_option_names": ["-h", "--help"]}

# Groups, each a module under macfleet/cli exposing `app` (a group) or `command` (a single command).
# (name, module, what it is for)
GROUPS: list[tuple[str, str, str]] = [
    ("inventory", "macfleet.cli.inventory", "Check and show an inventory."),
    ("trust", "macfleet.cli.trust", "Record each Mac's SSH host key once you have confirmed it."),
    ("facts", "macfleet.cli.facts", "Parse macOS command outputs into facts."),
    ("topology", "macfleet.cli.topology", "Cabling check, cabling plan and picture, IP plan."),
    ("lab", "macfleet.cli.lab", "A simulated Mac cluster on Linux, to try and test macfleet."),
    ("bootstrap", "macfleet.cli.bootstrap", "Prepare every node: power, memory, OS checks, IP plan, RDMA."),
    ("doctor", "macfleet.cli.doctor", "Every health probe, each with its fix."),
    ("rollout", "macfleet.cli.rollout", "Push exo builds and model weights once, fanned out over the mesh."),
    ("rdma", "macfleet.cli.rdma", "RDMA status, and the guided Recovery-mode steps that switch it on."),
    ("reboot", "macfleet.cli.reboot", "The coordinated whole-mesh reboot."),
    ("upgrade", "macfleet.cli.upgrade", "Bring the mesh to the inventory's macOS build, one node at a time."),
    ("unlock", "macfleet.cli.unlock", "Unlock FileVault Macs waiting at their unlock screen, over SSH."),
    ("watch", "macfleet.cli.watch", "The watcher that heals a wedged mesh."),
    ("export", "macfleet.cli.export", "Hand the mesh to other engines: MLX's hostfile, llama.cpp's --rpc list."),
    ("bench", "macfleet.cli.bench", "Measure every Thunderbolt link: throughput each way and latency."),
]


class _LazyGroups(TyperGroup):
    """The command groups, each imported only when it runs (or when --help lists it): a command pays at start-up
    for its own modules, not for every other command's."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, _, _ in GROUPS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = next((m for name, m, _ in GROUPS if name == cmd_name), None)
        return None if module is None else _load_group(cmd_name, module)


@functools.cache
def _load_group(name: str, module: str) -> click.Command:
    cli_module = importlib.import_module(module)
    if hasattr(cli_module, "command"):
        single = typer.Typer(context_settings=CONTEXT, pretty_exceptions_enable=False)
        single.command(name, context_settings=CONTEXT)(cli_module.command)
        command = typer.main.get_command(single)
    else:
        command = typer.main.get_group(cli_module.app)  # a group even with one subcommand, as add_typer made it
    command.name = name
    return command


app = typer.Typer(
    name="macfleet",
    cls=_LazyGroups,
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


def _ignore_second_interrupt(console: bool) -> None:
    """A second Ctrl-C while exiting must not print a threading traceback."""
    if console and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _cancelled(*, console: bool) -> None:
    """Plain Ctrl-C (a change that was cut says what it had done through `Cancelled`): exit 130 at once."""
    _ignore_second_interrupt(console)
    output.info("cancelled")
    sys.exit(EXIT_CANCELLED)


def _json_requested(argv: list[str]) -> bool:
    """Whether --json was asked for, read before click parses anything (a usage error stops the parse before
    the option's own callback runs)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    env = os.environ.get("MACFLEET_JSON", "").strip().lower()
    return "--json" in words or env in ("1", "true", "yes", "on")


def _click_error(exc: TyperException) -> int:
    """A usage error found by click (unknown option, missing argument, bad value): with --json, the JSON
    error object on stdout like every other error; else click's own message."""
    if not output.mode.json:
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "macfleet"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return output.fail(UsageError(message or "no command given", hint=f"see `{where} --help`"))


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Only here do exceptions become exit codes (docs/cli.md)."""
    args = list(sys.argv[1:] if argv is None else argv)
    output.mode.json = _json_requested(args)
    output.mode.verbose = 0
    try:
        code = app(args=args, prog_name="macfleet", standalone_mode=False)
    except MacfleetError as exc:
        if exc.exit_code == EXIT_CANCELLED:
            _ignore_second_interrupt(argv is None)
        sys.exit(output.fail(exc))
    except ValidationError as exc:
        sys.exit(output.fail(_validation_error(exc)))
    except TyperException as exc:
        sys.exit(_click_error(exc))
    except (KeyboardInterrupt, typer.Abort):
        _cancelled(console=argv is None)
    except SystemExit:
        raise
    except Exception as exc:
        sys.exit(_report_crash(exc))
    if code == EXIT_CANCELLED:  # typer turns Ctrl-C into exit code 130 and returns it
        _cancelled(console=argv is None)
    sys.exit(code if isinstance(code, int) else 0)
