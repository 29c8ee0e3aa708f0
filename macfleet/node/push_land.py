"""Runs on the node under /usr/bin/python3 with the manifest on stdin. argv: MODE STAGING FINAL (land_files).
Prints {"ok": [...], "bad": {path: why}}."""

import json
import sys

from macfleet.node.land import land_files

if __name__ == "__main__":
    ok, bad = land_files(sys.argv[1], sys.argv[2], sys.argv[3], json.load(sys.stdin))
    print(json.dumps({"ok": ok, "bad": bad}))
