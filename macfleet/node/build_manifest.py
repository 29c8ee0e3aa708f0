"""argv: RELEASE_DIR MAX_FILES. Prints {"files": [...], "links": [...], "venv_homes": {pyvenv.cfg path: home}} or
{"error": why}. Digests as every node program does (digest.py)."""

import json
import os
import stat
import sys

from macfleet.node.digest import digest


def fail(why):
    print(json.dumps({"error": why}))
    sys.exit(0)


def venv_home(p):
    home = None
    with open(p, encoding="utf-8", errors="replace") as f:
        for line in f:
            k, _, v = line.partition("=")
            if k.strip() == "home":
                home = v.strip()
    return home


def main():
    root, limit = sys.argv[1], int(sys.argv[2])
    files, links, homes = [], [], {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                links.append({"path": rel, "target": os.readlink(p)})
            elif stat.S_ISREG(st.st_mode):
                files.append({"path": rel, "size": st.st_size, "digest": digest(p),
                              "executable": bool(st.st_mode & 0o111)})
                if name == "pyvenv.cfg" and st.st_size < 65536:
                    home = venv_home(p)
                    if home is not None:
                        homes[rel] = home
            else:
                fail(f"{rel}: not a regular file or a link")
            if len(files) + len(links) > limit:
                fail(f"more than {limit:d} files")
    print(json.dumps({"files": files, "links": links, "venv_homes": homes}))


if __name__ == "__main__":
    main()
