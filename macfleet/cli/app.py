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
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import TyperException

from macfleet import __version__
from macfleet.cli import shared
from macfleet.cli.config_file import TRUE
from macfleet.errors import EXIT_CANCELLED, EXIT_PROBLEMS, EXIT_USAGE, MacfleetError, UsageError
from macfleet.paths import state_dir
from macfleet.render import events, output

# `macfleet --help` and each group's help import no command group but the one asked for, and none of the heavy
# modules (pydantic, paramiko, ansible-runner, the flows): tests/test_cli_help.py checks it, bench/cli_help.py
# times it.
if TYPE_CHECKING:
    import click
    from pydantic import ValidationError

CONTEXT = {"help_option_names": ["-h", "--help"]}

# Groups, each a module under macfleet/cli exposing `app` (a group) or `command` (a single command).
# (name, module, what it is for)
GROUPS: list[tuple[str, str, str]] = [
    ("inventory", "macfleet.cli.inventory", "Check and show an inventory."),
    ("config", "macfleet.cli.config", "The settings in effect (config file, MACFLEET_* variables) and their source."),
    ("trust", "macfleet.cli.trust", "Record each Mac's SSH host key once you have confirmed it."),
    ("facts", "macfleet.cli.facts", "Parse macOS command outputs into facts."),
    ("topology", "macfleet.cli.topology", "Cabling check, cabling plan and picture, IP plan."),
    ("lab", "macfleet.cli.lab", "A simulated Mac cluster on Linux, to try and test macfleet."),
    ("bootstrap", "macfleet.cli.bootstrap", "Prepare every node: power, memory, OS checks, IP plan, RDMA."),
    ("doctor", "macfleet.cli.doctor", "Every health probe, each with its fix."),
    ("rollout", "macfleet.cli.rollout", "Push exo builds and model weights once, fanned out over the mesh."),
    ("exo", "macfleet.cli.exo", "Models on the mesh through exo's API: status, place, chat, stop, tunnel."),
    ("rdma", "macfleet.cli.rdma", "RDMA status, and the guided Recovery-mode steps that switch it on."),
    ("reboot", "macfleet.cli.reboot", "The coordinated whole-mesh reboot."),
    ("upgrade", "macfleet.cli.upgrade", "Bring the mesh to the inventory's macOS build, one node at a time."),
    ("unlock", "macfleet.cli.unlock", "Unlock FileVault Macs waiting at their unlock screen, over SSH."),
    ("watch", "macfleet.cli.watch", "The watcher that heals a wedged mesh."),
    ("maintenance", "macfleet.cli.maintenance", "Tell the healer to leave a mesh alone for a while (planned work)."),
    ("export", "macfleet.cli.export", "Hand the mesh to other engines: MLX's hostfile, llama.cpp's --rpc list."),
    ("bench", "macfleet.cli.bench", "Measure every Thunderbolt link: throughput each way and latency."),
]


class _LazyGroups(TyperGroup):
    """The command groups, each imported only when it runs or shows its own help. The root's help and the
    shell's completion of command names list them from GROUPS, importing none."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, _, _ in GROUPS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = next(((m, h) for name, m, h in GROUPS if name == cmd_name), None)
        if entry is None:
            return None
        module, summary = entry
        if self._listing:
            return TyperCommand(cmd_name, help=summary, short_help=summary)
        return _load_group(cmd_name, module)

    _given: frozenset[str] = frozenset()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        self._given = _root_words(args)
        return super().parse_args(ctx, args)

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        """All of the root's options for its help; for a run, only those written before the command's name:
        typer checks every option it parses (given or not) through pydantic, which `macfleet doctor --help`
        would otherwise import for options nobody gave."""
        params = shared.flags_as_flags(super().get_params(ctx))
        if self._listing:
            return params
        return [p for p in params if self._given & {*p.opts, *p.secondary_opts}]

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False


def _root_words(args: list[str]) -> frozenset[str]:
    """The option names written before the command's name: `-vv -i x --json=1 doctor` gives -v, -i, --json."""
    names = {name for name, _, _ in GROUPS}
    found: set[str] = set()
    for word in args:
        if word in names or word == "--":
            break
        if word.startswith("--"):
            found.add(word.split("=", 1)[0])
        elif word.startswith("-") and len(word) > 1:
            found.update(f"-{c}" for c in word[1:])
    return frozenset(found)


def _single_command(cli_module: Any) -> Any:
    """The function behind a group that is one command: a module's `command`, or a Typer app with only a
    callback (doctor, reboot, watch), which click would otherwise show as `COMMAND [ARGS]...`."""
    if hasattr(cli_module, "command"):
        return cli_module.command, None
    sub = cli_module.app
    callback = sub.registered_callback
    if sub.registered_commands or sub.registered_groups or callback is None or callback.callback is None:
        return None, None
    return callback.callback, sub.info.help if isinstance(sub.info.help, str) else None


@functools.cache
def _load_group(name: str, module: str) -> click.Command:
    cli_module = importlib.import_module(module)
    function, help_text = _single_command(cli_module)
    if function is not None:
        single = typer.Typer(context_settings=CONTEXT, pretty_exceptions_enable=False, add_completion=False)
        single.command(name, context_settings=CONTEXT, help=help_text)(function)
        command = typer.main.get_command(single)
    else:
        command = typer.main.get_group(cli_module.app)  # a group even with one subcommand, as add_typer made it
    command.name = name
    shared.add_shared_options(command)
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
        if output.mode.json:
            output.emit({"version": __version__})
        else:
            typer.echo(f"macfleet {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    inventory: Annotated[
        Path | None,
        typer.Option("-i", "--inventory", metavar="DIR", show_default=False, help=shared.INVENTORY_HELP),
    ] = None,
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, show_default=False, help=shared.VERBOSE_HELP)
    ] = 0,
    json_output: Annotated[bool, typer.Option("--json", help=shared.JSON_HELP)] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help=shared.NO_COLOR_HELP)] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    shared.take_globals(inventory=inventory, verbose=verbose, json_output=json_output, no_color=no_color)


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


def _is_validation_error(exc: BaseException) -> bool:
    """A pydantic ValidationError, without importing pydantic when no command did."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(exc, pydantic.ValidationError)


def _validation_error(exc: ValidationError) -> UsageError:
    lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return UsageError("invalid input: " + "; ".join(lines))


def _ignore_second_interrupt(console: bool) -> None:
    """A second Ctrl-C while exiting must not print a threading traceback."""
    if console and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _cancelled(*, console: bool) -> int:
    """Plain Ctrl-C (a change that was cut says what it had done through `Cancelled`): exit 130 at once."""
    _ignore_second_interrupt(console)
    output.info("cancelled")
    return EXIT_CANCELLED


def _json_requested(argv: list[str]) -> bool:
    """Whether --json was asked for, read before click parses anything (a usage error stops the parse before
    the option's own callback runs)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    env = os.environ.get("MACFLEET_JSON", "").strip().lower()
    return "--json" in words or env in TRUE


def _click_error(exc: TyperException) -> int:
    """A usage error found by click (unknown option, missing argument, bad value): with --json, the JSON
    error object on stdout like every other error; else click's own message."""
    if not (output.mode.json or events.stream.on):
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "macfleet"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return output.fail(UsageError(message or "no command given", hint=f"see `{where} --help`"))


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Only here do exceptions become exit codes (docs/cli.md); with --events, the
    stream's `finished` line is written here, last, whatever ended the command."""
    args = list(sys.argv[1:] if argv is None else argv)
    shared.reset()
    events.reset()
    output.mode.json = _json_requested(args)
    code = _run(args, console=argv is None)
    events.finished(code)
    sys.exit(code)


def _run(args: list[str], *, console: bool) -> int:
    try:
        shared.apply_config()
        code = app(args=args, prog_name="macfleet", standalone_mode=False)
    except MacfleetError as exc:
        if exc.exit_code == EXIT_CANCELLED:
            _ignore_second_interrupt(console)
        return output.fail(exc)
    except TyperException as exc:
        if "--events" in args:
            events.start("macfleet")  # refused before the command began: still one stream, ending in the error
        return _click_error(exc)
    except (KeyboardInterrupt, typer.Abort):
        return _cancelled(console=console)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_PROBLEMS)
    except Exception as exc:
        if _is_validation_error(exc):
            return output.fail(_validation_error(exc))  # type: ignore[arg-type]
        return _report_crash(exc)
    if code == EXIT_CANCELLED:  # typer turns Ctrl-C into exit code 130 and returns it
        return _cancelled(console=console)
    return code if isinstance(code, int) else 0
