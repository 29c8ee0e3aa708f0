"""The digest every node program computes: the manifest's (blake2b-256), read in 4 MiB chunks."""

import hashlib


def digest(p):
    h = hashlib.blake2b(digest_size=32)
    with open(p, "rb") as f:
        for c in iter(lambda: f.read(4 << 20), b""):
            h.update(c)
    return h.hexdigest()
