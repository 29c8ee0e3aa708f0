"""argv: ROOT NAME. Points `current` at releases/NAME by renaming a fresh symlink over it (atomic)."""

import os
import sys


def flip(root, name):
    if not os.path.isdir(os.path.join(root, "releases", name)):
        sys.exit(f"release {name} is not on this node")
    tmp = os.path.join(root, ".current.macfleet-tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("releases", name), tmp)
    os.replace(tmp, os.path.join(root, "current"))


if __name__ == "__main__":
    flip(sys.argv[1], sys.argv[2])
