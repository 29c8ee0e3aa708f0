"""`macfleet facts parse KIND FILE`: parse a saved capture of a macOS command into facts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel

from macfleet.cli.options import JsonOpt
from macfleet.errors import UsageError
from macfleet.facts.registry import KIND_NAMES, KINDS, parse, parse_auto
from macfleet.render.facts import render_facts
from macfleet.render.output import emit

app = typer.Typer(no_args_is_help=True, help="Parse macOS command outputs into facts.")


class AutoParsed(BaseModel):
    """`facts parse auto`: the KIND guessed, and the facts as `facts parse KIND` would print them."""

    kind: str
    facts: dict


def read_capture(path: Path) -> str:
    """A capture file as text (UTF-8, undecodable bytes replaced); UsageError when it cannot be read."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    return data.decode("utf-8", errors="replace")


@app.command("parse")
def parse_cmd(
    kind: Annotated[str, typer.Argument(help="One of: " + ", ".join(KIND_NAMES) + ", or auto (guess).")],
    file: Annotated[Path, typer.Argument(help="The saved output of the command ('-' for stdin).")],
    json_output: JsonOpt = False,
) -> None:
    """Parse FILE as the output of KIND's command and print the facts."""
    if kind != "auto" and kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}", hint="one of: " + ", ".join((*KIND_NAMES, "auto")))
    if str(file) == "-":
        import sys

        text = sys.stdin.read()
    else:
        text = read_capture(file)
    if kind == "auto":
        found, facts = parse_auto(text)
        result = AutoParsed(kind=found, facts=facts.model_dump(mode="json"))
        emit(result, human=lambda r: _auto_human(found, facts))
        return
    facts = parse(kind, text)
    emit(facts, human=render_facts)


def _auto_human(kind: str, facts: BaseModel):
    from rich.console import Group
    from rich.text import Text

    return Group(Text(f"kind: {kind} ({KINDS[kind].command})", style="bold"), render_facts(facts))


@app.command("kinds")
def kinds_cmd(json_output: JsonOpt = False) -> None:
    """List the KINDs and the command each stands for."""

    class Kinds(BaseModel):
        kinds: dict[str, str]

    result = Kinds(kinds={k: s.command for k, s in KINDS.items()})
    emit(result, human=lambda r: "\n".join(f"{k:15} {c}" for k, c in r.kinds.items()))
