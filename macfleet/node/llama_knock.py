"""argv: a JSON list of [address, port]. Connects to each; prints which accepted (null), and why not."""

import json
import socket
import sys


def knock(targets):
    out = {}
    for address, port in targets:
        key = f"{address}:{port:d}"
        try:
            socket.create_connection((address, port), timeout=2).close()
            out[key] = None
        except OSError as exc:
            out[key] = exc.strerror or str(exc)
    return out


if __name__ == "__main__":
    print(json.dumps(knock(json.loads(sys.argv[1]))))
