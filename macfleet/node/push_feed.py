"""Runs on the seed (/usr/bin/python3) for the whole push, reading binary frames on stdin: a JSON header line
{"dir", "path", "offset", "size"}, then the file's bytes from `offset` to `size`. The bytes go into DIR/PATH from
`offset` (what is staged there is kept: a partial file continues); then it answers one JSON line {"path",
"digest"}: the blake2b of the whole file as it now is on disk (the bytes kept, then those received), so the
controller knows at once whether it arrived intact. A stream cut mid-file leaves a partial file in staging, never
anything under a final name."""

import hashlib
import json
import os
import sys


def receive(inp, h):
    """One frame's bytes into place; its digest, or None when the stream ended mid-file."""
    rel, off, size = h["path"], int(h["offset"]), int(h["size"])
    p = os.path.join(h["dir"], rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    d = hashlib.blake2b(digest_size=32)
    with os.fdopen(os.open(p, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as f:
        f.truncate(off)
        for c in iter(lambda: f.read(min(4 << 20, off - f.tell())), b""):
            d.update(c)
        f.seek(off)
        left = size - off
        while left:
            c = inp.read(min(left, 1 << 20))
            if not c:
                return None
            f.write(c)
            d.update(c)
            left -= len(c)
    return d.hexdigest()


def main():
    inp = sys.stdin.buffer
    while True:
        line = inp.readline()
        if not line:
            break
        h = json.loads(line)
        rel, off, size = h["path"], int(h["offset"]), int(h["size"])
        if os.path.isabs(rel) or ".." in rel.split("/") or not 0 <= off <= size:
            sys.exit("bad frame " + repr(line[:200]))
        got = receive(inp, h)
        if got is None:
            sys.exit(0)
        sys.stdout.write(json.dumps({"path": rel, "digest": got}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
