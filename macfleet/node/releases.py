"""Shared by the programs that read an install root (exo's, llama.cpp's)."""

import os


def releases(root):
    """(the release `current` points at, or None; the releases present, oldest first)."""
    rel = os.path.join(root, "releases")
    try:
        current = os.path.basename(os.readlink(os.path.join(root, "current")).rstrip("/"))
    except OSError:
        current = None
    names = []
    if os.path.isdir(rel):
        names = sorted((n for n in os.listdir(rel) if not n.startswith(".") and os.path.isdir(os.path.join(rel, n))),
                       key=lambda n: (os.stat(os.path.join(rel, n)).st_mtime, n))
    return current, names
