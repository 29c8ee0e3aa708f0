"""The options every command accepts, before or after its name (`macfleet --json inventory check` and
`macfleet inventory check --json`), defined once: docs/cli.md "Options every command takes".

Light on purpose: `macfleet --help` imports this and nothing heavy (tests/test_cli_help.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from macfleet.paths import CLUSTER_STATE_ENV
from macfleet.render import output

if TYPE_CHECKING:
    import click

INVENTORY_HELP = "Inventory directory (default: $MACFLEET_INVENTORY, else ./inventories/default)."
VERBOSE_HELP = "Say more on stderr; repeat for more (-vv). Handed to ansible-playbook as its -v level."
JSON_HELP = "Print the result as JSON on stdout (messages go to stderr). Also $MACFLEET_JSON=1."
NO_COLOR_HELP = "No colour in the output (as NO_COLOR=1 does)."
INVENTORY_ENV = "MACFLEET_INVENTORY"
DEFAULT_INVENTORY = Path("inventories/default")


class _Globals:
    inventory: Path | None = None  # -i given before the command's name
    config_inventory: Path | None = None  # `inventory` in the config file


state = _Globals()


def reset() -> None:
    state.inventory = None
    state.config_inventory = None
    output.mode.json = False
    output.mode.verbose = 0
    output.mode.no_color = False
    _push_verbosity()


def apply_config() -> None:
    """The config file's preferences (cli/config_file.py), under the MACFLEET_* variables and the flags."""
    from macfleet.cli.config_file import config_path, load_config

    if not config_path().is_file():
        return
    values = load_config().values
    state.config_inventory = values.get("inventory")  # type: ignore[assignment]
    if values.get("json") and not os.environ.get("MACFLEET_JSON", "").strip():
        output.mode.json = True
    if values.get("color") is False:
        output.mode.no_color = True
    if "cluster_state_dir" in values and not os.environ.get(CLUSTER_STATE_ENV, "").strip():
        os.environ[CLUSTER_STATE_ENV] = str(values["cluster_state_dir"])  # read by macfleet.paths, and children


def _push_verbosity() -> None:
    if output.mode.verbose or "macfleet.act.ansible" in sys.modules:
        from macfleet.flow.settings import set_ansible_verbosity

        set_ansible_verbosity(output.mode.verbose)


def take_globals(*, inventory: Path | None, verbose: int, json_output: bool, no_color: bool) -> None:
    """The root's options (before the command's name)."""
    state.inventory = inventory
    _add_verbose(verbose)
    output.set_json_mode(json_output)
    _set_no_color(no_color)


def _add_verbose(count: int) -> None:
    """-v counts wherever it is written: `macfleet -v doctor -v` is -vv."""
    if count:
        output.mode.verbose += count
        _push_verbosity()


def _set_no_color(value: bool) -> None:
    if value:
        output.mode.no_color = True


def inventory_path(value: Path | None) -> Path:
    """The inventory a command reads: its own -i, else the -i before its name, else $MACFLEET_INVENTORY, else
    the config file's `inventory`, else ./inventories/default."""
    if value is not None:
        return value
    if state.inventory is not None:
        return state.inventory
    env = os.environ.get(INVENTORY_ENV, "").strip()
    if env:
        return Path(env)
    return state.config_inventory if state.config_inventory is not None else DEFAULT_INVENTORY


# -------------------------------------------------------------------------------------------------------------
# The shared options added to every command that lacks them, as typer builds them (one template command).
# -------------------------------------------------------------------------------------------------------------


def _verbose_cb(value: int) -> int:
    _add_verbose(value or 0)
    return value


def _json_cb(value: bool) -> bool:
    return output.set_json_mode(value)


def _no_json_cb(ctx: typer.Context, value: bool) -> bool:
    if value:
        raise typer.BadParameter(f"`{ctx.command_path}` has no JSON output yet")
    return value


def _no_color_cb(value: bool) -> bool:
    _set_no_color(value)
    return value


def _template(
    verbose: Annotated[
        int, typer.Option(
            "-v", "--verbose", count=True, show_default=False, callback=_verbose_cb, help=VERBOSE_HELP
        )
    ] = 0,
    json_output: Annotated[
        bool, typer.Option("--json", callback=_json_cb, is_eager=True, help=JSON_HELP)
    ] = False,
    no_color: Annotated[bool, typer.Option("--no-color", callback=_no_color_cb, help=NO_COLOR_HELP)] = False,
) -> None:
    """Holds the shared options."""


def _no_json_template(
    json_output: Annotated[bool, typer.Option("--json", callback=_no_json_cb, help="Refused: no JSON output yet.")]
    = False,
) -> None:
    """Holds --json for a command whose output is not JSON."""


def _params_of(function: object) -> list[click.Parameter]:
    holder = typer.Typer(add_completion=False)
    holder.command()(function)
    params = list(typer.main.get_command(holder).params)
    for param in params:
        param.expose_value = False
    return params


def flags_as_flags(params: list[click.Parameter]) -> list[click.Parameter]:
    """A flag or a count takes no value: its help shows none (typer would print `--check <bool>`)."""
    for param in params:
        if (getattr(param, "is_flag", False) or getattr(param, "count", False)) and param.metavar is None:
            param.metavar = ""
    return params


def _with_flags_as_flags(command: click.Command) -> None:
    own = command.get_params
    command.get_params = lambda ctx: flags_as_flags(own(ctx))  # type: ignore[method-assign]  # --help's too


def add_shared_options(command: click.Command) -> None:
    """Give every command under `command` the shared options it lacks (-v, --json, --no-color; --json refused
    where the command prints no JSON), and print flags as flags."""
    shared = _params_of(_template)
    no_json = _params_of(_no_json_template)
    _with_flags_as_flags(command)
    for _, leaf in walk(command):
        have = {opt for param in leaf.params for opt in param.opts}
        if "--json" not in have:  # a live stream (watch, topology watch), a file, a shell: --json is refused
            leaf.params.extend(no_json)
            have.add("--json")
        leaf.params.extend(p for p in shared if not have & set(p.opts))
        if leaf is not command:
            _with_flags_as_flags(leaf)


class lazy_module:
    """A module imported at its first attribute read: a command group's flows load when one of its commands
    runs, not for its --help."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> object:
        import importlib

        return getattr(importlib.import_module(self._name), attr)


def walk(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every runnable command under `command`, with its words (for docs and tests)."""
    subs = getattr(command, "commands", None)
    if not subs:
        return [(path, command)]
    return [found for name, sub in subs.items() for found in walk(sub, (*path, name))]

