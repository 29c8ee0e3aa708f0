"""Programs that run on the nodes, under macOS's /usr/bin/python3 (Python 3.9, standard library only).

Each program is a file here, linted and tested like the rest of the package, and sent as it is: the controller
reads it (`program`) and runs it on the node with `/usr/bin/python3 -c PROGRAM ARGS...` over SSH. A program
shares code with another through plain modules here: a line `from macfleet.node.NAME import ...` is replaced by
that module's text when the program is read (each module once), so the node needs nothing installed, and this
machine can import the same modules to test them. Node code keeps to Python 3.9 (no `match`, no `X | Y` at run
time): ruff checks it for that target (pyproject's per-file-target-version).

This package is the node's side: nothing here imports macfleet outside it, and its programs run no controller
code.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
_SHARED = re.compile(r"from macfleet\.node\.(\w+) import [\w, ]+$")


@functools.cache
def program(name: str) -> str:
    """The text of the node program `name` (a file here), with the shared modules it imports put in place."""
    return _expand(name, set())


def _expand(name: str, seen: set[str]) -> str:
    seen.add(name)
    out = []
    for line in (HERE / f"{name}.py").read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("from macfleet."):
            m = _SHARED.match(line.rstrip("\n"))
            if m is None:
                raise ValueError(f"macfleet/node/{name}.py: {line.strip()!r}: a node program imports only "
                                 "`from macfleet.node.NAME import a, b` on one line")
            if m.group(1) not in seen:
                out.append(_expand(m.group(1), seen))
            continue
        out.append(line)
    return "".join(out)
