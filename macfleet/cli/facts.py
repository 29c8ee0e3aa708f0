"""`macfleet facts parse KIND FILE`: parse a saved capture of a macOS command into facts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from macfleet.cli.options import JsonOpt
from macfleet.render.output import emit

if TYPE_CHECKING:  # the parsers and their models load when a command runs, not for --help
    from pydantic import BaseModel

app = typer.Typer(no_args_is_help=True, help="Parse macOS command outputs into facts.")


@app.command("parse")
def parse_cmd(
    kind: Annotated[str, typer.Argument(
        help="What FILE is the output of: a KIND from `macfleet facts kinds`, or auto (guess).")],
    file: Annotated[Path, typer.Argument(help="The saved output of the command ('-' for stdin).")],
    json_output: JsonOpt = False,
) -> None:
    """Parse FILE as the output of KIND's command and print the facts."""
    from macfleet.flow.facts import AUTO, AutoParsed, kind_commands, parse_capture
    from macfleet.render.facts import render_facts

    found, facts = parse_capture(kind, file)
    if kind == AUTO:
        result = AutoParsed(kind=found, facts=facts.model_dump(mode="json"))
        emit(result, human=lambda r: _auto_human(found, facts))
        return
    emit(facts, human=lambda f: render_facts(f, title=kind_commands()[kind]))


def _auto_human(kind: str, facts: BaseModel):
    from rich.console import Group
    from rich.text import Text

    from macfleet.flow.facts import kind_commands
    from macfleet.render.facts import render_facts

    return Group(Text(f"kind: {kind} ({kind_commands()[kind]})", style="bold"),
                 render_facts(facts, title=kind_commands()[kind]))


@app.command("kinds")
def kinds_cmd(json_output: JsonOpt = False) -> None:
    """List the KINDs and the command each stands for."""
    from pydantic import BaseModel

    from macfleet.flow.facts import kind_commands

    class Kinds(BaseModel):
        kinds: dict[str, str]

    result = Kinds(kinds=kind_commands())
    emit(result, human=lambda r: "\n".join(f"{k:15} {c}" for k, c in r.kinds.items()))
