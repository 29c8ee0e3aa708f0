"""`afplay` stand-in: plays nothing, records the call in the node's run/afplay.log (one JSON line each), so a
test can tell that `rdma enable` made the right box ping.

The real afplay prints nothing and exits 0; its message for an unreadable file is a guess (docs/lab.md).
"""

from __future__ import annotations

import os
import sys
import time

from .common import Node, err


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - plays FILE, prints nothing, exit 0: afplay(1); the missing-file message: GUESS; run/afplay.log is the lab's
#   (LAB_ONLY in macfleet/lab/lab_only.py)
def afplay(node: Node, args: list[str]) -> int:
    files = [a for a in args if not a.startswith("-")]
    if not files:
        err("usage: afplay [option...] audio_file")
        return 1
    path = files[-1]
    if not path.startswith("/System/Library/Sounds/") and not os.path.exists(path):
        err(f"Error: AudioFileOpen failed ('wht?') for {path}")
        return 1
    import json

    with open(node.dir / "run" / "afplay.log", "a") as f:
        f.write(json.dumps({"at": time.time(), "args": args, "user": os.getuid()}) + "\n")
    sys.stdout.flush()
    return 0
