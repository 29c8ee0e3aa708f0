"""Runs on the node with the manifest on stdin. argv: MODELS NAME. Prints preflight()'s answer as JSON."""

import json
import sys

from macfleet.node.preflight import preflight

if __name__ == "__main__":
    print(json.dumps(preflight(sys.argv[1], sys.argv[2], json.load(sys.stdin))))
