"""Saved captures instead of a live node: what `facts parse` and `topology links --from` read."""

from __future__ import annotations

import sys
from pathlib import Path

from macfleet.errors import UsageError

STDIN = "-"


def read_capture(path: Path) -> str:
    """A capture file ('-' for stdin) as text (UTF-8, undecodable bytes replaced); UsageError when it cannot
    be read."""
    if str(path) == STDIN:
        return sys.stdin.read()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    return data.decode("utf-8", errors="replace")
