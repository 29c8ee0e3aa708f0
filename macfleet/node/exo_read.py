"""argv: ROOT LABEL. Prints what `current` points at, the releases present (oldest first), whether the job runs."""

import json
import subprocess
import sys

from macfleet.node.releases import releases

if __name__ == "__main__":
    root, label = sys.argv[1], sys.argv[2]
    current, names = releases(root)
    p = subprocess.run(["launchctl", "print", f"system/{label}"], capture_output=True, text=True)
    running = p.returncode == 0 and "\tstate = running" in p.stdout
    print(json.dumps({"current": current, "releases": names, "running": running}))
