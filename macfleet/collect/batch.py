"""A node's commands in ONE remote shell instead of one SSH channel each.

The commands run a few at a time in the background of a POSIX `/bin/sh` (macOS ships bash 3.2 as sh; nothing
else is assumed: `mktemp`, `cat`, `rm` and shell builtins), each one's stdout and stderr into files of its own.
The shell says when each starts (`MARK index -`) and, as each ends, prints it framed: a header line
`MARK index rc`, its stdout, `\\nMARK\\n`, its stderr, `\\nMARK\\n`. MARK is random for every run, so no output
can end a frame by chance. The controller keeps each command's own timeout from its start (macOS has no
timeout(1)): a command whose frame has not come by then is recorded as timed out, alone.

Why: every channel costs the Mac an sshd session and a login shell, and the controller a channel round trip;
a hand-written parallel-ssh script runs all its commands in one shell, and so do we now.

Pure code: this module builds the script and cuts frames out of the bytes read; `collect.ssh` moves them.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from macfleet.collect.commands import CommandSpec

# The script's own exit status when it cannot make its directory (mktemp prints why on stderr).
NO_TMPDIR_EXIT = 97
# Commands running at once on a node: as many as the channels the one-channel-per-command collector kept open
# (under sshd's MaxSessions 10). More would not be faster on a Mac, and on the lab's 2 cores they would only
# queue, eating into each other's timeouts.
LANES = 8


def new_mark() -> str:
    return "MACFLEET-" + secrets.token_hex(16)


def batch_script(specs: Sequence[CommandSpec], mark: str, lanes: int = LANES) -> str:
    """The /bin/sh script that runs `specs` (each known by its place in `specs`), `lanes` at a time.

    Each lane takes the next command nobody has taken (a claim file made with noclobber: the shell opens it
    O_EXCL, so exactly one lane wins), says `i -` when it starts it and `i rc` when it ends; a lane stuck in a
    hung command holds up only that command. The reader prints each start as `MARK i -` and each end as a frame."""
    cases = "\n".join(f"{i}) {s.command_line}\n;;" for i, s in enumerate(specs))
    indices = " ".join(str(i) for i in range(len(specs)))
    return (
        f"M={shlex.quote(mark)}\n"
        f'd=$(mktemp -d "${{TMPDIR:-/tmp}}/macfleet.XXXXXX") || exit {NO_TMPDIR_EXIT}\n'
        'printf \'\\n%s\\n\' "$M" >"$d/s"\n'
        f"job() {{\ncase $1 in\n{cases}\nesac\n}}\n"
        f"lane() {{\nset -C\nfor i in {indices}; do\n"
        '  { true >"$d/c$i"; } 2>/dev/null || continue\n'
        '  echo "$i -"\n'
        '  { job "$i"\n  } >"$d/$i.o" 2>"$d/$i.e" </dev/null\n'
        '  echo "$i $?"\n'
        "done\n}\n"
        "{\n" + "lane &\n" * max(1, min(lanes, len(specs))) + "wait\n} | while read -r i r; do\n"
        '  printf \'%s %s %s\\n\' "$M" "$i" "$r"\n'
        '  [ "$r" = - ] || cat "$d/$i.o" "$d/s" "$d/$i.e" "$d/s"\n'
        "done\n"
        'rm -rf "$d"\n'
    )


def remote_command(script: str) -> str:
    """What the login shell (zsh on a Mac, whatever the user chose elsewhere) is asked to run."""
    return f"/bin/sh -c {shlex.quote(script)}"


@dataclass(frozen=True)
class Frame:
    """A command's end (its exit status and outputs), or its start (`rc` None)."""

    index: int
    rc: int | None
    stdout: bytes = b""
    stderr: bytes = b""


class FrameReader:
    """Cuts frames out of the script's stdout as it arrives, however it is split."""

    def __init__(self, mark: str, count: int):
        self._header = re.compile(rb"(" + re.escape(mark.encode()) + rb") (\d+) (-|\d+)\n")
        self._sep = b"\n" + mark.encode() + b"\n"
        self._count = count
        self._buf = bytearray()
        # where to look for the next separator (never rescan what was searched), and where the pending frame's
        # stdout ends once that is known
        self._scan = 0
        self._out_end: int | None = None
        self.junk = bytearray()  # anything the script printed outside a frame (nothing, unless it is broken)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames = []
        while (frame := self._next()) is not None:
            frames.append(frame)
        return frames

    def _next(self) -> Frame | None:
        m = self._header.search(self._buf)
        if m is None:
            return None
        if m.start():
            self.junk += self._buf[: m.start()]
            del self._buf[: m.start()]
            self._scan, self._out_end = 0, None
            m = self._header.match(self._buf)
            assert m is not None
        body, index, rc_text = m.end(), int(m.group(2)), m.group(3)  # read before the buffer changes under m
        if rc_text == b"-":
            del self._buf[:body]
            self._scan, self._out_end = 0, None
            return self._checked(Frame(index, None))
        if self._out_end is None:
            found = self._buf.find(self._sep, max(body, self._scan))
            if found < 0:
                self._scan = max(body, len(self._buf) - len(self._sep))
                return None
            self._out_end, self._scan = found, found + len(self._sep)
        out_end = self._out_end
        err_start = out_end + len(self._sep)
        err_end = self._buf.find(self._sep, max(err_start, self._scan))
        if err_end < 0:
            self._scan = max(err_start, len(self._buf) - len(self._sep))
            return None
        frame = Frame(index, int(rc_text), bytes(self._buf[body:out_end]), bytes(self._buf[err_start:err_end]))
        del self._buf[: err_end + len(self._sep)]
        self._scan, self._out_end = 0, None
        return self._checked(frame)

    def _checked(self, frame: Frame) -> Frame | None:
        if frame.index < self._count:
            return frame
        self.junk += b"frame for unknown command %d\n" % frame.index
        return self._next()
