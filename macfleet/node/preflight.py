"""preflight(MODELS, NAME, manifest) on the node: where the models dir is, free space (df -k on the nearest
existing directory), which files are final (size, digest when the size matches and `digests`) and what is staged
(size). Without `digests` it only stats: the sizes a push compares before it hashes anything or takes the lock."""

import os
import subprocess

from macfleet.node.digest import digest


def preflight(models, name, manifest, digests=True):
    models = os.path.expanduser(models)
    final = os.path.join(models, name)
    staging = os.path.join(models, ".macfleet-staging", name)
    probe = models
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:  # df failing to start is that read's failure (free space unknown), never the whole preflight's
        df = subprocess.run(["df", "-k", probe], capture_output=True, text=True)
    except Exception as exc:
        df = subprocess.CompletedProcess(["df"], 126, "", f"{type(exc).__name__}: {exc}")
    have, staged = {}, {}
    for f in manifest["files"]:
        p = os.path.join(final, f["path"])
        if os.path.isfile(p) and not os.path.islink(p):
            size = os.path.getsize(p)
            have[f["path"]] = [size, digest(p) if digests and size == f["size"] else None]
        s = os.path.join(staging, f["path"])
        if os.path.isfile(s):
            staged[f["path"]] = os.path.getsize(s)
    return {"final": final, "staging": staging, "df": df.stdout, "df_rc": df.returncode,
            "have": have, "staged": staged}
