"""argv: ROOT NAME... Prints {name: the release's PORTS_FILE text, or null when it has none}."""

import json
import os
import sys

from macfleet.node.release_files import PORTS_FILE


def ports_files(root, names):
    out = {}
    for name in names:
        try:
            with open(os.path.join(root, "releases", name, PORTS_FILE), encoding="utf-8") as f:
                out[name] = f.read(65536)
        except OSError:
            out[name] = None
    return out


if __name__ == "__main__":
    print(json.dumps(ports_files(sys.argv[1], sys.argv[2:])))
