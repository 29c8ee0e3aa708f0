"""argv: DIR. stdin: the manifest's links. Prints {path: why} for each link that is absent or reads otherwise."""

import json
import os
import sys


def bad_links(root, links):
    bad = {}
    for link in links:
        p = os.path.join(root, link["path"])
        if not os.path.islink(p):
            bad[link["path"]] = "absent" if not os.path.lexists(p) else "not a link"
        elif os.readlink(p) != link["target"]:
            bad[link["path"]] = f"points at {os.readlink(p)}, expected {link['target']}"
    return bad


if __name__ == "__main__":
    print(json.dumps(bad_links(sys.argv[1], json.load(sys.stdin))))
