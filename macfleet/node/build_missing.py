"""stdin: a JSON list of absolute paths. Prints the JSON list of those that do not exist here."""

import json
import os
import sys

if __name__ == "__main__":
    print(json.dumps([p for p in json.load(sys.stdin) if not os.path.exists(p)]))
