"""land_files(MODE, STAGING, FINAL, manifest) on the node -> (ok, bad {path: why}).
MODE "land": every staged file whose digest matches moves to FINAL/<path> (os.replace); a final file already
             matching stays; a staged file of full size whose digest differs is removed.
MODE "check": only reports."""

import os

from macfleet.node.digest import digest


def matches(p, f):
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return "absent"
    if not os.path.isfile(p) or os.path.islink(p):
        return "not a regular file"
    if st.st_size != f["size"]:
        return f"size {st.st_size:d}, expected {int(f['size']):d}"
    return None if digest(p) == f["digest"] else "digest differs"


def land_files(mode, staging, final, manifest):
    ok, bad = [], {}
    for f in manifest["files"]:
        rel = f["path"]
        dst = os.path.join(final, rel)
        if matches(dst, f) is None:
            ok.append(rel)
            continue
        if mode == "check":
            bad[rel] = matches(dst, f)
            continue
        src = os.path.join(staging, rel)
        why = matches(src, f)
        if why is not None:
            if why == "digest differs":
                os.remove(src)  # complete but wrong: rsync would take it as done; sent afresh next time
            bad[rel] = why
            continue
        os.chmod(src, 0o755 if f.get("executable") else 0o644)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)
        ok.append(rel)
    return ok, bad
