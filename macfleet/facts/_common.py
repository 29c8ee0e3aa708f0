"""Shared helpers for the facts parsers: the model base, text clean-up, shell-prompt and transcript handling.

Pure code, no I/O. Imports nothing from macfleet but `macfleet.errors`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from macfleet.errors import FactsParseError
from macfleet.facts.kinds import KIND_COMMANDS


class Facts(BaseModel):
    """Base of every facts model: frozen, unknown keys refused."""

    # Each model's validator is built when first used, not at import: a command uses a few of the facts models,
    # and building all of them was a tenth of doctor's CPU.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


def command_line(kind: str) -> str:
    """The command KIND's output comes from, as the user would type it (the KIND itself if it has none in
    `facts/kinds.py`): parse errors name it."""
    known = KIND_COMMANDS.get(kind)
    return known.command if known is not None else kind


# The programs whose typed command lines mark the start of an output in a pasted terminal transcript.
_COMMAND_WORDS = (
    "system_profiler", "networksetup", "ifconfig", "ibv_devices", "ibv_devinfo", "rdma_ctl", "nvram", "sw_vers",
    "sysctl", "pmset", "fdesetup", "csrutil", "systemsetup", "netstat",
)


def kind_of_command(command: str) -> str | None:
    """The KIND a typed command line stands for (`sudo ` and paths ignored), or None."""
    words = command.split()
    while words and words[0] in ("sudo", "/usr/bin/sudo"):
        words = words[1:]
    if not words:
        return None
    prog = words[0].rsplit("/", 1)[-1]
    args = " ".join(words[1:])
    if prog == "system_profiler":
        if "SPThunderboltDataType" in args:
            return "thunderbolt"
        if "SPHardwareDataType" in args:
            return "hardware"
        return None
    if prog == "networksetup":
        for flag, kind in (
            ("-listallhardwareports", "hardware-ports"),
            ("-listnetworkserviceorder", "service-order"),
            ("-listallnetworkservices", "services"),
            ("-getinfo", "getinfo"),
        ):
            if flag in args:
                return kind
        return None
    if prog == "systemsetup":
        return "remote-login" if "remotelogin" in args.lower() else None
    if prog == "netstat":
        return "netstat-routes" if "-r" in args else "netstat-listen" if re.search(r"(?:^|\s)-[a-z]*[anv]", args) \
            else None
    simple = {
        "ifconfig": "ifconfig", "ibv_devices": "ibv-devices", "ibv_devinfo": "ibv-devinfo", "rdma_ctl": "rdma-ctl",
        "nvram": "nvram", "sw_vers": "sw-vers", "sysctl": "sysctl", "pmset": "pmset", "fdesetup": "fdesetup",
        "csrutil": "csrutil",
    }
    return simple.get(prog)


# "~ % ibv_devices", "% ifconfig en2", "$ rdma_ctl status", "user@host ~ % sudo sysctl ...", or the bare
# command itself ("ibv_devices", "rdma_ctl status") as pasted above its output.
_PROMPT = re.compile(r"^\s*(?:[^\s%$#>]*(?:\s+[^\s%$#>]+)?\s*[%$#>]\s+)?(?P<cmd>\S.*?)\s*$")


def prompt_command(line: str) -> str | None:
    """If `line` is a typed command (with or without a shell prompt) of a known tool, the command; else None."""
    m = _PROMPT.match(line)
    if not m:
        return None
    cmd = m.group("cmd")
    first = cmd.split()[0] if cmd.split() else ""
    if first in ("sudo", "/usr/bin/sudo") and len(cmd.split()) > 1:
        first = cmd.split()[1]
    first = first.rsplit("/", 1)[-1]
    if first not in _COMMAND_WORDS:
        return None
    # A bare line is only a command if it has no output-looking punctuation ("ifconfig: ..." is not one).
    if ":" in cmd.split()[0]:
        return None
    return cmd


Line = tuple[int, str]  # (1-based line number in the original text, the line without its newline)


def normalise(text: str) -> str:
    """Unify newlines and drop a byte-order mark; nothing else (tabs and spacing are the parsers' business)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


@dataclass
class Section:
    command: str | None
    kind: str | None
    lines: list[Line] = field(default_factory=list)


def split_transcript(text: str) -> list[Section]:
    """Split a pasted terminal transcript at its command lines. Text without any gives one section."""
    sections: list[Section] = [Section(None, None)]
    for n, raw in enumerate(normalise(text).split("\n"), start=1):
        cmd = prompt_command(raw)
        if cmd is not None:
            sections.append(Section(cmd, kind_of_command(cmd)))
        else:
            sections[-1].lines.append((n, raw))
    if len(sections) > 1 and not any(t.strip() for _, t in sections[0].lines):
        sections = sections[1:]
    return sections


# C0 controls but tab, newline, CR and form feed; DEL; and U+FFFD, which is what undecodable bytes became when
# the capture was read. A few can be real (a dock that names itself with an escape sequence: the renderers
# neutralise those); a NUL or more than 1 % of them is binary data, never the text output of a command.
_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd]")


def _is_binary(text: str) -> bool:
    if "\x00" in text:
        return True
    limit = max(8, len(text) // 100)
    return sum(1 for _ in zip(range(limit + 1), _CONTROL.finditer(text), strict=False)) > limit


def lines_for(kind: str, text: str) -> list[Line]:
    """The lines of `text` that are the output of KIND's command: the whole text, less a typed command line
    above it, or the matching section of a transcript. Raises FactsParseError when the transcript holds
    only other commands."""
    if not isinstance(text, str):
        raise FactsParseError(command_line(kind), "text", found=type(text).__name__)
    if _is_binary(text):
        m = _CONTROL.search(text)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        raise FactsParseError(command_line(kind), "text (no command we read prints binary data)", line=line,
                              found=f"character {ord(m.group()):#04x}" if m else None)
    sections = split_transcript(text)
    for s in sections:
        if s.kind == kind:
            return s.lines
    for s in sections:
        if s.command is None:
            return s.lines
    first = sections[0]
    raise FactsParseError(
        command_line(kind),
        f"the output of `{command_line(kind)}`",
        line=(first.lines[0][0] - 1) if first.lines else None,
        found=first.command,
    )


def nonblank(lines: list[Line]) -> list[Line]:
    return [(n, t) for n, t in lines if t.strip()]


def fail(kind: str, expected: str, line: int | None = None, found: str | None = None) -> FactsParseError:
    """Build (not raise) the FactsParseError for KIND, shortening what was found."""
    if found is not None and len(found) > 120:
        found = found[:117] + "..."
    return FactsParseError(command_line(kind), expected, line=line, found=found)


def is_elision(line: str) -> bool:
    """`...` / `[...]` / `…` lines that authors put in where they cut output."""
    return line.strip() in ("...", "[...]", "…", "[…]")


_SPEED = re.compile(r"^\s*(?P<upto>Up to\s+)?(?P<n>\d{1,6}(?:\.\d{1,6})?)\s*Gb/s(?:\s+x\d+)?\s*$", re.IGNORECASE)


def parse_speed(value: str | None) -> tuple[float | None, bool] | None:
    """'80 Gb/s' -> (80.0, False); 'Up to 120 Gb/s x1' -> (120.0, True); unknown -> None."""
    if value is None:
        return None
    m = _SPEED.match(value)
    if not m:
        return None
    return float(m.group("n")), bool(m.group("upto"))


def number(value: float) -> float | int:
    """80.0 -> 80 (JSON stays tidy); 2.5 stays 2.5."""
    return int(value) if float(value).is_integer() else value


M = TypeVar("M", bound=BaseModel)


def guarded(kind: str) -> Callable[[Callable[[str], M]], Callable[[str], M]]:
    """Last line of defence for a parser: a builtin error that slipped through (a bug, or input no test
    imagined, like a 5000-digit number) still leaves as FactsParseError naming the command."""

    def wrap(fn: Callable[[str], M]) -> Callable[[str], M]:
        @functools.wraps(fn)
        def inner(text: str) -> M:
            try:
                return fn(text)
            except FactsParseError:
                raise
            except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as e:
                raise fail(kind, "output this parser understands", found=f"{type(e).__name__}: {e}") from e

        return inner

    return wrap
