"""Runs on the node (/usr/bin/python3) for the whole push: one JSON request a line on stdin, each handled in its
own thread, one JSON answer a line on stdout carrying the request's id. It only lands files and runs rsync to a
peer with fixed flags (argv 1: RSYNC_ARGV as JSON); it ends when stdin closes (the push ended or the controller
died). argv 2: the mesh known_hosts file (~ expanded here).
  {"op": "land", "mode", "staging", "final", "manifest"} -> {"ok": [...], "bad": {path: why}}
  {"op": "rsync", "src_dir", "dest", "dst_dir", "files"} -> {"rc": int, "stderr": str}
  {"op": "preflight", "models", "name", "manifest"} -> preflight()'s answer
  {"op": "known_hosts", "text"} -> {} (the mesh known_hosts, written whole and renamed into place)
  {"op": "size", "dirs"} -> {"bytes": int} (under those directories, for progress)"""

import contextlib
import json
import os
import subprocess
import sys
import threading

from macfleet.node.land import land_files
from macfleet.node.preflight import preflight


def put_known_hosts(path, text):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(path), 0o700)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def size_under(dirs):
    total = 0
    for top in dirs:
        for d, _, files in os.walk(top):
            for f in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(d, f)).st_size
    return total


def answer(req, rsync_argv, known_hosts, env):
    op = req["op"]
    if op == "land":
        ok, bad = land_files(req["mode"], req["staging"], req["final"], req["manifest"])
        return {"ok": ok, "bad": bad}
    if op == "rsync":
        argv = [*rsync_argv, req["src_dir"] + "/", req["dest"] + ":" + req["dst_dir"] + "/"]
        p = subprocess.run(argv, input="\0".join(req["files"]).encode(), capture_output=True, env=env)
        return {"rc": p.returncode, "stderr": p.stderr.decode(errors="replace")[-2000:]}
    if op == "preflight":
        return preflight(req["models"], req["name"], req["manifest"], bool(req.get("digests", True)))
    if op == "known_hosts":
        put_known_hosts(known_hosts, req["text"])
        return {}
    if op == "size":
        return {"bytes": size_under(req["dirs"])}
    return {"error": "unknown op"}


def main():
    rsync_argv = json.loads(sys.argv[1])
    known_hosts = os.path.expanduser(sys.argv[2])
    out = threading.Lock()
    env = dict(os.environ, PATH=sys.argv[3] + ":" + os.environ.get("PATH", ""))  # Homebrew's rsync first

    def handle(req):
        try:
            ans = answer(req, rsync_argv, known_hosts, env)
        except Exception as exc:
            ans = {"error": repr(exc)[-500:]}
        ans["id"] = req["id"]
        with out:
            sys.stdout.write(json.dumps(ans) + "\n")
            sys.stdout.flush()

    for line in sys.stdin:
        threading.Thread(target=handle, args=(json.loads(line),), daemon=True).start()


if __name__ == "__main__":
    main()
