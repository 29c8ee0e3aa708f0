"""llama.cpp builds for the lab: the layout a real llama.cpp build leaves (`cmake --build build` puts its
programs in build/bin/), with a stand-in `rpc-server` and stubs for the head's programs.

Build layout (`write_build(out_dir)`; usable as `macfleet rollout llama-rpc --source DIR`)::

    DIR/
      VERSION               llama.cpp's build number and commit, one line (e.g. "b6100")
      bin/rpc-server        entry point, `#!` the interpreter /usr/bin/python3 leads to; runs lib/rpc_server.py
      bin/llama-cli         stubs: print the version line llama.cpp's programs print for --version, exit 0
      bin/llama-server
      lib/rpc_server.py     the stand-in (a verbatim copy of macfleet/lab/llama/rpc_server.py; stdlib only)

A `--broken` build's rpc-server prints the real one's "Failed to find RPC backend" and exits 1: what a
health gate sees of a build that cannot serve. Command line: `macfleet lab llama-build --out DIR [--broken]`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DEFAULT_VERSION = "b6100"
_SOURCE = Path(__file__).with_name("rpc_server.py")

_RPC_ENTRY = """#!{python}
# rpc-server (macfleet lab stand-in for llama.cpp's) - runs ../lib/rpc_server.py
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(_root, "lib"))

import rpc_server  # noqa: E402

if __name__ == "__main__":
    sys.exit(rpc_server.main(sys.argv[1:], broken={broken}))
"""

_STUB = """#!/bin/sh
# {name} (macfleet lab stub): the head's program; the lab runs no model
echo "version: {number} (0000000)" >&2
echo "built with macfleet lab for arm64-apple-darwin" >&2
exit 0
"""


def write_build(out_dir: Path, *, version: str = DEFAULT_VERSION, broken: bool = False) -> Path:
    """Write a llama.cpp stand-in build into `out_dir` (absent or empty); returns it."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    (out_dir / "bin").mkdir(parents=True, exist_ok=True)
    (out_dir / "lib").mkdir(exist_ok=True)
    shutil.copyfile(_SOURCE, out_dir / "lib" / "rpc_server.py")
    entry = out_dir / "bin" / "rpc-server"
    # the real interpreter: on a node /usr/bin/python3 is the Command Line Tools stub until bootstrap
    entry.write_text(_RPC_ENTRY.replace("{python}", os.path.realpath("/usr/bin/python3"), 1)
                     .replace("{broken}", str(bool(broken))))
    entry.chmod(0o755)
    for name in ("llama-cli", "llama-server"):
        stub = out_dir / "bin" / name
        stub.write_text(_STUB.format(name=name, number=version.lstrip("b")))
        stub.chmod(0o755)
    (out_dir / "VERSION").write_text(version + ("-broken" if broken else "") + "\n")
    return out_dir
