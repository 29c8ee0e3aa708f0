"""argv: ROOT LABEL_PREFIX JOBS. Prints home, what `current` points at, the releases present (oldest first), the
rpc-server jobs loaded (index -> running) and what each job's plist says."""

import json
import os
import plistlib
import subprocess
import sys

from macfleet.node.releases import releases


def job_plist(path):
    try:
        with open(path, "rb") as fh:
            job = plistlib.load(fh)
        return {"args": [str(a) for a in job.get("ProgramArguments", [])], "user": job.get("UserName")}
    except Exception as exc:
        return {"args": [], "user": None, "error": str(exc)[:200]}


def main():
    root, prefix, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    current, names = releases(root)
    loaded, plists = {}, {}
    for i in range(jobs):
        path = f"/Library/LaunchDaemons/{prefix}.{i:d}.plist"
        if not os.path.exists(path):
            continue
        plists[i] = job_plist(path)
        p = subprocess.run(["launchctl", "print", f"system/{prefix}.{i:d}"], capture_output=True, text=True)
        if p.returncode == 0:
            loaded[i] = "\tstate = running" in p.stdout
    print(json.dumps({"home": os.path.expanduser("~"), "current": current, "releases": names, "loaded": loaded,
                      "plists": plists}))


if __name__ == "__main__":
    main()
