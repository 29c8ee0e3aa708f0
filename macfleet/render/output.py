"""The single exit path for results and errors.

Data goes to stdout (JSON with --json, else a rich rendering); messages go to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from macfleet.errors import MacfleetError
from macfleet.render import events
from macfleet.render.text import text

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console, RenderableType
    from rich.text import Text

# `console` (stdout) and `err_console` (stderr) are made on first use (PEP 562: `output.console` and
# `from macfleet.render.output import err_console` both come through `__getattr__`): rich's Console costs
# about 0.05 s of CPU to import, and doctor dials its Macs before it prints anything.


def _console(stderr: bool) -> Console:
    from rich.console import Console

    # NO_COLOR (https://no-color.org) is honoured by rich itself; CI gets no animations.
    return Console(stderr=stderr, highlight=False, soft_wrap=False, no_color=True if mode.no_color else None)


def _named(name: str) -> Console:
    """The console called `name`, made the first time it is asked for and kept as the module's attribute."""
    found = globals().get(name)
    if found is None:
        found = globals()[name] = _console(stderr=name == "err_console")
    return found


def __getattr__(name: str) -> Console:
    if name in ("console", "err_console"):
        return _named(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Mode:
    json = False
    verbose = 0
    no_color = False  # --no-color


mode = _Mode()


def set_json_mode(value: bool) -> bool:
    if value:
        mode.json = True
    return value


def is_ci() -> bool:
    return bool(os.environ.get("CI"))


def to_jsonable(result: BaseModel | dict[str, Any] | list[Any]) -> Any:
    # pydantic is not imported here: `macfleet --help` must not pay for it (a result that is a model came with it).
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(result, pydantic.BaseModel):
        return result.model_dump(mode="json")
    return result


def emit(
    result: BaseModel | dict[str, Any],
    *,
    json_mode: bool | None = None,
    human: Callable[[Any], RenderableType | str | None] | None = None,
    exit_code: int = 0,
) -> None:
    """Print a command's result, then exit with `exit_code` when it is not 0."""
    as_json = mode.json if json_mode is None else json_mode
    if events.stream.on:  # stdout is the event stream: the result goes in its `finished` line
        events.result(to_jsonable(result))
    elif as_json:
        sys.stdout.write(json.dumps(to_jsonable(result), indent=2, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    elif human is not None:
        rendered = human(result)
        if isinstance(rendered, str):
            rendered = text(rendered)  # a plain string from a renderer is data, not markup
        if rendered is not None:
            _named("console").print(rendered)
    else:
        _named("console").print_json(json.dumps(to_jsonable(result)))
    if exit_code:
        raise typer.Exit(exit_code)


def info(message: str | Text) -> None:
    """A human message (progress, notes); always on stderr so stdout stays data. A str may carry deliberate
    markup: put any data inside it through `render.text.markup()`."""
    _named("err_console").print(message, soft_wrap=True)
    if events.stream.on:
        events.progress(_plain(message))


def _plain(message: str | Text) -> str:
    from rich.errors import MarkupError
    from rich.text import Text

    if isinstance(message, Text):
        return message.plain
    try:
        return Text.from_markup(message).plain
    except MarkupError:
        return message


def verbose(message: str) -> None:
    if mode.verbose:
        _named("err_console").print(text(message, style="dim"))


def fail(error: MacfleetError) -> int:
    """Report an expected error; returns its exit code."""
    payload = {
        "error": {
            "code": error.code,
            "message": error.message,
            "hint": error.hint,
            "details": error.details,
        }
    }
    if events.stream.on:
        events.error(json.loads(json.dumps(payload["error"], default=str)))
    elif mode.json:
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    lines = error.lines()
    err_console = _named("err_console")
    err_console.print(text(f"error: {lines[0]}", style="bold red"), soft_wrap=True)
    for line in lines[1:]:
        err_console.print(text(f"  {line}"), soft_wrap=True)
    if error.hint:
        err_console.print(text(f"hint: {error.hint}", style="yellow"), soft_wrap=True)
    return error.exit_code
