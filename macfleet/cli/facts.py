"""`macfleet facts parse KIND FILE`: parse a saved capture of a macOS command into facts."""

from __future__ import annotations

import sys
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


# The largest output of any command we read (a system_profiler -json of a big Mac) is well under 1 MiB.
MAX_CAPTURE_BYTES = 8 << 20


def _bounded(data: bytes, where: str) -> str:
    if len(data) > MAX_CAPTURE_BYTES:
        raise UsageError(f"{where} is larger than {MAX_CAPTURE_BYTES >> 20} MiB: not the output of a command we read")
    return data.decode("utf-8", errors="replace")


def read_capture(path: Path) -> str:
    """A capture file as text (UTF-8, undecodable bytes replaced); UsageError when it cannot be read."""
    try:
        with path.open("rb") as fh:  # read with a limit: /dev/zero or a FIFO must not take all memory
            data = fh.read(MAX_CAPTURE_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    return _bounded(data, str(path))


def read_stdin() -> str:
    """Standard input as text, with the same limit; UsageError when there is none (closed, or not readable)."""
    stream = getattr(sys.stdin, "buffer", None) if sys.stdin is not None else None
    if stream is None:
        raise UsageError("no standard input to read ('-' reads the capture from stdin)")
    try:
        data = stream.read(MAX_CAPTURE_BYTES + 1)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read standard input: {e}") from None
    return _bounded(data, "standard input")


@app.command("parse")
def parse_cmd(
    kind: Annotated[str, typer.Argument(help="One of: " + ", ".join(KIND_NAMES) + ", or auto (guess).")],
    file: Annotated[Path, typer.Argument(help="The saved output of the command ('-' for stdin).")],
    json_output: JsonOpt = False,
) -> None:
    """Parse FILE as the output of KIND's command and print the facts."""
    if kind != "auto" and kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}", hint="one of: " + ", ".join((*KIND_NAMES, "auto")))
    text = read_stdin() if str(file) == "-" else read_capture(file)
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
