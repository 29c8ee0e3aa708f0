"""Saved captures instead of a live node: what `facts parse` and `topology links --from` read."""

from __future__ import annotations

import sys
from pathlib import Path

from macfleet.errors import UsageError

STDIN = "-"
# The largest output of any command we read (a system_profiler -json of a big Mac) is well under 1 MiB.
MAX_CAPTURE_BYTES = 8 << 20


def _bounded(data: bytes, where: str) -> str:
    if len(data) > MAX_CAPTURE_BYTES:
        raise UsageError(f"{where} is larger than {MAX_CAPTURE_BYTES >> 20} MiB: not the output of a command we read")
    return data.decode("utf-8", errors="replace")


def _read_stdin() -> str:
    stream = getattr(sys.stdin, "buffer", None) if sys.stdin is not None else None
    if stream is None:
        raise UsageError("no standard input to read ('-' reads the capture from stdin)")
    try:
        data = stream.read(MAX_CAPTURE_BYTES + 1)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read standard input: {e}") from None
    return _bounded(data, "standard input")


def read_capture(path: Path) -> str:
    """A capture file ('-' for stdin) as text (UTF-8, undecodable bytes replaced), read with a size limit
    (/dev/zero or a FIFO must not take all memory); UsageError when it cannot be read."""
    if str(path) == STDIN:
        return _read_stdin()
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_CAPTURE_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    return _bounded(data, str(path))
